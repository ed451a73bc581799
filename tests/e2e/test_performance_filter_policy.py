"""The admission policy of manifests/performance-filter, applied as shipped, on the real
kube-apiserver: each pod created with ``joulie.io/workload-class: performance`` gets one unit of
the extended resource ``joulie.io/performance-pod`` in its first container's requests and
limits, everything else the pod asks for kept, so that kube-scheduler calls the extender's
filter for it alone (kube-scheduler-config.performance-filter.example.yaml; the scheduler's side
is tests/e2e/test_extender.py). Other pods are left as they are.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hack.cluster.runner import PERFORMANCE_FILTER_POLICY, LocalCluster
from joulie.api import keys
from tests.support.builders import WORK_IMAGE, container, pod_manifest
from tests.support.cluster_pods import create_pods, pod_namespace

pytestmark = pytest.mark.e2e

MARK = {keys.PERFORMANCE_POD_RESOURCE: "1"}


def performance(name: str, containers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return pod_manifest(
        name,
        containers=containers,
        annotations={keys.WORKLOAD_CLASS_ANNOTATION: "performance"},
    )


def resources(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [c.get("resources") or {} for c in pod["spec"]["containers"]]


def marked(pod: dict[str, Any]) -> bool:
    return any(keys.PERFORMANCE_POD_RESOURCE in (r.get("requests") or {}) for r in resources(pod))


def test_the_policy_is_in_force_within_the_block_and_gone_after_it(cluster: LocalCluster) -> None:
    """Before the module's policy fixture (tests run in file order). The probe's name is the
    name of a pod created meanwhile, as bench.extender's first pod is its probe: the dry runs
    must not clash with it on the way out (they did, with 409 AlreadyExists)."""
    with pod_namespace(cluster, "pf-probe") as namespace:
        with cluster.policy_in_force(PERFORMANCE_FILTER_POLICY, namespace, performance("p-0")):
            assert marked(cluster.admitted(namespace, performance("other")))
            create_pods(cluster, namespace, [performance("p-0")])
        assert not marked(cluster.admitted(namespace, performance("other")))


@pytest.fixture(scope="module")
def policy(cluster: LocalCluster) -> Iterator[None]:
    """manifests/performance-filter applied, and in force."""
    with cluster.policy_in_force(PERFORMANCE_FILTER_POLICY, "default", performance("probe")):
        yield


def test_a_performance_pod_is_marked_in_its_first_container(
    cluster: LocalCluster, policy: None
) -> None:
    first = container(
        {"cpu": "2", "memory": "1Gi"}, {"memory": "1Gi"}, name="main", image=WORK_IMAGE
    )
    second = container({"cpu": "100m"}, name="side", image=WORK_IMAGE)
    admitted = cluster.admitted("default", performance("p", [first, second]))
    main, side = resources(admitted)
    assert main["requests"] == {"cpu": "2", "memory": "1Gi", **MARK}
    assert main["limits"] == {"memory": "1Gi", **MARK}
    assert side == {"requests": {"cpu": "100m"}}
    # Not CPU or memory: the pod keeps the QoS class it would have had (Burstable here).
    assert admitted["status"]["qosClass"] == "Burstable"


def test_a_pod_that_asks_nothing_stays_best_effort(cluster: LocalCluster, policy: None) -> None:
    admitted = cluster.admitted("default", performance("empty"))
    (only,) = resources(admitted)
    assert only == {"requests": MARK, "limits": MARK}
    assert admitted["status"]["qosClass"] == "BestEffort"


def test_other_pods_are_left_alone(cluster: LocalCluster, policy: None) -> None:
    for workload_class in (None, "standard"):
        meta = {} if workload_class is None else {keys.WORKLOAD_CLASS_ANNOTATION: workload_class}
        pod = pod_manifest("s", annotations=meta)
        assert not marked(cluster.admitted("default", pod)), workload_class
    # A performance pod created already bound to a node is not scheduled: nothing to call.
    bound = performance("b")
    bound["spec"]["nodeName"] = "some-node"
    assert not marked(cluster.admitted("default", bound))
