"""The energy each workload used, per namespace and workload class, from the node power the
manager already reads each reconcile (the leader's work; issue #29).

Per node, two consecutive readings make one interval, whose energy is the trapezoid
``(previous W + W) / 2 x seconds``; ``core.energy_accounting.attribute`` splits it between the
node's pods and the overhead (what no pod explains), so the accounts and the overhead add up to
what was measured. The accounts are Prometheus counters and, once a minute, one ConfigMap
(:mod:`joulie.manager.energy_store`), from which the next leader continues.

Choices, and what they cost:

* **Gaps are not guessed.** An interval longer than 3 reconcile intervals (a failed read, a
  paused leader) is lost, and the next reading starts afresh: interpolating across it would
  invent energy nobody measured.
* **Idle draw is measured where it can be.** A node's idle draw is its lowest reading while it
  ran no workload pod (in memory, per node); a node not seen empty by this process (a busy node,
  or any node just after a takeover) gets the power model's idle draw for its hardware under its
  controls (``hardware.power_spec``; the catalog's measured idle where it has one), and only a
  node the planner has no model of falls back to its lowest reading, which overstates it. The
  split adds up to the measured energy either way.
* **The pods are those of the interval's end**, bound to the node and not finished, DaemonSet
  pods and mirror pods aside (their draw is overhead): a pod that started or ended within the
  interval gets all or none of it (one interval per pod, at RECONCILE_INTERVAL).
* **A takeover loses at most one interval per node.** Each term starts from its own readings
  (the previous term's are forgotten) and ignores readings not after the stored ``through``, so
  nothing is counted twice; the interval between the old leader's last reading and the new
  one's first is not counted.
* **Bounded cardinality.** Past ENERGY_ACCOUNTS_MAX accounts, a namespace not yet accounted is
  booked as namespace ``other`` (so at most that many series, plus ``other``'s two).

* **The saving is a ratio applied to a measurement.** Each pod's measured part is scaled by
  ``core.energy_counterfactual``'s factor: the power model's energy for the same work with no
  cap and no clock ceiling over its energy under the controls the node's NodeTwin spec puts in
  force, on the node's hardware as the catalog describes it, with the pod's busy cores and board
  utilisation estimated by the extender's coefficients (0.7 of its CPU request; 0.65 of its
  boards, 0.85 for a performance pod). A node without controls saves nothing, exactly. The
  energy a control *cost* (a cap that slowed work more than it lowered the draw) is counted as
  lost, not netted away: ``joulie_workload_energy_saved_joules_total`` less
  ``joulie_workload_energy_lost_joules_total`` is the net saving.
"""

from __future__ import annotations

import asyncio
import functools
import math
import operator
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Final

import structlog
from prometheus_client import REGISTRY, CollectorRegistry, Counter

from joulie.api import keys
from joulie.api.enums import WorkloadClass
from joulie.core.energy_accounting import (
    Attribution,
    NodeInterval,
    PodUse,
    SplitPlan,
    account_key,
    pod_use,
    resource_share,
    split_plan,
)
from joulie.core.energy_counterfactual import PodWork, counterfactuals, idle_power
from joulie.core.pod_power import (
    CPU_FALLBACK_CORES_PERFORMANCE,
    CPU_FALLBACK_CORES_STANDARD,
    DEFAULT_COEFFICIENTS,
    NodePowerProfile,
    PodDemand,
    gpu_coefficient,
    marginal_watts,
    node_power_profile,
)
from joulie.core.power_model import Controls, NodePowerSpec
from joulie.kube.projections import SlimNode, SlimPod
from joulie.kube.writes import NotPermitted, Writer
from joulie.manager import energy_store
from joulie.manager.cache import ClusterCache
from joulie.manager.energy_groups import GroupAccounts
from joulie.manager.lifecycle.facts import room
from joulie.manager.power import PowerReading

log = structlog.get_logger("joulie.manager.energy")

__all__ = ["EnergyAccountant", "EnergyCounters", "NodeModel", "account_of", "pod_uses"]

