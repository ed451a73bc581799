"""From Nodes and Pods as the API server sends them to the lifecycle's inputs: which pods make a
node busy, what a node offers a pending pod, and what is in flight on it (read back from its
annotations and taints, as a restarted manager reads its predecessor's work)."""

from __future__ import annotations

from typing import Any

from joulie.api import keys
from joulie.api.gpu import pod_gpu_count, pod_gpu_resource
from joulie.core.lifecycle import fits_pending
from joulie.kube.ownership import owned_projection
from joulie.kube.projections import node_projection, pod_projection
from joulie.manager.cache import LIFECYCLE_NODE_ANNOTATIONS, MIRROR_ANNOTATION, workload_nodes
from joulie.manager.lifecycle.facts import (
    Phase,
    annotation_time,
    capacity,
    in_flight,
    launched_at,
    pending_could_use,
    pending_demand,
)
from tests.support.builders import container, pod

project_node = node_projection(annotation_keys=LIFECYCLE_NODE_ANNOTATIONS)
project_pod = pod_projection(
    annotation_keys=[keys.WORKLOAD_CLASS_ANNOTATION, MIRROR_ANNOTATION],
    gpu_count=pod_gpu_count,
    gpu_resource=pod_gpu_resource,
)
project_twin = owned_projection("joulie-manager")


def raw_node(
    annotations: dict[str, str] | None = None, allocatable: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "n1",
            "uid": "u1",
            "creationTimestamp": "2026-12-01T00:00:00Z",
            "annotations": annotations or {},
        },
        "spec": {"taints": [{"key": keys.DRAINING_TAINT, "effect": "NoSchedule"}]},
        "status": {
            "allocatable": {"cpu": "64", **(allocatable or {})},
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-01T00:01:00Z"}
            ],
        },
    }


