"""KWOK nodes from an inventory register and turn Ready; kube-scheduler places a GPU pod on a GPU
node, KWOK runs it and finishes it after the duration in its annotation."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from hack.cluster.nodes import node_manifests
from hack.cluster.runner import LocalCluster
from hack.cluster.stages import RUN_DURATION_ANNOTATION
from joulie.api import keys
from joulie.api.inventory import load_inventory
from tests.support.builders import container, pod_manifest

pytestmark = pytest.mark.kube

INVENTORIES = Path(__file__).resolve().parents[1] / "data" / "inventories"


@pytest.fixture(scope="module")
def exp02_nodes(cluster: LocalCluster) -> list[dict[str, Any]]:
    inventory = load_inventory(INVENTORIES / "02-cluster-nodes-5k.yaml")
    nodes = node_manifests(inventory, limit=100)
    cluster.create_nodes(nodes)
    return nodes


def test_hundred_exp02_nodes_register_and_turn_ready(
    cluster: LocalCluster, exp02_nodes: list[dict[str, Any]]
) -> None:
    names = [n["metadata"]["name"] for n in exp02_nodes]
    assert len(names) == 100
    cluster.wait_nodes_ready(names, timeout=120)
    with cluster.api() as api:
        node = api.get(f"/api/v1/nodes/{names[0]}").json()
    assert node["metadata"]["labels"][keys.MANAGED_LABEL] == "true"
    assert node["status"]["allocatable"]["cpu"] == node["status"]["capacity"]["cpu"]
    # Every hardware family of the inventory is in the sample.
    families = {
        n["metadata"]["labels"].get(keys.HW_GPU_MODEL_LABEL)
        or n["metadata"]["labels"][keys.HW_CPU_MODEL_LABEL]
        for n in exp02_nodes
    }
    assert len(families) == 8


def wait_phase(
    cluster: LocalCluster, namespace: str, name: str, phase: str, timeout: float
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    with cluster.api() as api:
        while True:
            pod: dict[str, Any] = api.get(f"/api/v1/namespaces/{namespace}/pods/{name}").json()
            if pod.get("status", {}).get("phase") == phase:
                return pod
            assert time.monotonic() < deadline, f"{name} never {phase}: {pod.get('status')}"
            time.sleep(0.2)


def test_gpu_pod_is_scheduled_on_a_gpu_node_runs_and_finishes(
    cluster: LocalCluster, exp02_nodes: list[dict[str, Any]], namespace: str
) -> None:
    cluster.wait_nodes_ready([n["metadata"]["name"] for n in exp02_nodes], timeout=120)
    train = container(
        {"cpu": "2", "nvidia.com/gpu": "1"},
        {"nvidia.com/gpu": "1"},
        name="main",
        image="example.com/train:1",
    )
    pod = pod_manifest("train", annotations={RUN_DURATION_ANNOTATION: "4s"}, containers=[train])
    with cluster.api() as api:
        created = api.post(f"/api/v1/namespaces/{namespace}/pods", json=pod)
        assert created.status_code == 201, created.text

    running = wait_phase(cluster, namespace, "train", "Running", timeout=60)
    started = time.monotonic()
    node_name = running["spec"]["nodeName"]
    with cluster.api() as api:
        node = api.get(f"/api/v1/nodes/{node_name}").json()
    assert int(node["status"]["allocatable"].get("nvidia.com/gpu", "0")) >= 1
    assert node["metadata"]["labels"][keys.HW_GPU_COUNT_LABEL] != "0"

    finished = wait_phase(cluster, namespace, "train", "Succeeded", timeout=60)
    elapsed = time.monotonic() - started
    assert elapsed >= 3, f"finished after {elapsed:.1f}s, before its 4s run duration"
    (status,) = finished["status"]["containerStatuses"]
    assert status["state"]["terminated"]["reason"] == "Completed"


def test_pod_without_a_fitting_node_stays_pending(cluster: LocalCluster, namespace: str) -> None:
    gpus = {"nvidia.com/gpu": "64"}
    pod = pod_manifest("too-big", containers=[container(gpus, gpus, name="main", image="x")])
    with cluster.api() as api:
        assert api.post(f"/api/v1/namespaces/{namespace}/pods", json=pod).status_code == 201
        deadline = time.monotonic() + 20
        while True:
            got = api.get(f"/api/v1/namespaces/{namespace}/pods/too-big").json()
            conditions = {c["type"]: c for c in got["status"].get("conditions", [])}
            if "PodScheduled" in conditions:
                break
            assert time.monotonic() < deadline
            time.sleep(0.2)
    assert conditions["PodScheduled"]["status"] == "False"
    assert conditions["PodScheduled"]["reason"] == "Unschedulable"
    assert got["status"]["phase"] == "Pending"


def test_deleted_pods_go_away(
    cluster: LocalCluster, exp02_nodes: list[dict[str, Any]], namespace: str
) -> None:
    pod = pod_manifest("short", containers=[container(name="main", image="x")])
    with cluster.api() as api:
        assert api.post(f"/api/v1/namespaces/{namespace}/pods", json=pod).status_code == 201
    wait_phase(cluster, namespace, "short", "Running", timeout=60)
    with cluster.api() as api:
        api.delete(f"/api/v1/namespaces/{namespace}/pods/short").raise_for_status()
        deadline = time.monotonic() + 30
        while api.get(f"/api/v1/namespaces/{namespace}/pods/short").status_code != 404:
            assert time.monotonic() < deadline, "pod never went away"
            time.sleep(0.2)


def test_kwok_reasserts_ready_on_a_node_it_manages(
    cluster: LocalCluster, exp02_nodes: list[dict[str, Any]]
) -> None:
    name = exp02_nodes[-1]["metadata"]["name"]
    cluster.wait_nodes_ready([name], timeout=120)
    unknown = {
        "status": {
            "conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}]
        }
    }
    with cluster.api() as api:
        patched = api.patch(
            f"/api/v1/nodes/{name}/status",
            json=unknown,
            headers={"Content-Type": "application/strategic-merge-patch+json"},
        )
        assert patched.status_code == 200, patched.text
        ready = {c["type"]: c["status"] for c in patched.json()["status"]["conditions"]}
        assert ready["Ready"] == "Unknown"
    cluster.wait_nodes_ready([name], timeout=30)