GAP_INTERVALS: Final = 3
"""An interval longer than this many reconcile intervals is not counted."""
WRITE_EVERY_S: Final = 60.0
"""Seconds between two writes of the ConfigMap (one object for the whole cluster)."""
END_OF_TERM_WRITE_S: Final = 5.0
"""How long the last write of a term may hold up the hand-over of the Lease."""
OTHER_NAMESPACE: Final = "other"
GROUP_SEPARATOR: Final = "\t"
"""Between a pod's class account and its PodGroup in the attribution's account key (a tab is in
no Kubernetes name)."""
DEFAULT_GROUPS: Final = 200
"""PodGroups kept when the caller does not say (ENERGY_PODGROUPS_MAX's default)."""
FACTORS_CACHED: Final = 4_096
"""Distinct (hardware, controls) whose modelled idle draw is kept (a bounded cache)."""
FACTORS_SHARED: Final = 1_024
"""Distinct (hardware, controls, pods' work) whose saving factors are kept (a bounded cache;
each node keeps its own split plan anyway)."""
_GIB: Final = float(2**30)

NodeModel = tuple[NodePowerSpec, Controls]
"""A node's power model and the controls in force on it."""


@dataclass(frozen=True)
class EnergyCounters:
    workload: Counter
    overhead: Counter
    saved: Counter
    lost: Counter

    @classmethod
    def registered(cls, registry: CollectorRegistry) -> EnergyCounters:
        return cls(
            Counter(
                "joulie_workload_energy_joules_total",
                "Measured node energy attributed to the pods of a namespace and workload class",
                ["namespace", "class"],
                registry=registry,
            ),
            Counter(
                "joulie_node_overhead_energy_joules_total",
                "Measured node energy no pod explains (idle capacity nobody asked for, system "
                "pods, unmodelled draw)",
                registry=registry,
            ),
            Counter(
                "joulie_workload_energy_saved_joules_total",
                "Energy the pods of a namespace and workload class would have drawn more without "
                "Joulie's controls (measured energy times the power model's ratio)",
                ["namespace", "class"],
                registry=registry,
            ),
            Counter(
                "joulie_workload_energy_lost_joules_total",
                "Energy Joulie's controls cost the pods of a namespace and workload class (work "
                "slowed more than its draw fell); the net saving is saved less lost",
                ["namespace", "class"],
                registry=registry,
            ),
        )


_COUNTERS: Final = EnergyCounters.registered(REGISTRY)


def account_of(pod: SlimPod) -> str:
    """ "<namespace>/<class>": the pod's workload class when it names one, else standard."""
    return account_key(pod.namespace, pod.annotations.get(keys.WORKLOAD_CLASS_ANNOTATION))


@functools.lru_cache(maxsize=FACTORS_CACHED)
def _modelled_idle_w(spec: NodePowerSpec, controls: Controls) -> float:
    return idle_power(spec, controls)


@functools.lru_cache(maxsize=FACTORS_SHARED)
def _factors(
    spec: NodePowerSpec, controls: Controls, works: tuple[PodWork, ...], cores: float
) -> tuple[float, ...]:
    # Nodes of one hardware group running the same kind of work share their factors: the first
    # pass over a large cluster computes each configuration once.
    return tuple(counterfactuals(spec, controls, works, cores))


