"""Which of a node's pods count: running, performance class, multi-GPU."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from joulie.api.enums import (
    WorkloadClass,
)

_RUNNING: Final = "Running"


def is_running_pod(phase: str | None, deleting: bool) -> bool:
    """A pod that runs and is not being deleted: pending, finished and terminating pods are not."""
    return phase == _RUNNING and not deleting


def is_active_performance_pod(
    phase: str | None, deleting: bool, workload_class: str | None
) -> bool:
    """Whether a pod holds its node at performance caps (the downgrade guard's count).

    ``workload_class`` is the value of the pod's ``joulie.io/workload-class`` annotation (None
    without one).
    """
    return is_running_pod(phase, deleting) and workload_class == WorkloadClass.PERFORMANCE


MULTI_GPU_POD_MIN_GPUS = 2
"""A pod with at least this many GPU units counts as a multi-GPU workload (the sustained rule)."""


def uses_multi_gpu(gpus: int) -> bool:
    """Whether a pod using ``gpus`` GPU units is a multi-GPU workload: the one place the rule
    lives, read by the intents and by the manager's triggers alike."""
    return gpus >= MULTI_GPU_POD_MIN_GPUS


def max_running_pod_gpus(pods: Iterable[tuple[str | None, bool, int]]) -> int:
    """The most GPU units any running, non-terminating pod on the node uses (0 without one).

    Each item is ``(phase, deleting, gpus)`` with ``gpus`` from :func:`joulie.api.gpu.pod_gpu_count`
    (every GPU resource kind: whole, MIG, partition, shared; requests else limits).
    """
    return max(
        (gpus for phase, deleting, gpus in pods if is_running_pod(phase, deleting)), default=0
    )
