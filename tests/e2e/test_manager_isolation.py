"""One node whose NodeTwin the cluster refuses does not hold back the others.

A ValidatingAdmissionPolicy denies every write to one node's NodeTwin. The manager converges every
other node, keeps retrying the refused one on its own, reports it once as an Event, still cleans
up after a deleted node, and converges the refused node once the policy is gone.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hack.cluster.runner import LocalCluster
from joulie.api import keys
from joulie.api.inventory import load_inventory
from tests.e2e.test_manager import INVENTORY, twins
from tests.e2e.test_manager_handover import E2E_LABEL, INTERVAL_S, HandoverManager
from tests.support.builders import kwok_node, nodetwin
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

VALUE = "isolation"
POLICY = "joulie-test-deny-one-twin"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"


@pytest.fixture
def nodes(cluster: LocalCluster) -> Iterator[list[str]]:
    manifests = [
        kwok_node(f"iso-{i}", group, labels={E2E_LABEL: VALUE})
        for i, group in enumerate(load_inventory(INVENTORY).nodes)
    ]
    cluster.create_ready_nodes(manifests)
    names = [n["metadata"]["name"] for n in manifests]
    yield names
    with cluster.api() as api:
        for name in names:
            api.delete(f"/api/v1/nodes/{name}")


def deny_policy(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["joulie.io"],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["nodetwins", "nodetwins/status"],
                    }
                ]
            },
            "validations": [
                {
                    "expression": f"object.metadata.name != '{name}'",
                    "message": f"the test refuses writes to the NodeTwin of {name}",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY},
        "spec": {"policyName": POLICY, "validationActions": ["Deny"]},
    }
    return policy, binding


def refused(api: httpx.Client, name: str) -> bool:
    """Whether the policy is in force: a dry-run create of the twin is denied."""
    answer = api.post(
        f"/apis/{keys.API_VERSION}/{keys.NODE_TWIN_PLURAL}",
        params={"dryRun": "All"},
        json=nodetwin(name),
    )
    return answer.status_code in (403, 422)


def complete(twin: dict[str, Any] | None) -> bool:
    return twin is not None and "schedulableClass" in (twin.get("status") or {})


def test_one_refused_twin_holds_back_no_other(
    cluster: LocalCluster, nodes: list[str], tmp_path: Path
) -> None:
    denied, doomed, others = nodes[0], nodes[-1], nodes[1:]
    policy, binding = deny_policy(denied)
    with cluster.api() as api:
        api.post(f"{ADMISSION}/validatingadmissionpolicies", json=policy).raise_for_status()
        api.post(f"{ADMISSION}/validatingadmissionpolicybindings", json=binding).raise_for_status()
        wait_until(lambda: refused(api, denied), 30, "the policy to be in force")
    manager = HandoverManager(cluster, tmp_path, "isolation", NODE_SELECTOR=f"{E2E_LABEL}={VALUE}")
    try:

        def converged_others() -> bool:
            with cluster.api() as api:
                current = twins(api)
            return all(complete(current.get(n)) for n in others)

        wait_until(converged_others, 30, "every other node to converge")
        with cluster.api() as api:
            assert denied not in twins(api)
        assert manager.sample("joulie_manager_failing_nodes") == 1
        errors = manager.sample("joulie_manager_node_errors_total")
        assert errors >= 1
        # Retried on its own, with backoff capped at the reconcile interval.
        wait_until(
            lambda: manager.sample("joulie_manager_node_errors_total") >= errors + 3,
            6 * INTERVAL_S + 10,
            "the refused node to be retried",
        )

        def warnings() -> list[dict[str, Any]]:
            with cluster.api() as api:
                listed = api.get("/apis/events.k8s.io/v1/namespaces/default/events")
            listed.raise_for_status()
            return [
                e
                for e in listed.json()["items"]
                if e.get("reason") == "NodeTwinWriteFailed" and e["regarding"].get("name") == denied
            ]

        (event,) = wait_until(warnings, 20, "the refusal reported as an Event")
        assert event["type"] == "Warning"
        assert denied in event["note"]

        # Clean-up goes on while the node fails: a deleted node's twin is removed.
        with cluster.api() as api:
            api.delete(f"/api/v1/nodes/{doomed}").raise_for_status()

        def removed() -> bool:
            with cluster.api() as api:
                return doomed not in twins(api)

        wait_until(removed, 4 * INTERVAL_S + 10, "the deleted node's twin to be removed")

        with cluster.api() as api:
            api.delete(f"{ADMISSION}/validatingadmissionpolicybindings/{POLICY}")
            api.delete(f"{ADMISSION}/validatingadmissionpolicies/{POLICY}")

        def denied_converged() -> bool:
            with cluster.api() as api:
                return complete(twins(api).get(denied))

        wait_until(denied_converged, 30, "the refused node to converge once allowed")
        wait_until(
            lambda: manager.sample("joulie_manager_failing_nodes") == 0, 10, "no failing node"
        )
        assert len(warnings()) == 1  # reported once, not once per retry
        manager.stop()
        assert manager.process.returncode == 0, manager.log.read_text()[-4000:]
    finally:
        with cluster.api() as api:
            api.delete(f"{ADMISSION}/validatingadmissionpolicybindings/{POLICY}")
            api.delete(f"{ADMISSION}/validatingadmissionpolicies/{POLICY}")
        manager.stop_quietly()
