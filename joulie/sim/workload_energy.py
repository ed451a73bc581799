"""Who used the standalone engine's energy: each node's energy, over each interval in which its
pods, controls and draw stay the same, split between the workloads running there and the
node's overhead by ``joulie.core.energy_accounting.attribute``, the split the live manager
makes of measured energy (issue #29). Booked per account (workload class, kind, namespace).

What the split reads, per pod of a workload on a node:

* its requests over the node's allocatable CPU, memory and GPUs (its share of the idle draw);
* its modelled marginal power, ``core.pod_power.marginal_watts`` of its demand on the node's
  power profile: the extender's estimate, which the live manager uses too, so the simulator and
  a live cluster split alike. The demand is that of the pod annotated with its class in the
  trace, also in baseline A (whose pods carry no class annotation): the same work is modelled
  alike in every baseline, so a class's saving is not an artefact of the annotation;

and, per node, its draw under the interval's controls with nothing running (the power model's
steady state with no load) as its idle draw. A workload's class is its class in the trace
(``performance`` or ``standard``), in every baseline: baseline A's pods carry no class
annotation, but the comparison is of the same work.

Kept cheap, as it runs in the engine's hot path: the engine tells the ledger when a node is
about to change (its pods, its controls, powered on or off), and only then is the interval that
ends there booked, with the node's pods as they were throughout it (an interval of no length
costs one comparison; a node with no pods books its energy as overhead, which is what the split
gives it). The booked intervals are split a batch at a time, in the order they were booked: a
tight loop of splits runs faster than the same splits among the engine's own work. One split
per node change remains the cost (about 170,000 in the speed benchmark's 60 hours).

The measurement window's two ends cut every node's interval (:meth:`WorkloadLedger.mark`), so
the window's figures are booked apart and add up to its IT energy as the run's do to the run's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from joulie.api.enums import WorkloadClass
from joulie.core.energy_accounting import NodeInterval, PodUse, attribute, pod_use
from joulie.core.pod_power import PodDemand, marginal_watts, pod_demand
from joulie.core.power_model import Controls, steady_state
from joulie.sim.kwok_hardware import load_of
from joulie.sim.pods import pod_manifest
from joulie.sim.results import WorkloadEnergy

if TYPE_CHECKING:
    from joulie.sim.cluster import Cluster, Job

__all__ = ["CLASSES", "UNSPECIFIED_KIND", "Account", "WorkloadLedger", "account_of"]

CLASSES = (WorkloadClass.PERFORMANCE.value, WorkloadClass.STANDARD.value)
"""Every workload class a run reports, in this order."""
UNSPECIFIED_KIND = "unspecified"
"""The kind booked for a workload whose trace gives none."""
_J_PER_KWH = 3.6e6
_BATCH = 64
"""Intervals split at a time, in a tight loop: faster than one split at a time among the
engine's own work, while few enough pending intervals survive into the collector's older
generations (a batch of 512 cost as much in extra garbage collection as it saved)."""
_Amounts = tuple[float, float, float]
"""CPU millicores, memory bytes, GPUs."""


@dataclass(frozen=True, slots=True, order=True)
class Account:
    """Where a workload's energy is booked."""

    workload_class: str
    kind: str
    namespace: str


def account_of(job: Job) -> Account:
    """The account of ``job``'s pods: its class in the trace, its kind, its pods' namespace."""
    workload = job.workload
    metadata = job.manifest.get("metadata")
    namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
    return Account(
        WorkloadClass.PERFORMANCE.value if workload.performance else WorkloadClass.STANDARD.value,
        workload.kind or UNSPECIFIED_KIND,
        str(namespace or "default"),
    )


@dataclass(slots=True)
class _Totals:
    """Joules booked over one stretch of the run (before, inside or after its window)."""

    used_j: dict[str, float] = field(default_factory=dict)
    """Per account key (see ``WorkloadLedger._keys``)."""
    overhead_j: float = 0.0
    """What the splits left to no pod."""
    unshared_j: float = 0.0
    """Nodes' energy while no pod ran on them (apart: so that when the splits are made never
    changes a sum's order)."""