def pod_uses(
    node: SlimNode | None,
    pods: Iterable[SlimPod],
    profile: NodePowerProfile | None,
    model: NodeModel | None = None,
) -> tuple[list[PodUse], bool]:
    """The pods' uses of ``node`` (their requests' shares of its allocatable resources, their
    modelled marginal power and, given the node's power ``model``, what the same work would have
    drawn uncontrolled) and whether it has GPUs. A node not in the cache offers nothing: its
    energy is overhead."""
    offered = room(node.allocatable) if node is not None else None
    cpu = offered.cpu_millis if offered is not None else 0
    memory = offered.memory_bytes if offered is not None else 0
    gpus = sum(offered.gpus.values()) if offered is not None else 0
    uses = []
    works = []
    for pod in pods:
        account = account_of(pod)
        performance = account.endswith("/" + WorkloadClass.PERFORMANCE.value)
        if pod.pod_group:
            account += GROUP_SEPARATOR + pod.pod_group
        cores = pod.cpu_millis / 1000
        if cores <= 0:
            # The extender's estimate assumes a pod asking for no CPU uses some; so does this.
            cores = CPU_FALLBACK_CORES_PERFORMANCE if performance else CPU_FALLBACK_CORES_STANDARD
        demand = PodDemand(cores, pod.memory_bytes / _GIB, pod.gpus, performance)
        use = pod_use(
            account,
            (pod.cpu_millis, pod.memory_bytes, pod.gpus),
            (cpu, memory, gpus),
            marginal_watts(demand, profile),
        )
        uses.append(use)
        works.append(
            PodWork(
                idle_share=resource_share(use, gpus > 0),
                cpu_cores=cores * DEFAULT_COEFFICIENTS.cpu_util,
                gpus=pod.gpus,
                gpu_util=gpu_coefficient(performance, DEFAULT_COEFFICIENTS) if pod.gpus else 0.0,
            )
        )
    if model is not None and uses:
        factors = _factors(model[0], model[1], tuple(works), cpu / 1000)
        uses = [replace(u, counterfactual=f) for u, f in zip(uses, factors, strict=True)]
    return uses, gpus > 0


@dataclass(frozen=True, slots=True)
class _NodePlan:
    """A node's split plan and what it was made from (the node, its NodeHardware, its model,
    its pods), compared by identity: the informers replace an object whenever it changes."""

    node: SlimNode | None
    facts: object
    spec: NodePowerSpec | None
    controls: Controls | None
    pods: tuple[SlimPod, ...]
    plan: SplitPlan
    modelled_idle_w: float | None
    """The power model's idle draw of the node under its controls (None without a model)."""

    def made_from(
        self,
        node: SlimNode | None,
        facts: object,
        model: NodeModel | None,
        pods: list[SlimPod],
    ) -> bool:
        spec, controls = model if model is not None else (None, None)
        return (
            self.node is node
            and self.facts is facts
            and self.spec is spec
            and self.controls is controls
            and len(self.pods) == len(pods)
            and all(map(operator.is_, self.pods, pods))
        )


@dataclass(frozen=True, slots=True)
class _Sample:
    at: float
    watts: float


@dataclass
class _Booked:
    """One reading's splits, summed per account (saved and lost kept apart per node)."""

    used: dict[str, float] = field(default_factory=dict)
    saved: dict[str, float] = field(default_factory=dict)
    lost: dict[str, float] = field(default_factory=dict)
    overhead: float = 0.0

    def add(self, split: Attribution) -> None:
        for key, joules in split.used_j.items():
            self.used[key] = self.used.get(key, 0.0) + joules
        for key, joules in split.saved_j.items():
            if joules > 0:
                self.saved[key] = self.saved.get(key, 0.0) + joules
            elif joules < 0:
                self.lost[key] = self.lost.get(key, 0.0) - joules
        self.overhead += split.overhead_j


@dataclass
class _Totals:
    accounts: dict[str, float] = field(default_factory=dict)
    saved: dict[str, float] = field(default_factory=dict)
    lost: dict[str, float] = field(default_factory=dict)
    overhead: float = 0.0
    through: float = 0.0


