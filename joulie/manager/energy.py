"""The energy each workload used, per namespace and workload class, from the node power the
manager already reads each reconcile (the leader's work; issue #29).

Per node, two consecutive readings make one interval, whose energy is the trapezoid
``(previous W + W) / 2 x seconds``; ``core.energy_accounting.attribute`` splits it between the
node's pods and the overhead (what no pod explains), so the accounts and the overhead add up to
what was measured. The accounts are Prometheus counters and, once a minute, one ConfigMap
(:mod:`joulie.manager.energy_store`), from which the next leader continues.

This module books and exports; each node's split plan comes from :mod:`.energy_plans`, and the
per-node state (readings, idle draws, plans as rows) lives in arrays in :mod:`.energy_nodes`, so
that a steady reading at 5,000 nodes is split without a per-node Python loop. A plan is rebuilt
only for the nodes the informers or the planner say may have changed.

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
import math
import operator
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import structlog
from prometheus_client import REGISTRY, CollectorRegistry, Counter

from joulie.core.energy_split_arrays import FloatArray
from joulie.kube.writes import NotPermitted, Writer
from joulie.manager import energy_store
from joulie.manager.cache import ClusterCache
from joulie.manager.energy_groups import GroupAccounts
from joulie.manager.energy_nodes import NodeTable, Split
from joulie.manager.energy_plans import GROUP_SEPARATOR, NodeModel, node_plan
from joulie.manager.power import NodePower, PowerReading

log = structlog.get_logger("joulie.manager.energy")

__all__ = ["EnergyAccountant", "EnergyCounters", "NodeModel"]

GAP_INTERVALS: Final = 3
"""An interval longer than this many reconcile intervals is not counted."""
WRITE_EVERY_S: Final = 60.0
"""Seconds between two writes of the ConfigMap (one object for the whole cluster)."""
END_OF_TERM_WRITE_S: Final = 5.0
"""How long the last write of a term may hold up the hand-over of the Lease."""
OTHER_NAMESPACE: Final = "other"
DEFAULT_GROUPS: Final = 200
"""PodGroups kept when the caller does not say (ENERGY_PODGROUPS_MAX's default)."""
KINDS: Final = ("used", "saved", "lost")

_WATTS = operator.attrgetter("watts")


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

    def of(self, kind: str) -> Counter:
        return {"used": self.workload, "saved": self.saved, "lost": self.lost}[kind]


_COUNTERS: Final = EnergyCounters.registered(REGISTRY)


def reading_watts(nodes: Mapping[str, NodePower]) -> FloatArray:
    """The reading's watts in its order (NaN where a read failed)."""
    try:
        return np.fromiter(map(_WATTS, nodes.values()), dtype=np.float64, count=len(nodes))
    except TypeError:  # a failed read's None
        return np.array(
            [math.nan if w is None else w for w in map(_WATTS, nodes.values())], dtype=np.float64
        )


@dataclass
class _Totals:
    accounts: dict[str, float] = field(default_factory=dict)
    saved: dict[str, float] = field(default_factory=dict)
    lost: dict[str, float] = field(default_factory=dict)
    overhead: float = 0.0
    through: float = 0.0

    def of(self, kind: str) -> dict[str, float]:
        return self.accounts if kind == "used" else self.saved if kind == "saved" else self.lost


class EnergyAccountant:
    """Accounts each reading of the leader's reconcile; :meth:`new_term` at the start of a term,
    :meth:`end_term` at its end.

    A node's split plan is rebuilt only when its pods, Node or NodeHardware may have changed
    (the cache's informers say which nodes they touched) or its power model did: the planner
    says which, once :meth:`follow_models` is given its subscription; without it, every node's
    model is asked for at every reading."""

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
        self._models_followed = False
        self._groups = groups if groups is not None else GroupAccounts(DEFAULT_GROUPS)
        self._totals = _Totals()
        """What the counters hold (the process's own figures, which a restore only raises)."""
        self._series: dict[tuple[str, str], Counter] = {}
        """Each account's counter series by kind (a label look-up per account and reading
        cost more than the split itself)."""
        self._nodes = NodeTable()
        """Per node of the readings: last reading, idle draws, split plan (see energy_nodes);
        the measured idle draws are kept across terms (a measurement)."""
        self._followed: ClusterCache | None = None
        """The cache whose informers feed ``_touched``."""
        self._touched: set[str] = set()
        """Nodes whose plan may be stale since the last reading."""
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

    def follow_models(self, subscribe: Callable[[Callable[[str], None]], None]) -> None:
        """Rebuild a node's plan for a new power model only when ``subscribe``'s listener is
        told its name (the planner's model changes), instead of asking every node's model."""
        subscribe(self._touch)
        self._models_followed = True
        self._touched.update(self._nodes.names)

    def new_term(self) -> None:
        """Forget this process's earlier readings (another leader counted since) and read the
        stored totals again before counting."""
        self._nodes.forget_readings()
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

    def _touch(self, node: str) -> None:
        self._touched.add(node)

    def _account(self, reading: PowerReading) -> None:
        at = reading.at
        if at <= self._not_before:
            return  # counted by the leader that wrote the stored totals
        nodes = self._nodes
        if self._cache is not self._followed:
            # Told from now on which nodes the informers touch; until now, any may have moved.
            self._cache.on_node_touched(self._touch)
            self._followed = self._cache
            self._touched.update(nodes.names)
        touched, self._touched = self._touched, set()
        touched.update(nodes.follow(list(reading.nodes)))
        if not self._models_followed:
            touched.update(self._models_moved())
        for name in touched:
            slot = nodes.slots.get(name)
            if slot is not None:
                self._plan(slot, name)
        split = nodes.close(at, reading_watts(reading.nodes), self._max_gap)
        if split.counted:
            self._book_split(split)
            self._totals.through = max(self._totals.through, at)
            self._dirty = True

    def _models_moved(self) -> list[str]:
        """Nodes whose model is not the one their plan was made with (by identity)."""
        moved = []
        models = self._models
        for name, inputs in zip(self._nodes.names, self._nodes.inputs, strict=True):
            model = models(name)
            spec, controls = model if model is not None else (None, None)
            if inputs is None or inputs.spec is not spec or inputs.controls is not controls:
                moved.append(name)
        return moved

    def _plan(self, slot: int, name: str) -> None:
        """Bring node ``name``'s plan up to date with the caches and its model."""
        cache = self._cache
        pods = cache.workload_pods(name)
        node = cache.nodes.get(name)
        facts = cache.hardware_of(name)
        model = self._models(name)
        nodes = self._nodes
        kept = nodes.inputs[slot]
        status = facts.status if facts is not None else None
        if kept is not None and kept.same(node, status, model, pods):
            nodes.set_empty(slot, not pods)
            return
        nodes.set_plan(slot, node_plan(name, node, facts, model, pods), not pods)

    def _admit(self, account: str) -> str:
        if account in self._totals.accounts or len(self._totals.accounts) < self._max_accounts:
            return account
        return f"{OTHER_NAMESPACE}/{account.rsplit('/', 1)[1]}"

    def _add(self, account: str, joules: float, kind: str = "used") -> None:
        if joules <= 0:
            return
        key = self._admit(account)
        totals = self._totals.of(kind)
        totals[key] = totals.get(key, 0.0) + joules
        series = self._series.get((kind, key))
        if series is None:
            namespace, workload_class = key.rsplit("/", 1)
            series = self._series[kind, key] = self._counters.of(kind).labels(
                namespace, workload_class
            )
        series.inc(joules)

    def _book_split(self, split: Split) -> None:
        sums, keys = split.sums, split.keys
        tables: list[dict[str, float]] = []
        for values in (sums.used, sums.saved, sums.lost):
            booked = np.flatnonzero(values > 0.0).tolist()
            tables.append(
                {keys[i]: joules for i, joules in zip(booked, values[booked].tolist(), strict=True)}
            )
        self._book(tables, sums.overhead_j)

    def _book(self, tables: Collection[Mapping[str, float]], overhead: float) -> None:
        # Once per account per reading, in name order: which new namespace the cap folds away
        # does not depend on the order of nodes or pods.
        for kind, table in zip(KINDS, tables, strict=True):
            for key, joules in sorted(table.items()):
                self._add_with_group(key, kind, joules)
        # The split conserves energy to rounding; a counter never goes down.
        overhead = max(0.0, overhead)
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
        self._book(({}, {}, {}), stored.overhead - self._totals.overhead)
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
