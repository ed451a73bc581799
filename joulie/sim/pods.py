"""A workload's pod as the live roles would see it: the manifest kube-scheduler sends the
extender (the extender's power estimate reads it) and the slim projection the simulator's
power model reads (its utilisation annotations), both built the way the KWOK harness builds
them, so the standalone engine feeds the very functions that read real pods."""

from __future__ import annotations

from typing import Any

from joulie.api import keys
from joulie.api.enums import WorkloadClass
from joulie.kube.projections import SlimPod
from joulie.sim.trace import Workload

__all__ = ["pod_manifest", "slim_pod"]


def _requests(workload: Workload) -> dict[str, str]:
    requests = {"cpu": f"{workload.cpu_millis}m", "memory": str(workload.memory_bytes)}
    if workload.gpus and workload.gpu_resource:
        requests[workload.gpu_resource] = str(workload.gpus)
    return requests


def _annotations(workload: Workload, joulie_aware: bool) -> dict[str, str]:
    annotations = {
        keys.SIM_CPU_UTILIZATION_ANNOTATION: repr(workload.cpu_util),
        keys.SIM_GPU_UTILIZATION_ANNOTATION: repr(workload.gpu_util),
    }
    if joulie_aware and workload.performance:
        annotations[keys.WORKLOAD_CLASS_ANNOTATION] = WorkloadClass.PERFORMANCE.value
    return annotations


def pod_manifest(workload: Workload, joulie_aware: bool = True) -> dict[str, Any]:
    """One pod of ``workload`` as JSON (without ``joulie_aware`` the class annotation is left
    out: baseline A runs the same trace as if Joulie did not exist)."""
    requests = _requests(workload)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{workload.id}-0",
            "namespace": "default",
            "annotations": _annotations(workload, joulie_aware),
        },
        "spec": {
            "priority": workload.priority,
            "containers": [
                {"name": "work", "resources": {"requests": requests, "limits": dict(requests)}}
            ],
        },
    }


def slim_pod(workload: Workload, node: str, member: int = 0) -> SlimPod:
    """Pod ``member`` of ``workload`` running on ``node``, as the informers project it."""
    return SlimPod(
        namespace="default",
        name=f"{workload.id}-{member}",
        node_name=node,
        phase="Running",
        annotations=_annotations(workload, True),
        labels={},
        cpu_millis=workload.cpu_millis,
        gpus=workload.gpus if workload.gpu_resource else 0,
        deleting=False,
        owner_kind="Job",
    )
