"""The simulator's Indexed Job against a real kube-apiserver: the generated ConfigMap and Job pass
validation and defaulting (a server-side dry run), keep the fields a sweep depends on, and a
broken Job is refused, so a manifest the API server would reject cannot slip through."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from hack.cluster.runner import LocalCluster
from joulie.sim.sweep import expand, indexed_job

pytestmark = pytest.mark.kube

DRY_RUN = {"dryRun": "All"}


def manifests(namespace: str, results_claim: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    specs = expand({"scenario": "kube", "seeds": [1, 2, 3], "params": {"static_hp_frac": [0.3]}})
    config_map, job = indexed_job(
        specs,
        image="joulie:test",
        namespace=namespace,
        name="sweep",
        results_claim=results_claim,
        parallelism=4,
    )
    return config_map, job


def create(api: httpx.Client, namespace: str, obj: dict[str, Any]) -> httpx.Response:
    base = "/api/v1" if obj["apiVersion"] == "v1" else f"/apis/{obj['apiVersion']}"
    plural = {"ConfigMap": "configmaps", "Job": "jobs"}[obj["kind"]]
    return api.post(f"{base}/namespaces/{namespace}/{plural}", params=DRY_RUN, json=obj)


@pytest.mark.parametrize("results_claim", ["sim-results", None])
def test_the_api_server_accepts_the_config_map_and_indexed_job(
    cluster: LocalCluster, namespace: str, results_claim: str | None
) -> None:
    config_map, job = manifests(namespace, results_claim)
    with cluster.api() as api:
        stored_map = create(api, namespace, config_map)
        assert stored_map.status_code == 201, stored_map.text
        stored_job = create(api, namespace, job)
        assert stored_job.status_code == 201, stored_job.text
    assert stored_map.json()["data"] == config_map["data"]
    spec = stored_job.json()["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == 9
    assert spec["parallelism"] == 4
    # Dropped silently if the server did not know the field: the retry budget would be global.
    assert spec["backoffLimitPerIndex"] == 1
    container = spec["template"]["spec"]["containers"][0]
    assert "$(JOB_COMPLETION_INDEX)" in container["command"]
    assert spec["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


def test_the_dry_run_created_nothing(cluster: LocalCluster, namespace: str) -> None:
    _, job = manifests(namespace, None)
    with cluster.api() as api:
        assert create(api, namespace, job).status_code == 201
        response = api.get(f"/apis/batch/v1/namespaces/{namespace}/jobs/{job['metadata']['name']}")
    assert response.status_code == 404


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda j: j["spec"].update(parallelism=-1), "spec.parallelism"),
        (lambda j: j["spec"].update(completionMode="NonIndexed"), "backoffLimitPerIndex"),
        (lambda j: j["spec"]["template"]["spec"].update(restartPolicy="Always"), "restartPolicy"),
    ],
    ids=["negative-parallelism", "per-index-backoff-without-indexes", "restart-always"],
)
def test_a_broken_job_is_refused(
    cluster: LocalCluster, namespace: str, mutate: Callable[[dict[str, Any]], None], needle: str
) -> None:
    _, job = manifests(namespace, "sim-results")
    broken = copy.deepcopy(job)
    mutate(broken)
    with cluster.api() as api:
        response = create(api, namespace, broken)
    assert response.status_code == 422, response.text
    assert needle in response.text
