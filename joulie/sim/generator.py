"""Synthetic workloads for the standalone simulator, sized to the inventory they run on.

The one knob that carries across inventories is ``load``: the share of the CPU-only nodes'
core-hours, and of each GPU kind's GPU-hours, that the submitted work asks for over the run.
Jobs are drawn from a fixed mix until that budget is spent, so a 41-node and a 5,000-node
inventory get the same pressure from the same options; the arrival process then only decides
*when* they come (uniform, following a day curve, or in bursts). Given the number of arrivals,
the arrival times of a Poisson process are independent draws from its normalised rate, which is
what the generator samples; fixing the count by the work budget keeps the offered load within a
job or two of the target instead of wandering with the Poisson count.

Everything is drawn from one ``numpy.random.Generator(PCG64(seed))`` with array operations:
no global random state, no clock, the same seed gives the same list.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np
from numpy.typing import NDArray

from joulie.api.inventory import Inventory, NodeGroup
from joulie.api.workload import DisruptionMode
from joulie.core.power_model import Throughput
from joulie.sim.arrivals import arrival_times, diurnal_rate
from joulie.sim.generator_options import ARRIVAL_PROCESSES, GeneratorOptions, check_number
from joulie.sim.trace import Workload

__all__ = [
    "ARRIVAL_PROCESSES",
    "KINDS",
    "GeneratorOptions",
    "JobKind",
    "diurnal_rate",
    "generate",
]

_GIB = 1 << 30
_MIB = 1 << 20

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


# --- job kinds -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobKind:
    """How one sort of job is drawn. Ranges are inclusive (low, high); for GPU kinds the cores
    and memory are per GPU, for CPU kinds memory is per core."""

    name: str
    share_option: str
    pods: tuple[int, int]
    gpus: tuple[int, int]
    cores: tuple[int, int]
    work_s: tuple[float, float]
    memory_gib: tuple[float, float]
    cpu_sensitivity: tuple[float, float]
    gpu_sensitivity: tuple[float, float]
    cpu_util: tuple[float, float]
    gpu_util: tuple[float, float]
    perf_weight: float
    """Relative odds of being marked performance."""

    @property
    def uses_gpus(self) -> bool:
        return self.gpus[1] > 0


_CPU_SENS, _NO = (0.6, 1.0), (0.0, 0.0)
KINDS: tuple[JobKind, ...] = (
    JobKind("cpu-small", "cpu_small_share", (1, 1), (0, 0), (4, 32), (1800, 7200), (1, 4),
            _CPU_SENS, _NO, (0.5, 0.95), _NO, 0.5),
    JobKind("cpu-medium", "cpu_medium_share", (1, 1), (0, 0), (32, 96), (3600, 14400), (1, 4),
            _CPU_SENS, _NO, (0.6, 0.95), _NO, 0.8),
    JobKind("cpu-large", "cpu_large_share", (1, 1), (0, 0), (96, 192), (7200, 21600), (1, 4),
            _CPU_SENS, _NO, (0.7, 1.0), _NO, 1.2),
    JobKind("gpu-inference", "gpu_inference_share", (1, 1), (1, 4), (2, 8), (1800, 7200),
            (16, 64), (0.1, 0.3), (0.3, 0.6), (0.2, 0.5), (0.3, 0.6), 1.0),
    JobKind("gpu-training", "gpu_training_share", (1, 1), (1, 8), (4, 16), (3600, 28800),
            (32, 128), (0.05, 0.2), (0.6, 0.9), (0.3, 0.6), (0.7, 0.95), 2.0),
    JobKind("gpu-distributed", "gpu_distributed_share", (2, 4), (4, 8), (4, 16),
            (7200, 43200), (32, 128), (0.05, 0.2), (0.6, 0.9), (0.3, 0.6), (0.75, 0.95), 2.0),
)  # fmt: skip
_CPU_KINDS = tuple(k for k in KINDS if not k.uses_gpus)
_GPU_KINDS = tuple(k for k in KINDS if k.uses_gpus)
_DISTRIBUTED = KINDS.index(next(k for k in KINDS if k.name == "gpu-distributed"))


# --- the parts of an inventory ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Part:
    """A share of the inventory that gets its own work budget: the CPU-only nodes (or, without
    any, the GPU nodes' cores), or the nodes of one GPU resource."""

    kinds: tuple[int, ...]
    """Indexes into KINDS of the jobs this part gets."""
    resource: str | None
    cores: IntArray
    memory_gib: FloatArray
    gpus: IntArray
    replicas: IntArray
    """Nodes in each group."""
    capacity: float
    """Cores (CPU part) or GPUs (GPU part) the budget is a share of."""


def _parts(
    inventory: Inventory, options: GeneratorOptions, speeds: Sequence[Throughput] | None
) -> list[_Part]:
    groups = list(inventory.nodes)
    speed = list(speeds) if speeds is not None else [Throughput()] * len(groups)
    if len(speed) != len(groups):
        raise ValueError(f"speeds: {len(speed)} given for {len(groups)} inventory groups")
    pairs = list(zip(groups, speed, strict=True))
    cpu_only = [(g, t) for g, t in pairs if g.gpu_resource is None]
    parts: list[_Part] = []
    cpu_kinds = tuple(KINDS.index(k) for k in _CPU_KINDS)
    if cpu_only:
        parts.append(_part(cpu_kinds, None, [g for g, _ in cpu_only], _cores(cpu_only)))
    elif groups:
        share = options.cpu_load_on_gpu_nodes
        parts.append(_part(cpu_kinds, None, groups, _cores(pairs) * share))
    gpu_kinds = tuple(KINDS.index(k) for k in _GPU_KINDS)
    # The budget is reference work: a board twice as fast does twice the work in the same time.
    # Inference runs at a board's memory speed, the rest at its compute speed, in the mix drawn.
    memory_share = options.gpu_inference_share / sum(
        getattr(options, KINDS[k].share_option) for k in gpu_kinds
    )
    for resource in sorted({g.gpu_resource for g in groups if g.gpu_resource is not None}):
        members = [(g, t) for g, t in pairs if g.gpu_resource == resource]
        gpus = sum(
            g.replicas
            * g.gpu_count
            * (memory_share * t.gpu_memory + (1.0 - memory_share) * t.gpu_compute)
            for g, t in members
        )
        parts.append(_part(gpu_kinds, resource, [g for g, _ in members], float(gpus)))
    return [p for p in parts if p.capacity > 0]


def _cores(groups: Sequence[tuple[NodeGroup, Throughput]]) -> float:
    """Cores of the groups, each counted at its speed against the reference core."""
    return float(sum(g.replicas * g.cpu_cores * t.cpu for g, t in groups))


def _part(
    kinds: tuple[int, ...], resource: str | None, groups: Sequence[NodeGroup], capacity: float
) -> _Part:
    return _Part(
        kinds=kinds,
        resource=resource,
        cores=np.array([g.cpu_cores for g in groups], dtype=np.int64),
        memory_gib=np.array([g.memory_gib for g in groups], dtype=np.float64),
        gpus=np.array([g.gpu_count if resource else 0 for g in groups], dtype=np.int64),
        replicas=np.array([g.replicas for g in groups], dtype=np.int64),
        capacity=capacity,
    )


# --- drawing jobs ----------------------------------------------------------------------------


@dataclass(slots=True)
class _Jobs:
    """Jobs as columns (one entry per job), so a hundred thousand are drawn at array speed."""

    kind: IntArray
    pods: IntArray
    gpus: IntArray
    cores: IntArray
    memory_bytes: IntArray
    work_s: FloatArray

    def select(self, index: IntArray) -> _Jobs:
        return _Jobs(*(getattr(self, f.name)[index] for f in fields(self)))

    @staticmethod
    def concat(parts: Sequence[_Jobs]) -> _Jobs:
        return _Jobs(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(_Jobs)))