class EnergyAccountant:
    """Accounts each reading of the leader's reconcile; :meth:`new_term` at the start of a term,
    :meth:`end_term` at its end."""

    def __init__(
        self,
        cache: ClusterCache,
        writer: Writer,
        namespace: str,
        interval: float,
        max_accounts: int,
        counters: EnergyCounters | None = None,
        clock: Callable[[], float] = time.monotonic,
        models: Callable[[str], NodeModel | None] = lambda _: None,
        groups: GroupAccounts | None = None,
    ) -> None:
        self._cache = cache
        self._writer = writer
        self._namespace = namespace
        self._max_gap = GAP_INTERVALS * interval
        self._max_accounts = max_accounts
        self._counters = counters if counters is not None else _COUNTERS
        self._clock = clock
        self._models = models
        """Per node, its power model and controls (the planner's); None: nothing is saved."""
        self._groups = groups if groups is not None else GroupAccounts(DEFAULT_GROUPS)
        self._totals = _Totals()
        """What the counters hold (the process's own figures, which a restore only raises)."""
        self._idle: dict[str, float] = {}
        """Per node, the lowest reading while it ran no workload pod: its measured idle draw
        (kept across terms, a measurement)."""
        self._lowest: dict[str, float] = {}
        """Per node, the lowest reading seen (the idle draw of last resort)."""
        self._plans: dict[str, _NodePlan] = {}
        """Per node, its split plan while its pods, hardware and controls stay the same: a
        steady reconcile at 5,000 nodes then costs one pass over each node's accounts."""
        self._last: dict[str, _Sample] = {}
        self._restored = False
        self._not_before = 0.0
        self._dirty = False
        self._written_at = -math.inf

    @property
    def totals(self) -> energy_store.StoredTotals:
        t = self._totals
        return energy_store.StoredTotals(
            dict(t.accounts),
            t.overhead,
            t.through,
            dict(t.saved),
            dict(t.lost),
            tuple(self._groups.items()),
        )

    def new_term(self) -> None:
        """Forget this process's earlier readings (another leader counted since) and read the
        stored totals again before counting."""
        self._last.clear()
        self._restored = False
        self._dirty = False
        self._written_at = -math.inf

    async def record(self, reading: PowerReading) -> None:
        """Account ``reading``; write the totals when the last write is a minute old. Raises
        :class:`NotPermitted` once this process may not write."""
        if not self._restored and not await self._restore():
            return  # counting over totals it could not read would overwrite them
        self._account(reading)
        if self._dirty and self._clock() - self._written_at >= WRITE_EVERY_S:
            await self._persist()

    async def end_term(self) -> None:
        """The term's last write, if anything is unwritten and this process may still write."""
        if not (self._restored and self._dirty):
            return
        try:
            async with asyncio.timeout(END_OF_TERM_WRITE_S):
                await self._persist()
        except NotPermitted:
            log.info("energy accounts not written at the end of the term: no longer leading")
        except TimeoutError:
            # The request may still land after the next leader read the totals: what this term
            # counted since its last write is then lost (as one interval per node is anyway).
            log.warning("energy accounts not written at the end of the term: no answer in time")

    # --- accounting -------------------------------------------------------------------------

    def _account(self, reading: PowerReading) -> None:
        at = reading.at
        if at <= self._not_before:
            return  # counted by the leader that wrote the stored totals
        for table in (self._last, self._idle, self._lowest, self._plans):
            for name in [n for n in table if n not in reading.nodes]:
                del table[name]
        booked = _Booked()
        for name, power in reading.nodes.items():
            watts = power.watts
            if watts is None or not math.isfinite(watts) or watts < 0:
                continue  # a failed read: the next good one spans it, if within the gap
            previous = self._last.get(name)
            if previous is not None and previous.at == at:
                continue  # the reader's cached reading, already counted
            self._last[name] = _Sample(at, watts)
            pods = self._cache.workload_pods(name)
            self._lowest[name] = min(self._lowest.get(name, watts), watts)
            if not pods:
                self._idle[name] = min(self._idle.get(name, watts), watts)
            if previous is None:
                continue
            seconds = at - previous.at
            if not 0 < seconds <= self._max_gap:
                continue  # a gap is lost, not guessed; this reading starts afresh
            energy = (previous.watts + watts) / 2 * seconds
            booked.add(self._split(name, pods, energy, seconds))
            self._totals.through = max(self._totals.through, at)
            self._dirty = True
        self._book(booked)

    def _idle_w(self, name: str, memo: _NodePlan) -> float:
        """The node's idle draw: measured while it ran no workload pod, else the power model's
        under its controls, else the lowest reading seen (which overstates it on a node never
        seen idle)."""
        measured = self._idle.get(name)
        if measured is not None:
            return measured
        if memo.modelled_idle_w is not None:
            return memo.modelled_idle_w
        return self._lowest[name]

    def _split(self, name: str, pods: list[SlimPod], energy: float, seconds: float) -> Attribution:
        node = self._cache.nodes.get(name)
        facts = self._cache.hardware_of(name)
        model = self._models(name)
        memo = self._plans.get(name)
        if memo is None or not memo.made_from(node, facts, model, pods):
            cores = room(node.allocatable).cpu_millis // 1000 if node is not None else 0
            profile = node_power_profile(facts.status if facts is not None else None, cores)
            bound = [p for p in pods if p.node_name == name]  # a nominated pod draws nothing yet
            uses, has_gpus = pod_uses(node, bound, profile, model)
            spec, controls = model if model is not None else (None, None)
            memo = _NodePlan(
                node,
                facts,
                spec,
                controls,
                tuple(pods),
                split_plan(uses, has_gpus),
                _modelled_idle_w(*model) if model is not None else None,
            )
            self._plans[name] = memo
        return memo.plan.apply(NodeInterval(energy, seconds, self._idle_w(name, memo)))

    def _admit(self, account: str) -> str:
        if account in self._totals.accounts or len(self._totals.accounts) < self._max_accounts:
            return account
        return f"{OTHER_NAMESPACE}/{account.rsplit('/', 1)[1]}"

    def _add(self, account: str, joules: float, kind: str = "used") -> None:
        if joules <= 0:
            return
        key = self._admit(account)
        namespace, workload_class = key.rsplit("/", 1)
        totals, counter = {
            "used": (self._totals.accounts, self._counters.workload),
            "saved": (self._totals.saved, self._counters.saved),
            "lost": (self._totals.lost, self._counters.lost),
        }[kind]
        totals[key] = totals.get(key, 0.0) + joules
        counter.labels(namespace, workload_class).inc(joules)

    def _book(self, booked: _Booked) -> None:
        # Once per account per reading, in name order: which new namespace the cap folds away
        # does not depend on the order of nodes or pods.
        for kind, table in (("used", booked.used), ("saved", booked.saved), ("lost", booked.lost)):
            for key, joules in sorted(table.items()):
                self._add_with_group(key, kind, joules)
        # The split conserves energy to rounding; a counter never goes down.
        overhead = max(0.0, booked.overhead)
        self._totals.overhead += overhead
        self._counters.overhead.inc(overhead)

    def _add_with_group(self, key: str, kind: str, joules: float) -> None:
        account, _, group = key.partition(GROUP_SEPARATOR)
        self._add(account, joules, kind)
        if group:
            self._groups.add(f"{account.rsplit('/', 1)[0]}/{group}", kind, joules)

    # --- persistence ------------------------------------------------------------------------

    async def _restore(self) -> bool:
        try:
            stored = await energy_store.load(self._writer, self._namespace)
        except energy_store.UnusableStore as exc:
            log.warning(
                "energy accounts ConfigMap unusable; accounts start from this process's own",
                configmap=energy_store.CONFIGMAP_NAME,
                problem=str(exc),
            )
            stored = energy_store.StoredTotals()
        except NotPermitted:
            raise
        except Exception as exc:  # a failed read must not stop the reconcile; retried next time
            log.warning("energy accounts could not be read; not counting yet", error=str(exc))
            return False
        # The counters continue from the larger of what they hold and what was stored (this
        # process may have led before and counted part of it itself).
        t = self._totals
        for kind, have, read in (
            ("used", t.accounts, stored.accounts),
            ("saved", t.saved, stored.saved),
            ("lost", t.lost, stored.lost),
        ):
            for account, joules in read.items():
                self._add(account, joules - have.get(account, 0.0), kind)
        self._groups.restore(stored.groups)
        self._book(_Booked(overhead=stored.overhead - self._totals.overhead))
        self._totals.through = max(self._totals.through, stored.through)
        self._not_before = self._totals.through
        self._restored = True
        return True

    async def _persist(self) -> None:
        try:
            await energy_store.save(self._writer, self._namespace, self.totals)
        except NotPermitted:
            raise
        except Exception as exc:  # a failed write must not stop the reconcile; retried
            log.warning("energy accounts could not be written; retried", error=str(exc))
            return
        self._written_at = self._clock()
        self._dirty = False