class WorkloadLedger:
    """The energy of one run's cluster per account; the cluster calls :meth:`book` before it
    changes a node, the engine :meth:`mark` at each end of the measurement window."""

    def __init__(self, cluster: Cluster) -> None:
        fleet = cluster.fleet
        self._cluster = cluster
        # The cluster's own per-node state, read in place (never rebound).
        self._node_w = cluster.node_w
        self._pods_on = cluster.pods_on
        self._controls = cluster.controls
        self._since = [0.0] * len(fleet)
        """Per node, up to when its energy is booked."""
        self._group = [int(g) for g in fleet.group_of]
        self._has_gpus = [m.gpus > 0 for m in fleet.groups]
        self._stretches = [_Totals()]
        """The run cut at the window's ends reached so far; the last is being booked."""
        self._pending: list[tuple[float, float, float, bool, list[PodUse]]] = []
        """Intervals of the last stretch booked but not yet split (split in batches)."""
        self._keys: list[str] = []
        """Per job index, its account's key (what ``attribute`` books by)."""
        self._accounts: dict[str, Account] = {}
        self._uses: dict[int, tuple[int, PodUse, _Amounts, _Amounts]] = {}
        """Per running job: node group, one pod's use of a node of that group, what the pod
        requests and what the node offers."""
        self._idle_w: dict[tuple[int, Controls], float] = {}
        self._node_idle: list[tuple[Controls | None, float]] = [(None, 0.0)] * len(fleet)
        """Per node, its controls when last booked and its idle draw under them."""
        self._annotated: dict[tuple[object, ...], PodDemand] = {}
        """Demands of pods annotated with their class, per shape (baseline A's are not)."""

    def attach(self, jobs: Sequence[Job]) -> None:
        """The run's workloads (their accounts are reported, 0 where none of it ran)."""
        self._jobs = jobs
        index: dict[tuple[bool, str, object], str] = {}
        keys = []
        for job in jobs:
            metadata = job.manifest.get("metadata")
            namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
            seen = (job.workload.performance, job.workload.kind, namespace)
            key = index.get(seen)
            if key is None:
                key = index[seen] = str(len(index))
                self._accounts[key] = account_of(job)
            keys.append(key)
        self._keys = keys

    # --- booking --------------------------------------------------------------------------

    def book(self, node: int, t: float) -> None:
        """Book ``node``'s energy up to ``t``: call before its pods, controls or draw change."""
        since = self._since[node]
        if t <= since:
            return
        self._since[node] = t
        watts = self._node_w.item(node)
        if watts <= 0.0:
            return  # powered off
        seconds = t - since
        running = self._pods_on[node]
        if not running:
            self._stretches[-1].unshared_j += watts * seconds  # nobody to share it with
            return
        group = self._group[node]
        cache = self._uses
        uses = []
        for index, pods in running.items():
            cached = cache.get(index)
            if cached is not None and cached[0] == group and len(pods) == 1:
                uses.append(cached[1])  # the usual case, kept cheap: the engine's hot path
            else:
                uses.append(self._use(index, len(pods), group))
        controls = self._controls[node]
        idle = self._node_idle[node]
        if idle[0] is not controls:  # the node's controls changed since it was last booked
            idle = self._node_idle[node] = (controls, self._idle(group, controls))
        pending = self._pending
        pending.append((watts * seconds, seconds, idle[1], self._has_gpus[group], uses))
        if len(pending) >= _BATCH:
            self._split_pending()

    def _split_pending(self) -> None:
        """Split the intervals booked since the last time, in the order they were booked."""
        totals = self._stretches[-1]
        used = totals.used_j
        overhead = totals.overhead_j
        for energy_j, seconds, idle_w, has_gpus, uses in self._pending:
            split = attribute(NodeInterval(energy_j, seconds, idle_w, has_gpus), uses)
            for key, joules in split.used_j.items():
                used[key] = used.get(key, 0.0) + joules
            overhead += split.overhead_j
        totals.overhead_j = overhead
        self._pending.clear()

    def _use(self, index: int, pods: int, group: int) -> PodUse:
        """The use of ``pods`` pods of job ``index`` on a node of ``group``."""
        cached = self._uses.get(index)
        if cached is None or cached[0] != group:
            job = self._jobs[index]
            workload = job.workload
            model = self._cluster.fleet.groups[group]
            requested = (
                float(workload.cpu_millis),
                float(workload.memory_bytes),
                float(workload.gpus if workload.gpu_resource else 0),
            )
            offered = (float(model.cpu_millis), float(model.memory_bytes), float(model.gpus))
            marginal = marginal_watts(self._demand(job), model.power_profile)
            use = pod_use(self._keys[index], requested, offered, marginal)
            cached = self._uses[index] = (group, use, requested, offered)
        if pods == 1:
            return cached[1]
        _, use, requested, offered = cached
        return pod_use(
            use.account,
            (requested[0] * pods, requested[1] * pods, requested[2] * pods),
            offered,
            use.marginal_w * pods,
        )

    def _demand(self, job: Job) -> PodDemand:
        """What ``job``'s pod asks, annotated with the job's class in the trace."""
        workload = job.workload
        if job.demand.performance == workload.performance:
            return job.demand
        shape = (workload.cpu_millis, workload.memory_bytes, workload.gpus, workload.gpu_resource)
        demand = self._annotated.get(shape)
        if demand is None:
            demand = self._annotated[shape] = pod_demand(pod_manifest(workload))
        return demand

    def _idle(self, group: int, controls: Controls) -> float:
        """What a node of ``group`` draws with nothing running under ``controls``."""
        key = (group, controls)
        watts = self._idle_w.get(key)
        if watts is None:
            model = self._cluster.fleet.groups[group]
            empty = load_of((), model.cpu_millis / 1000.0, model.gpus)
            watts = self._idle_w[key] = steady_state(model.power, empty, controls).node_w
        return watts

    def forget(self, index: int) -> None:
        """Job ``index`` left its nodes (what it used there is booked)."""
        self._uses.pop(index, None)

    def book_all(self, t: float) -> None:
        for node in range(len(self._since)):
            self.book(node, t)

    def mark(self, t: float) -> None:
        """An end of the measurement window: book every node up to ``t`` and start the next
        stretch."""
        self.book_all(t)
        self._split_pending()
        self._stretches.append(_Totals())

    @property
    def marks(self) -> int:
        """Window ends marked so far."""
        return len(self._stretches) - 1

    # --- figures ----------------------------------------------------------------------------

    def energy(self, stretch: int | None = None) -> WorkloadEnergy:
        """kWh per class, kind and namespace, and the overhead: of one stretch, or (None) of
        the whole run so far."""
        self._split_pending()
        chosen = self._stretches if stretch is None else [self._stretches[stretch]]
        used: dict[str, float] = {}
        overhead = 0.0
        for totals in chosen:
            for key, joules in totals.used_j.items():
                used[key] = used.get(key, 0.0) + joules
            overhead += totals.overhead_j + totals.unshared_j
        by: tuple[dict[str, float], dict[str, float], dict[str, float]] = (
            dict.fromkeys(CLASSES, 0.0),
            {},
            {},
        )
        # Sorted accounts: the sums' order never depends on how strings hash in this process.
        for key, account in sorted(self._accounts.items(), key=lambda item: item[1]):
            kwh = used.get(key, 0.0) / _J_PER_KWH
            names = (account.workload_class, account.kind, account.namespace)
            for totals_by, name in zip(by, names, strict=True):
                totals_by[name] = totals_by.get(name, 0.0) + kwh
        by_class, by_kind, by_namespace = (dict(sorted(d.items())) for d in by)
        return WorkloadEnergy(
            by_class=by_class,
            by_kind=by_kind,
            by_namespace=by_namespace,
            overhead_kwh=overhead / _J_PER_KWH,
        )