def _table(column: str, index: IntArray) -> tuple[FloatArray, FloatArray]:
    """Per-job (low, high) of one JobKind range."""
    lows = np.array([getattr(k, column)[0] for k in KINDS], dtype=np.float64)
    highs = np.array([getattr(k, column)[1] for k in KINDS], dtype=np.float64)
    return lows[index], highs[index]


def _uniform_int(rng: np.random.Generator, column: str, index: IntArray) -> IntArray:
    low, high = _table(column, index)
    return rng.integers(low.astype(np.int64), high.astype(np.int64) + 1)


def _uniform(rng: np.random.Generator, column: str, index: IntArray) -> FloatArray:
    low, high = _table(column, index)
    return rng.uniform(low, high)


def _draw(rng: np.random.Generator, part: _Part, weights: FloatArray, n: int) -> _Jobs:
    """``n`` jobs of the part's kinds, each shrunk where needed to fit one of its groups."""
    kind = rng.choice(np.array(part.kinds, dtype=np.int64), size=n, p=weights)
    pods = _uniform_int(rng, "pods", kind)
    gpus = _uniform_int(rng, "gpus", kind)
    per = np.where(gpus > 0, gpus, 1)
    cores = _uniform_int(rng, "cores", kind) * per
    memory_gib = _uniform(rng, "memory_gib", kind) * np.where(gpus > 0, gpus, cores)
    work_s = np.maximum(1.0, np.round(_uniform(rng, "work_s", kind)))
    gpus, cores, memory_gib = _fit(part, gpus, cores, memory_gib)
    pods = np.minimum(pods, np.maximum(1, _fitting_nodes(part, gpus, cores, memory_gib) // 4))
    memory = np.floor(memory_gib * 1024).astype(np.int64) * _MIB
    return _Jobs(kind, pods, gpus, cores, memory, work_s)


def _fit(
    part: _Part, gpus: IntArray, cores: IntArray, memory_gib: FloatArray
) -> tuple[IntArray, IntArray, FloatArray]:
    """Shrink GPUs, then cores, then memory to what the largest fitting group offers, so that
    every pod fits on at least one node group of the part."""
    gpus = np.minimum(gpus, part.gpus.max())
    fits = part.gpus[None, :] >= gpus[:, None]
    cores = np.minimum(cores, np.where(fits, part.cores[None, :], 0).max(axis=1))
    fits &= part.cores[None, :] >= cores[:, None]
    memory_gib = np.minimum(memory_gib, np.where(fits, part.memory_gib[None, :], 0).max(axis=1))
    return gpus, cores, memory_gib


def _fitting_nodes(
    part: _Part, gpus: IntArray, cores: IntArray, memory_gib: FloatArray
) -> IntArray:
    """Per job, how many of the part's nodes can hold one of its pods. A gang gets at most a
    quarter of them, so that it can still be placed when only half of them are in performance
    and half of those are busy; one it could never place would wait out the whole run."""
    fits = (
        (part.gpus[None, :] >= gpus[:, None])
        & (part.cores[None, :] >= cores[:, None])
        & (part.memory_gib[None, :] >= memory_gib[:, None])
    )
    return fits.astype(np.int64) @ part.replicas


def _work(part: _Part, jobs: _Jobs) -> FloatArray:
    """What a job takes from the part's budget: core-seconds or GPU-seconds of its requests."""
    per_pod = jobs.gpus if part.resource is not None else jobs.cores
    return per_pod * jobs.pods * jobs.work_s


def _fill(rng: np.random.Generator, part: _Part, options: GeneratorOptions, budget: float) -> _Jobs:
    """Draw jobs until their work reaches ``budget``, then close the gap with later draws that
    still fit in it: one twelve-hour gang can be most of a small cluster's budget, so stopping
    at the first job that crosses it would miss the target by that much."""
    weights = np.array([getattr(options, KINDS[k].share_option) for k in part.kinds])
    weights = weights / weights.sum()
    chunks: list[_Jobs] = []
    total, n = 0.0, 256
    while total < budget:
        chunk = _draw(rng, part, weights, n)
        work = _work(part, chunk)
        chunks.append(chunk)
        total += float(work.sum())
        n = max(64, math.ceil((budget - total) / float(work.mean()) * 1.1))
    chunks.append(_draw(rng, part, weights, 256))  # candidates for the gap
    jobs = _Jobs.concat(chunks)
    work = _work(part, jobs)
    cumulative = np.cumsum(work)
    crossing = int(np.searchsorted(cumulative, budget))  # the first job reaching the budget
    gap = budget - (float(cumulative[crossing - 1]) if crossing else 0.0)
    keep = list(range(crossing))
    for index in range(crossing, len(work)):
        if gap < 0.01 * budget:
            break
        if work[index] <= gap:
            keep.append(index)
            gap -= float(work[index])
    return jobs.select(np.array(keep, dtype=np.int64))


# --- the whole workload ----------------------------------------------------------------------


def generate(
    inventory: Inventory,
    options: GeneratorOptions,
    seed: int,
    hours: float,
    speeds: Sequence[Throughput] | None = None,
) -> list[Workload]:
    """Workloads arriving over ``hours`` on ``inventory``, sorted by submit time, ids
    ``w000001``... in that order. The same arguments always give the same list.

    ``speeds``: how fast each inventory group's parts work against the reference parts (a
    workload's ``work_s`` is its run time there), in group order; the offered load is then a
    share of what the cluster can do at its own speed. None: every part at reference speed."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed: expected an integer >= 0, got {seed!r}")
    check_number("hours", hours, low=0.0, low_open=True)
    rng = np.random.Generator(np.random.PCG64(seed))
    horizon_s = hours * 3600.0
    drawn: list[_Jobs] = []
    resources: list[str | None] = []
    times: list[FloatArray] = []
    for part in _parts(inventory, options, speeds):
        jobs = _fill(rng, part, options, options.load * part.capacity * horizon_s)
        drawn.append(jobs)
        resources.append(part.resource)
        times.append(arrival_times(rng, len(jobs.kind), horizon_s, options))
    if not drawn:
        return []
    jobs = _Jobs.concat(drawn)
    resource = np.concatenate(
        [np.full(len(j.kind), i, dtype=np.int64) for i, j in enumerate(drawn)]
    )
    # Millisecond times read better in a trace; the clamp keeps a rounded-up one in the run.
    submit = np.minimum(np.round(np.concatenate(times), 3), np.nextafter(horizon_s, 0.0))
    order = np.argsort(submit, kind="stable")
    return _workloads(rng, options, jobs, submit, [resources[i] for i in resource], order)


def _workloads(
    rng: np.random.Generator,
    options: GeneratorOptions,
    jobs: _Jobs,
    submit: FloatArray,
    resource: list[str | None],
    order: IntArray,
) -> list[Workload]:
    """Build the Workload objects in submit order, drawing the per-job attributes that do not
    depend on the part (class, priority, disruption, sensitivities, utilisations)."""
    kind = jobs.kind
    n = len(kind)
    if n == 0:
        return []
    weight = np.array([k.perf_weight for k in KINDS])[kind]
    performance = rng.random(n) < options.perf_ratio * weight / weight.mean()
    uses_gpu = jobs.gpus > 0
    priority = np.where(uses_gpu, options.default_priority, options.batch_priority)
    priority = np.where(rng.random(n) < options.urgent_share, options.urgent_priority, priority)
    # A gang capped down to one pod is a lone workload: ``single``, like any other.
    gang_all = (kind == _DISTRIBUTED) & (jobs.pods > 1) & (rng.random(n) < options.gang_all_share)
    gpu_sens = np.round(_uniform(rng, "gpu_sensitivity", kind), 3)
    cpu_sens = np.minimum(_uniform(rng, "cpu_sensitivity", kind), 1.0 - gpu_sens).round(3)
    cpu_util = np.round(_uniform(rng, "cpu_util", kind), 3)
    gpu_util = np.round(_uniform(rng, "gpu_util", kind), 3)
    names = np.array([k.name for k in KINDS], dtype=object)
    width = max(6, len(str(n)))
    ids = [f"w{number:0{width}d}" for number in range(1, n + 1)]
    pods = jobs.pods[order].tolist()
    # Positional, in the dataclass's field order: this loop builds every workload of the run.
    columns = zip(
        ids,
        submit[order].tolist(),
        jobs.work_s[order].tolist(),
        pods,
        pods,
        performance[order].tolist(),
        priority[order].tolist(),
        [DisruptionMode.ALL if x else DisruptionMode.SINGLE for x in gang_all[order].tolist()],
        (jobs.cores[order] * 1000).tolist(),
        jobs.memory_bytes[order].tolist(),
        jobs.gpus[order].tolist(),
        [resource[i] for i in order.tolist()],
        cpu_sens[order].tolist(),
        gpu_sens[order].tolist(),
        cpu_util[order].tolist(),
        gpu_util[order].tolist(),
        names[kind[order]].tolist(),
        strict=True,
    )
    return [Workload(*row) for row in columns]
