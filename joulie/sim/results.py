"""What one standalone simulation run measured: plain frozen values, JSON-ready.

Nothing here depends on the wall clock or the host: the same run spec gives the same result
bit for bit, so a result file can be compared byte for byte (wall time is reported apart).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

RESULT_SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class Percentiles:
    p50: float = 0.0
    p95: float = 0.0
    p99: float = 0.0

    @classmethod
    def of(cls, values: Sequence[float]) -> Percentiles:
        if not values:
            return cls()
        p50, p95, p99 = np.percentile(np.asarray(values, dtype=np.float64), [50, 95, 99])
        return cls(float(p50), float(p95), float(p99))


@dataclass(frozen=True, slots=True)
class ClassResult:
    """The workloads of one class (``performance`` or ``standard``)."""

    submitted: int
    completed: int
    completion_s: Percentiles
    """Job completion time: finish minus submission (queueing included)."""
    slowdown: Percentiles
    """Completion time over the work at full speed (1.0: started at once, ran uncapped)."""
    stretch: Percentiles
    """Run time over the work at full speed: what caps and presets cost while running."""


@dataclass(frozen=True, slots=True)
class Sample:
    """The cluster at one moment of the run (one row of the CSV time series)."""

    t_s: float
    it_w: float
    facility_w: float
    pue: float
    running: int
    """Workloads running."""
    pending: int
    """Workloads submitted and waiting."""
    performance_nodes: int
    eco_nodes: int
    draining_nodes: int


@dataclass(frozen=True, slots=True)
class LifecycleResult:
    """What the node lifecycle did in a run (``--lifecycle``)."""

    off_node_hours: float
    """Node-hours spent powered off."""
    mean_nodes_off: float
    """Nodes off on average over the run."""
    boots: int
    drains_started: int
    drains_cancelled: int
    """Drains undone at their re-check (a pending pod fitted the node, or it was no longer
    eligible)."""
    shutdowns: int
    boot_wait_pod_hours: float = 0.0
    """Pod-hours spent waiting for room coming back (a node booting, or a drain to be
    cancelled), sampled at each lifecycle pass: what powering nodes off costs the work."""
    boots_held: int = 0
    """Pod-passes a boot that some node group could serve was held back (at a group's maximum,
    or at the boot concurrency limit)."""


@dataclass(frozen=True, slots=True)
class WorkloadEnergy:
    """Who used the IT energy of a run (or of its measurement window): each node's energy split
    between the workloads on it and overhead by ``joulie.core.energy_accounting`` (the split the
    live manager makes; ``joulie.sim.workload_energy``). Each of the three maps plus the
    overhead adds up to the IT energy over the same span."""

    by_class: Mapping[str, float]
    """kWh per workload class (``performance``, ``standard``; both always present)."""
    by_kind: Mapping[str, float]
    """kWh per kind of workload (the generator's type; ``unspecified`` for a workload without
    one): every kind submitted in the run, 0 where none ran."""
    by_namespace: Mapping[str, float]
    """kWh per namespace of the workloads' pods."""
    overhead_kwh: float
    """What no workload explains: idle nodes, idle capacity nobody asked for (and the dynamic
    draw of a node where no pod has a modelled power)."""

    @property
    def total_kwh(self) -> float:
        """The workloads' energy and the overhead: the IT energy of the span (to rounding)."""
        return math.fsum(self.by_class.values()) + self.overhead_kwh


@dataclass(frozen=True, slots=True)
class WindowResult:
    """What a run measured inside its measurement window (``--warmup-hours``): the warm-up
    before ``start_s`` and the tail after ``end_s`` (the end of arrivals) are left out."""

    start_s: float
    end_s: float
    it_energy_kwh: float
    """IT energy drawn between ``start_s`` and ``end_s``."""
    facility_energy_kwh: float
    completed_work_h: float
    """Work of the workloads that completed after ``start_s`` and by ``end_s``: pods x work
    at full speed (on the reference hardware), in hours."""
    classes: Mapping[str, ClassResult]
    """The workloads submitted in [start_s, end_s), per class, wherever they completed."""
    energy_by_workload: WorkloadEnergy | None = None
    """The IT energy of the window per workload class, kind and namespace."""


@dataclass(frozen=True, slots=True)
class RunResult:
    scenario: str
    baseline: str
    seed: int
    nodes: int
    workloads: int
    simulated_s: float
    """Virtual seconds from the start to the last completion (or to the time limit)."""
    it_energy_kwh: float
    facility_energy_kwh: float
    makespan_s: float | None
    """First submission to last completion; None when a workload that could run had not
    finished at the time limit."""
    completed: int
    unfinished: int
    """Workloads still pending or running when the run stopped at its time limit."""
    throughput_per_h: float
    """Completed workloads per simulated hour."""
    preemptions: int
    """Workloads preempted (each restarts from the beginning)."""
    preempted_pods: int
    classes: Mapping[str, ClassResult]
    profile_shares: Mapping[str, Mapping[str, float]]
    """Hardware family -> share of its node-time spent as performance, eco and draining."""
    series: Sequence[Sample] = field(default_factory=tuple)
    idle_it_w: float = 0.0
    """The cluster's IT draw at the end of the run, all work done: what it draws idling on
    after its end when it is compared over a longer window (``joulie.sim.saving``)."""
    idle_facility_w: float = 0.0
    """The same draw at the facility (times the PUE at the end)."""
    completed_work_h: float = 0.0
    """Work of the completed workloads: pods x work at full speed (on the reference hardware,
    nothing capped), in hours. What energy per work-hour divides by."""
    unplaceable: int = 0
    """Workloads that fit nowhere even on the empty cluster (they would stay pending forever,
    so they are counted here and not waited for)."""
    misplaced_performance_pods: int = 0
    """Performance pods started on a node the extender refuses them (eco or draining): must be
    0 whenever Joulie runs."""
    lifecycle: LifecycleResult | None = None
    """None: the run had no node lifecycle (the key is then left out of the dict, so such a
    result reads exactly as before the lifecycle existed)."""
    window: WindowResult | None = None
    """None: the run had no measurement window (the key is then left out of the dict)."""
    energy_by_workload: WorkloadEnergy | None = None
    """The run's IT energy, from 0 to its end, per workload class, kind and namespace, and the
    overhead (None: not accounted, as in a result written before it existed; the key is then
    left out of the dict)."""
    schema_version: int = RESULT_SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for optional in ("lifecycle", "window", "energy_by_workload"):
            if d[optional] is None:
                del d[optional]
        if d.get("window") is not None and d["window"]["energy_by_workload"] is None:
            del d["window"]["energy_by_workload"]
        return d
