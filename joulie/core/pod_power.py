"""How many watts a pod would add to a node: the marginal-power estimate the scheduler extender
subtracts from a node's measured headroom before ranking it.

Two halves, both pure:

* :func:`pod_demand` reads what a raw pod asks for (CPU cores, memory, GPU units, and whether it
  is a performance pod). The pod's effective request is computed the way Kubernetes computes it
  for scheduling: per container, the request, else the limit (the API server copies a lone limit
  into the request); then the larger of the app containers' sum and the peak while init
  containers run one by one (restartable init containers, i.e. sidecars, run alongside and add
  to both); plus ``spec.overhead``. GPU units come from :func:`joulie.api.gpu.pod_gpu_count`, so
  every GPU resource kind counts the same way it does everywhere else in Joulie.
* :func:`node_power_profile` reads what a node can draw from its NodeHardware status, and
  :func:`marginal_watts` combines the two.

Decisions where the sources are silent:

* CPU share is measured in logical CPUs (``status.cpu.totalCores``): a pod's CPU request counts
  hardware threads, and ``totalCores`` is what the node's ``capacity.cpu`` reports, the figure
  upstream used too. The 3.5 W/core fallback applies to the same count.
* A quantity that does not parse, is negative, or does not fit a float counts as 0; nothing here
  raises on a pod's content. The API server validates quantities, so only hand-built objects
  hit this.
* The GPU fallback watts come from the node's GPU vendor (the board that will draw the power);
  an unknown vendor gets the generic 350 W.
* A node without NodeHardware has no profile, and a pod adds 0 W to it: the score then rests on
  the twin's figures alone, as upstream's pinned examples assume.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from joulie.api.enums import WorkloadClass
from joulie.api.gpu import pod_gpu_count
from joulie.api.keys import WORKLOAD_CLASS_ANNOTATION
from joulie.api.nodehardware import NodeHardwareStatus
from joulie.api.quantity import parse_quantity

__all__ = [
    "CPU_FALLBACK_CORES_PERFORMANCE",
    "CPU_FALLBACK_CORES_STANDARD",
    "CPU_MIN_FALLBACK_WATTS",
    "CPU_WATTS_PER_CORE_FALLBACK",
    "DEFAULT_COEFFICIENTS",
    "GPU_FALLBACK_WATTS",
    "GPU_GENERIC_FALLBACK_WATTS",
    "MEMORY_FACTOR_CAP",
    "MEMORY_FACTOR_PER_GIB",
    "MarginalCoefficients",
    "NodePowerProfile",
    "PodDemand",
    "cpu_share",
    "gpu_coefficient",
    "is_performance_pod",
    "marginal_watts",
    "memory_factor",
    "node_power_profile",
    "pod_demand",
]

CPU_FALLBACK_CORES_PERFORMANCE: Final = 0.5
"""Cores assumed for a performance pod that requests no CPU (it will use some)."""
CPU_FALLBACK_CORES_STANDARD: Final = 0.25
"""Cores assumed for any other pod that requests no CPU."""
CPU_WATTS_PER_CORE_FALLBACK: Final = 3.5
CPU_MIN_FALLBACK_WATTS: Final = 150.0
MEMORY_FACTOR_PER_GIB: Final = 0.01
MEMORY_FACTOR_CAP: Final = 1.3
GPU_FALLBACK_WATTS: Final[Mapping[str, float]] = {"nvidia": 350.0, "amd": 400.0, "intel": 350.0}
GPU_GENERIC_FALLBACK_WATTS: Final = 350.0

_GIB: Final = float(2**30)
# A GPU count past this is absurd for any pod; capping it keeps the arithmetic in floats.
_MAX_GPUS: Final = 1_000_000


@dataclass(frozen=True)
class MarginalCoefficients:
    """The share of a node's maximum power a pod's resources are expected to draw.

    Defaults are upstream's (its MARGINAL_* variables): CPU 0.7 of the node's CPU maximum in
    proportion to the pod's share of the cores; each GPU 0.65 of its maximum, 0.85 for a
    performance pod.
    """

    cpu_util: float = 0.7
    gpu_util_standard: float = 0.65
    gpu_util_performance: float = 0.85

    def __post_init__(self) -> None:
        for name in ("cpu_util", "gpu_util_standard", "gpu_util_performance"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0.0 <= value <= 1.0):
                raise ValueError(f"{name} must be within [0, 1], got {value}")


DEFAULT_COEFFICIENTS: Final = MarginalCoefficients()


# --- pods ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PodDemand:
    """What one pod asks of a node, for the power estimate."""

    cpu_cores: float
    """Effective CPU request in cores (logical CPUs), with the no-request fallback applied."""
    memory_gib: float
    """Effective memory request in GiB."""
    gpus: int
    """GPU units (whole GPUs, MIG slices, partitions and shared replicas each count as one)."""
    performance: bool
    """Whether the pod's ``joulie.io/workload-class`` annotation is exactly ``performance``."""


