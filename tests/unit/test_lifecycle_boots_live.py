"""What the live pass makes of the cluster before the shared boot decision: which pending pods
a boot may be for, and the room of serving and draining nodes."""

from __future__ import annotations

from typing import Any

from joulie.api import keys
from joulie.api.gpu import pod_gpu_count, pod_gpu_resource
from joulie.core.lifecycle_limits import Limits
from joulie.kube.projections import SlimNode, SlimPod, node_projection, pod_projection
from joulie.manager.cache import LIFECYCLE_NODE_ANNOTATIONS
from joulie.manager.lifecycle.actuator import BootOffer
from joulie.manager.lifecycle.boots import plan_for, waiting_pods
from joulie.manager.lifecycle.facts import in_flight
from tests.support.builders import container, node, pod

UNSCHEDULABLE = {
    "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
}
SHAPE = {"cpu": "16", "memory": "64Gi", "pods": "110"}
_node = node_projection(annotation_keys=LIFECYCLE_NODE_ANNOTATIONS)
_pod = pod_projection(gpu_count=pod_gpu_count, gpu_resource=pod_gpu_resource)


def ready_node(name: str, **annotations: str) -> SlimNode:
    raw: dict[str, Any] = node(name, allocatable=SHAPE, annotations=annotations)
    raw["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return _node(raw)


def waiting(name: str, cpu: str, **status: Any) -> SlimPod:
    return _pod(
        pod(
            name,
            containers=[container({"cpu": cpu, "memory": "1Gi"})],
            phase="Pending",
            status={**UNSCHEDULABLE, **status},
        )
    )


def bound(name: str, on: str, cpu: str, owner: str | None = None) -> SlimPod:
    raw = pod(
        name, node_name=on, containers=[container({"cpu": cpu})], phase="Running", owner=owner
    )
    return _pod(raw)


OFFER = BootOffer("off-0", SHAPE, can_boot=3, nodes=("off-0", "off-1", "off-2"))


def plan(nodes: list[SlimNode], pods: list[SlimPod], on: dict[str, list[SlimPod]]) -> int:
    flights = {n.name: in_flight(n) for n in nodes}
    decided = plan_for(
        waiting_pods(pods), nodes, flights, [OFFER], lambda _: None, on, Limits(), 0.0
    )
    return decided.total


def test_only_pods_a_scheduler_gave_up_on_may_boot_a_node() -> None:
    tried = waiting("tried", "12")
    fresh = _pod(pod("fresh", containers=[container({"cpu": "12"})], phase="Pending"))
    nominated = waiting("nominated", "12", nominatedNodeName="n1")
    assert [p.name for p in waiting_pods([tried, fresh, nominated])] == ["tried"]


def test_a_pod_that_fits_a_serving_nodes_free_room_boots_nothing() -> None:
    serving = ready_node("n1")
    assert plan([serving], [waiting("w", "12")], {}) == 0
    # The room taken by the pods bound there counts, a DaemonSet's pods included.
    taken = {"n1": [bound("job", "n1", "2"), bound("agent", "n1", "3", owner="DaemonSet")]}
    assert plan([serving], [waiting("w", "12")], taken) == 1


def test_a_draining_node_is_room_coming_back_and_a_cordoned_node_is_none() -> None:
    draining = ready_node("n1", **{keys.LIFECYCLE_PHASE_ANNOTATION: "draining"})
    assert plan([draining], [waiting("w", "12")], {}) == 0
    cordoned_raw: dict[str, Any] = node("n2", allocatable=SHAPE)
    cordoned_raw["spec"] = {"unschedulable": True}
    cordoned_raw["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    assert plan([_node(cordoned_raw)], [waiting("w", "12")], {}) == 1