def raw_pod(
    node: str = "n1",
    phase: str = "Running",
    owner: str = "ReplicaSet",
    resources: dict[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    return pod(
        namespace="ns",
        owner=owner,
        annotations=extra.get("annotations", {}),
        node_name=node,
        containers=[container(resources or {"cpu": "1"})],
        phase=phase,
        status={"nominatedNodeName": extra["nominated"]} if "nominated" in extra else None,
    )


def test_which_pods_make_a_node_busy() -> None:
    assert workload_nodes(project_pod(raw_pod())) == ("n1",)
    assert workload_nodes(project_pod(raw_pod(owner="DaemonSet"))) == ()
    # A static pod's mirror as the kubelet makes it: annotated, owned by its Node, kube-system.
    mirror = raw_pod(owner="Node", annotations={MIRROR_ANNOTATION: "abc"})
    mirror["metadata"]["namespace"] = "kube-system"
    assert workload_nodes(project_pod(mirror)) == ()
    assert workload_nodes(project_pod(raw_pod(phase="Succeeded"))) == ()
    assert workload_nodes(project_pod(raw_pod(phase="Failed"))) == ()
    # Preemption making room for a pod keeps that node busy too.
    assert workload_nodes(project_pod(raw_pod(node="", phase="Pending", nominated="n2"))) == ("n2",)


def test_a_pod_that_only_looks_like_a_mirror_is_work() -> None:
    # Any account that may create pods can write these; each was taken for a static pod's mirror
    # and the node under it drained and deleted about 2 s later.
    assert workload_nodes(project_pod(raw_pod(owner="Node"))) == ("n1",)
    assert workload_nodes(project_pod(raw_pod(annotations={MIRROR_ANNOTATION: "x"}))) == ("n1",)
    both = raw_pod(owner="Node", annotations={MIRROR_ANNOTATION: "x"})
    assert workload_nodes(project_pod(both)) == ("n1",)  # in a tenant's namespace


def test_a_pending_pod_is_demand_only_for_a_node_with_its_gpus() -> None:
    nvidia = project_node(raw_node(allocatable={"nvidia.com/gpu": "8"}))
    cpu, gpus = capacity(nvidia)
    assert (cpu, gpus) == (64_000, {"nvidia.com/gpu": 8})
    amd_pod = project_pod(raw_pod(node="", phase="Pending", resources={"amd.com/gpu": "1"}))
    nvidia_pod = project_pod(raw_pod(node="", phase="Pending", resources={"nvidia.com/gpu": "2"}))
    assert not fits_pending(cpu, gpus, pending_demand([amd_pod]))
    assert fits_pending(cpu, gpus, pending_demand([amd_pod, nvidia_pod]))
    cpu_only = project_node(raw_node())
    assert not fits_pending(*capacity(cpu_only), pending_demand([nvidia_pod]))


def test_a_pending_performance_pod_holds_only_a_node_the_extender_lets_it_use() -> None:
    node = project_node(raw_node(allocatable={"nvidia.com/gpu": "8"}))
    gpus = {"nvidia.com/gpu": "1"}
    performance = pending_demand(
        [
            project_pod(
                raw_pod(
                    node="",
                    phase="Pending",
                    resources=gpus,
                    annotations={keys.WORKLOAD_CLASS_ANNOTATION: "performance"},
                )
            )
        ]
    )
    standard = pending_demand([project_pod(raw_pod(node="", phase="Pending", resources=gpus))])
    assert [d.performance for d in performance + standard] == [True, False]

    def twin(schedulable_class: str) -> Any:
        status = {"schedulableClass": schedulable_class}
        return project_twin({"metadata": {"name": "n1"}, "status": status})

    for kept_off in ("eco", "draining"):
        assert not pending_could_use(node, twin(kept_off), performance)
        assert pending_could_use(node, twin(kept_off), standard)
    assert pending_could_use(node, twin("performance"), performance)
    # Without a twin, the power-profile label says it, as the extender's filter reads it.
    assert pending_could_use(node, None, performance)
    eco = project_node(
        {
            **raw_node(allocatable=gpus),
            "metadata": {"name": "n1", "labels": {keys.POWER_PROFILE_LABEL: "eco"}},
        }
    )
    assert not pending_could_use(eco, None, performance)


def test_what_is_in_flight_is_read_back_from_the_node() -> None:
    node = project_node(
        raw_node(
            {
                keys.LIFECYCLE_PHASE_ANNOTATION: "draining",
                keys.LIFECYCLE_SINCE_ANNOTATION: "2026-12-01T02:00:00Z",
                keys.LIFECYCLE_CORDONED_ANNOTATION: "true",
                keys.LIFECYCLE_FAILURES_ANNOTATION: "2",
                keys.LIFECYCLE_RETRY_AFTER_ANNOTATION: "1796097600",
            }
        )
    )
    flight = in_flight(node)
    assert flight.phase is Phase.DRAINING
    assert flight.since == 1_796_090_400.0
    assert flight.cordoned_by_us
    assert flight.tainted
    assert flight.failures == 2
    assert flight.retry_after == 1_796_097_600.0
    assert not flight.orphaned


def test_bad_annotations_are_ignored_not_fatal() -> None:
    node = project_node(
        raw_node(
            {
                keys.LIFECYCLE_PHASE_ANNOTATION: "rebooting",
                keys.LIFECYCLE_FAILURES_ANNOTATION: "many",
                keys.LIFECYCLE_SINCE_ANNOTATION: "yesterday",
                keys.LAUNCHED_AT_ANNOTATION: "soon",
            }
        )
    )
    flight = in_flight(node)
    assert flight.phase is Phase.NONE
    assert flight.orphaned  # our taint without a phase we know: to be rolled back
    assert flight.failures == 0
    assert flight.since is None
    assert annotation_time(node, keys.LAUNCHED_AT_ANNOTATION) is None
    assert launched_at(node) == node.created_at  # falls back to the Node's creation


def test_the_launch_time_a_provisioner_states_wins() -> None:
    stated = project_node(raw_node({keys.LAUNCHED_AT_ANNOTATION: "2026-11-30T23:00:00Z"}))
    assert launched_at(stated) == stated.created_at - 3600