def is_performance_pod(pod: Mapping[str, Any]) -> bool:
    """Whether a raw pod is a performance pod: its ``joulie.io/workload-class`` annotation is
    exactly ``performance``. Node selectors and affinities do not count (they only steer)."""
    metadata = pod.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    if not isinstance(annotations, Mapping):
        return False
    return annotations.get(WORKLOAD_CLASS_ANNOTATION) == WorkloadClass.PERFORMANCE


def _amount(raw: object) -> float:
    """A quantity as a float; 0 for anything that is not a usable, non-negative quantity."""
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        return 0.0
    try:
        value = float(parse_quantity(raw))
    except (ValueError, ArithmeticError):  # QuantityError, NaN, overflow
        return 0.0
    return value if math.isfinite(value) and value > 0.0 else 0.0


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _container_amount(container: object, resource: str) -> float:
    resources = _mapping(_mapping(container).get("resources"))
    requests = _mapping(resources.get("requests"))
    if resource in requests:
        return _amount(requests[resource])
    return _amount(_mapping(resources.get("limits")).get(resource))


def _containers(spec: Mapping[str, Any], key: str) -> list[object]:
    value = spec.get(key)
    return list(value) if isinstance(value, list | tuple) else []


def _effective(spec: Mapping[str, Any], amount: Callable[[object], float]) -> float:
    """The pod-level value of one resource, as the Kubernetes scheduler computes it."""
    app = math.fsum(amount(c) for c in _containers(spec, "containers"))
    init_peak = 0.0
    sidecars = 0.0
    for container in _containers(spec, "initContainers"):
        value = amount(container)
        if _mapping(container).get("restartPolicy") == "Always":
            sidecars += value
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, sidecars + value)
    return max(app + sidecars, init_peak)


def _resource_total(spec: Mapping[str, Any], resource: str) -> float:
    total = _effective(spec, lambda container: _container_amount(container, resource))
    return total + _amount(_mapping(spec.get("overhead")).get(resource))


def pod_demand(pod: Mapping[str, Any]) -> PodDemand:
    """What a raw pod (the JSON kube-scheduler sends, as a mapping) asks of a node.

    CPU and memory: per container the request, else the limit; app containers summed, init
    containers as Kubernetes counts them, plus pod overhead. A pod asking for no CPU is assumed to
    use 0.5 cores if it is a performance pod, 0.25 otherwise. Never raises on the pod's content.
    """
    spec = _mapping(pod.get("spec"))
    performance = is_performance_pod(pod)
    cpu = _resource_total(spec, "cpu")
    if cpu <= 0.0:
        cpu = CPU_FALLBACK_CORES_PERFORMANCE if performance else CPU_FALLBACK_CORES_STANDARD
    memory_gib = _resource_total(spec, "memory") / _GIB
    try:
        gpus = pod_gpu_count(pod)
    except (AttributeError, TypeError):  # a container or resources block that is not a mapping
        gpus = 0
    return PodDemand(
        cpu_cores=cpu,
        memory_gib=memory_gib if math.isfinite(memory_gib) else 0.0,
        gpus=min(max(gpus, 0), _MAX_GPUS),
        performance=performance,
    )


# --- nodes --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodePowerProfile:
    """What a node can draw, as far as the pod power estimate needs it."""

    cores: int
    """Logical CPUs (``status.cpu.totalCores``; 0 when unknown)."""
    cpu_max_watts: float
    """Maximum CPU power of the whole node, in watts (always positive)."""
    has_gpu: bool
    """Whether the node has GPUs."""
    gpu_max_watts: float
    """Maximum power of one GPU, in watts (positive when the node has GPUs, else 0)."""


def _positive(value: float | None) -> float | None:
    if value is None or not math.isfinite(value) or value <= 0.0:
        return None
    return float(value)


