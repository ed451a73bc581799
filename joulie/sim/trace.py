"""The standalone simulator's workload: what is submitted, when, and how much work it is.

(Interface fixed here; the reading, writing and upstream mapping are filled in with the
generator.)
"""

from __future__ import annotations

from dataclasses import dataclass

from joulie.api.workload import DisruptionMode

TRACE_SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class Workload:
    """One unit of submitted work: a lone pod, or a gang of ``pods`` identical pods (a
    PodGroup) of which at least ``min_count`` must run at once."""

    id: str
    submit_s: float
    """Seconds after the start of the run."""
    work_s: float
    """Run time at full speed (every clock at its maximum, nothing capped)."""
    pods: int = 1
    min_count: int = 1
    """Gang: how many of the pods must be placed together (1 for a lone pod)."""
    performance: bool = False
    """The ``joulie.io/workload-class: performance`` annotation."""
    priority: int = 0
    disruption: DisruptionMode = DisruptionMode.SINGLE
    """The PodGroup's disruption mode: ``all`` means preempting one pod preempts the gang."""
    cpu_millis: int = 1000
    """CPU request of each pod, in millicores."""
    memory_bytes: int = 1 << 30
    """Memory request of each pod."""
    gpus: int = 0
    """GPU units each pod requests, of ``gpu_resource``."""
    gpu_resource: str | None = None
    """The extended resource the GPUs are requested as (``nvidia.com/gpu``, ``amd.com/gpu`` ...)."""
    cpu_sensitivity: float = 1.0
    """Share of the run time that scales with the CPU clock (0..1)."""
    gpu_sensitivity: float = 0.0
    """Share of the run time that scales with the GPU clock (0..1; with the CPU share <= 1)."""
    cpu_util: float = 1.0
    """Share of the requested cores the pod keeps busy."""
    gpu_util: float = 1.0
    """Share of the requested GPUs' capacity the pod keeps busy."""
    kind: str = ""
    """What sort of job this is (the generator's type, e.g. ``gpu-training``), for reports."""

    @property
    def gang(self) -> bool:
        return self.pods > 1
