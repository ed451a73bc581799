"""Performance pods kept off eco nodes without the extender's filter verb, on the real
kube-apiserver and kube-scheduler: the MutatingAdmissionPolicy of manifests/placement, applied
as shipped, gives every pod annotated ``joulie.io/workload-class: performance`` the node
affinity ``joulie.io/power-profile NotIn [eco]``, in each of the pod's own node selector terms,
and kube-scheduler's NodeAffinity plugin does the rest (no extender runs here).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from hack.cluster.runner import PLACEMENT_POLICY, LocalCluster
from joulie.api import keys
from tests.support.builders import kwok_node, node_group, pod_manifest
from tests.support.cluster_pods import create_pods, placed, pod_namespace
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

E2E_LABEL = "joulie.io/e2e"
NOT_ECO = {"key": keys.POWER_PROFILE_LABEL, "operator": "NotIn", "values": ["eco"]}
ZONE = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a", "b"]}
BY_NAME = {"key": "metadata.name", "operator": "In", "values": ["somewhere"]}


def performance(name: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return pod_manifest(
        name, annotations={keys.WORKLOAD_CLASS_ANNOTATION: "performance"}, spec=spec or {}
    )


def required_terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    node_affinity = (pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}
    selector = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return list(selector.get("nodeSelectorTerms") or [])


@pytest.fixture(scope="module")
def policy(cluster: LocalCluster) -> Iterator[None]:
    """manifests/placement applied, and in force."""
    with cluster.policy_in_force(PLACEMENT_POLICY, "default", performance("probe")):
        yield


@pytest.mark.parametrize(
    ("case", "affinity", "expected"),
    [
        ("no affinity", None, [{"matchExpressions": [NOT_ECO]}]),
        ("empty affinity", {}, [{"matchExpressions": [NOT_ECO]}]),
        (
            "only preferred",
            {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 1, "preference": {"matchExpressions": [ZONE]}}
                    ]
                }
            },
            [{"matchExpressions": [NOT_ECO]}],
        ),
        (
            "terms of its own",
            {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [ZONE]},
                            {"matchFields": [BY_NAME]},
                        ]
                    }
                }
            },
            [
                {"matchExpressions": [ZONE, NOT_ECO]},
                {"matchExpressions": [NOT_ECO], "matchFields": [BY_NAME]},
            ],
        ),
    ],
)
def test_a_performance_pod_is_given_the_requirement_in_every_term(
    cluster: LocalCluster,
    policy: None,
    case: str,
    affinity: dict[str, Any] | None,
    expected: list[dict[str, Any]],
) -> None:
    spec = {} if affinity is None else {"affinity": affinity}
    admitted = cluster.admitted("default", performance("p", spec))
    assert required_terms(admitted) == expected, case
    if affinity and "preferredDuringSchedulingIgnoredDuringExecution" in affinity.get(
        "nodeAffinity", {}
    ):
        kept = admitted["spec"]["affinity"]["nodeAffinity"]
        assert (
            kept["preferredDuringSchedulingIgnoredDuringExecution"]
            == (affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"])
        )


def test_other_pods_are_left_alone(cluster: LocalCluster, policy: None) -> None:
    for workload_class in (None, "standard"):
        meta = {} if workload_class is None else {keys.WORKLOAD_CLASS_ANNOTATION: workload_class}
        pod = pod_manifest("s", annotations=meta)
        assert required_terms(cluster.admitted("default", pod)) == [], workload_class
    # A performance pod created already bound to a node is not scheduled: nothing to add.
    bound = performance("b")
    bound["spec"]["nodeName"] = "some-node"
    assert required_terms(cluster.admitted("default", bound)) == []


@pytest.fixture
def profiled_nodes(cluster: LocalCluster) -> Iterator[tuple[str, dict[str, str]]]:
    """(label value, profile -> node name): an eco and a performance KWOK node of the test's own,
    labelled as the manager labels them; their taint keeps every other test's pods off."""
    case = f"placement-{uuid.uuid4().hex[:6]}"
    group = node_group("place", cpu_cores=8, memory_gib=32)
    names = {profile: f"{case}-{profile}" for profile in ("eco", "performance")}
    made = [
        kwok_node(
            name,
            group,
            labels={E2E_LABEL: case, keys.POWER_PROFILE_LABEL: profile},
            managed=False,
        )
        for profile, name in names.items()
    ]
    for node in made:
        node["spec"]["taints"] = [{"key": E2E_LABEL, "value": case, "effect": "NoSchedule"}]
    try:
        cluster.create_ready_nodes(made)
        yield case, names
    finally:
        with cluster.api() as api:
            for name in names.values():
                api.delete(f"/api/v1/nodes/{name}")


def test_kube_scheduler_alone_keeps_performance_pods_off_the_eco_node(
    cluster: LocalCluster, policy: None, profiled_nodes: tuple[str, dict[str, str]]
) -> None:
    case, names = profiled_nodes

    def pod(name: str, workload_class: str, node: str | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "tolerations": [{"key": E2E_LABEL, "operator": "Equal", "value": case}],
            "nodeSelector": {E2E_LABEL: case},
            "terminationGracePeriodSeconds": 0,
        }
        if node is not None:  # a pod that could only go to this node
            spec["nodeSelector"]["kubernetes.io/hostname"] = node
        return pod_manifest(
            name, annotations={keys.WORKLOAD_CLASS_ANNOTATION: workload_class}, spec=spec
        )

    with pod_namespace(cluster, "placement") as namespace:
        create_pods(
            cluster,
            namespace,
            [pod(f"perf-{i}", "performance") for i in range(4)]
            + [
                pod("perf-eco-only", "performance", names["eco"]),
                pod("std-eco-only", "standard", names["eco"]),
            ],
        )
        wait_until(
            lambda: all(
                node for name, node in placed(cluster, namespace).items() if name != "perf-eco-only"
            ),
            60,
            "every pod that may run somewhere to be placed",
        )
        where = placed(cluster, namespace)
        assert {where[f"perf-{i}"] for i in range(4)} == {names["performance"]}
        assert where["std-eco-only"] == names["eco"]
        # The one performance pod that could only run on the eco node waits, and says why.
        with cluster.api() as api:
            waiting = api.get(f"/api/v1/namespaces/{namespace}/pods/perf-eco-only").json()
        assert where["perf-eco-only"] == ""
        conditions = waiting["status"].get("conditions") or []
        message = " ".join(c.get("message", "") for c in conditions if c["type"] == "PodScheduled")
        assert "affinity" in message, conditions