def _logical_cpus(status: NodeHardwareStatus) -> int:
    cpu = status.cpu
    if cpu is None:
        return 0
    if cpu.total_cores:
        return cpu.total_cores
    if cpu.cores_per_socket:
        return cpu.cores_per_socket * max(1, cpu.sockets or 0)
    return 0


def _gpu_fallback_watts(vendor: str | None) -> float:
    folded = (vendor or "").casefold()
    for name, watts in GPU_FALLBACK_WATTS.items():
        if name in folded:
            return watts
    return GPU_GENERIC_FALLBACK_WATTS


def node_power_profile(
    status: NodeHardwareStatus | None, fallback_cores: int = 0
) -> NodePowerProfile | None:
    """The power profile of a node from its NodeHardware status; None without one.

    Logical CPUs: ``status.cpu.totalCores``, else cores per socket x sockets, else
    ``fallback_cores`` (a caller that knows the node's allocatable CPUs passes them: a status
    without a core count would otherwise make every pod's CPU share a whole node).

    CPU maximum: ``capRange.maxWattsPerSocket`` x sockets (at least one), else 3.5 W per logical
    CPU with a 150 W floor. GPU maximum per board: ``capRangePerGpu.maxWatts``, else by vendor
    (NVIDIA 350 W, AMD 400 W, Intel 350 W, unknown 350 W).
    """
    if status is None:
        return None
    cores = _logical_cpus(status) or max(0, fallback_cores)
    cpu = status.cpu
    per_socket = _positive(
        cpu.cap_range.max_watts_per_socket if cpu is not None and cpu.cap_range else None
    )
    if per_socket is not None:
        sockets = cpu.sockets if cpu is not None and cpu.sockets else 0
        cpu_max = per_socket * max(1, sockets)
    else:
        cpu_max = max(CPU_MIN_FALLBACK_WATTS, cores * CPU_WATTS_PER_CORE_FALLBACK)
    gpu = status.gpu
    has_gpu = gpu is not None and (bool(gpu.present) or bool(gpu.count))
    gpu_max = 0.0
    if gpu is not None and has_gpu:
        measured_max = _positive(gpu.cap_range_per_gpu.max_watts if gpu.cap_range_per_gpu else None)
        gpu_max = measured_max if measured_max is not None else _gpu_fallback_watts(gpu.vendor)
    return NodePowerProfile(
        cores=cores, cpu_max_watts=cpu_max, has_gpu=has_gpu, gpu_max_watts=gpu_max
    )


def memory_factor(memory_gib: float) -> float:
    """The CPU-power multiplier of a pod's memory: +1 % per GiB, at most +30 %."""
    return min(max(1.0 + memory_gib * MEMORY_FACTOR_PER_GIB, 1.0), MEMORY_FACTOR_CAP)


def cpu_share(cpu_cores: float, node_cores: int) -> float:
    """The pod's share of the node's CPUs, 0-1 (a node of unknown size counts as one core)."""
    return min(max(cpu_cores / max(1, node_cores), 0.0), 1.0)


def gpu_coefficient(performance: bool, coefficients: MarginalCoefficients) -> float:
    """The share of each GPU's maximum a pod of this class is expected to draw."""
    return coefficients.gpu_util_performance if performance else coefficients.gpu_util_standard


def marginal_watts(
    demand: PodDemand,
    profile: NodePowerProfile | None,
    coefficients: MarginalCoefficients = DEFAULT_COEFFICIENTS,
) -> float:
    """Watts the pod is expected to add to the node; 0 for a node without a profile.

    CPU: node CPU maximum x CPU coefficient x the pod's share of the node's CPUs x the memory
    factor. GPU (only for a pod with GPUs on a node with GPUs): GPUs x per-GPU maximum x the GPU
    coefficient of the pod's class.

    ``joulie.core.score_table.ScoreTable`` evaluates the same expression over arrays, operation for
    operation, so that both give bit-identical results; change them together.
    """
    if profile is None:
        return 0.0
    cpu = (
        profile.cpu_max_watts
        * coefficients.cpu_util
        * cpu_share(demand.cpu_cores, profile.cores)
        * memory_factor(demand.memory_gib)
    )
    gpu = 0.0
    if demand.gpus > 0 and profile.has_gpu:
        gpu = (
            demand.gpus * profile.gpu_max_watts * gpu_coefficient(demand.performance, coefficients)
        )
    return cpu + gpu
