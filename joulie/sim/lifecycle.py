"""The node lifecycle in the standalone engine: idle nodes drained and powered off, and off nodes
booted again when pending work needs them. Every decision is the live controller's:
``core.lifecycle.derive`` and ``decide`` (the default policy matrix) per node,
``core.lifecycle_limits.admit`` over the candidates, and ``core.lifecycle.drain_step`` (with
``fits_pending``) at the end of each drain's settle. The engine only supplies the facts.

A pass runs at every engine tick (``interval_s``, 60 s; the live controller's
LIFECYCLE_INTERVAL defaults to 30 s, so with one drain at a time the simulated fleet powers
down at most half as fast); between passes the engine wakes at each drain's settle deadline and
each boot's end. What the simulator chose where the live cluster has physics or other
controllers:

* Every node is healthy: a node that is on is Ready with a fresh heartbeat, so ``down`` never
  occurs, and ``unpaired`` only while a node boots (NotReady, no heartbeat yet, within its boot
  grace: the matrix leaves it alone). A boot delay at or past the boot grace is refused, since
  every boot would end in a shutdown.
* A drain cordons the node (no pod lands there) for the settle; the check then reads the truth:
  the pods on the node, whether a pending pod fits it, and the node's fresh action. A shutdown
  is instant (the node is idle and cordoned).
* A powered-off node leaves the cluster, as the KWOK and Cluster API actuators delete its Node:
  it is not managed (nor counted NotReady), draws 0 W, takes no pods, and its idle spell is
  forgotten. The manager of B and C keeps planning it (its NodeTwin stays).
* Demand returning: after the scheduling pass of each lifecycle pass, off nodes are booted for
  the pending workloads that no serving node could take (``joulie.sim.provisioning``: what they
  need, never the whole fleet).
* A booting node draws its idle power for ``boot_delay_s`` (300 s by default: a cloud VM, or a
  server with a quick firmware), then is Ready and schedulable, launched at the boot's start.

Cost: ``derive`` is pure and reads nothing of a node's name, so the nodes whose facts are equal
(most idle nodes share a launch time and the pass they were first seen idle) are derived once
per group, and a pass derives only the nodes whose facts changed plus the longest idle (see
``NodeLifecycle._pass``). With the lifecycle off none of this exists: the placement's only
extra is one test of ``Scheduler.cordoned`` being None.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from joulie.api.lifecycle import Action, WorkerState, all_tuples, default_matrix
from joulie.core.lifecycle import (
    Demand,
    Derived,
    DrainStep,
    LifecycleConfig,
    NodeFacts,
    decide,
    derive,
    drain_step,
    fits_pending,
)
from joulie.core.lifecycle_limits import Candidate, FleetCounts, Limits, admit
from joulie.sim.cluster import Cluster, Job
from joulie.sim.fleet import Fleet
from joulie.sim.placement import Scheduler
from joulie.sim.provisioning import nodes_to_boot
from joulie.sim.queue import PendingQueue
from joulie.sim.results import LifecycleResult

__all__ = ["DEFAULT_BOOT_DELAY_S", "DEFAULT_INTERVAL_S", "LifecycleSettings", "NodeLifecycle"]

DEFAULT_BOOT_DELAY_S = 300.0
DEFAULT_INTERVAL_S = 60.0
"""The engine's reconcile tick (the live controller's LIFECYCLE_INTERVAL defaults to 30 s)."""

IntArray = npt.NDArray[np.intp]
FloatArray = npt.NDArray[np.float64]

ON, DRAINING, OFF, BOOTING = 0, 1, 2, 3
_NO_SPELL = -math.inf
"""``idle_since`` of a node without an idle spell (None in the facts)."""


@dataclass(frozen=True)
class LifecycleSettings:
    config: LifecycleConfig = field(default_factory=LifecycleConfig)
    limits: Limits = field(default_factory=Limits)
    boot_delay_s: float = DEFAULT_BOOT_DELAY_S
    """From powering an off node on until it is Ready and takes pods."""
    interval_s: float = DEFAULT_INTERVAL_S

    def __post_init__(self) -> None:
        if self.interval_s <= 0:
            raise ValueError(f"lifecycle_interval_s must be > 0, got {self.interval_s:g}")
        if not 0 <= self.boot_delay_s < self.config.boot_grace_s:
            raise ValueError(
                f"lifecycle_boot_delay_s {self.boot_delay_s:g} must be >= 0 and shorter than "
                f"lifecycle_boot_grace_s {self.config.boot_grace_s:g} (a node still booting "
                "past its grace is shut down as broken)"
            )


class NodeLifecycle:
    def __init__(
        self,
        fleet: Fleet,
        cluster: Cluster,
        scheduler: Scheduler,
        queue: PendingQueue,
        jobs: list[Job],
        settings: LifecycleSettings,
    ) -> None:
        n = len(fleet)
        self.fleet, self.cluster, self.scheduler = fleet, cluster, scheduler
        self.queue, self.jobs, self.settings = queue, jobs, settings
        self.config = settings.config
        self.matrix = default_matrix()
        self.lazy = all(
            self.matrix.action(key) is Action.NONE
            if key.state is WorkerState.BUSY
            else self.matrix.action(key) is not Action.START_SHUTDOWN
            for key in all_tuples()
            if key.state in (WorkerState.BUSY, WorkerState.IDLE)
        )
        """The matrix leaves busy nodes alone and never shuts an idle one down outright: a
        pass need not derive every node (see ``_pass``)."""
        self.phase = np.zeros(n, dtype=np.int8)
        self.launched_at = np.zeros(n)
        self.ready_at = np.zeros(n)
        self.idle_since = np.full(n, _NO_SPELL)
        self.idle_draw = np.zeros(n)
        """Each off node's idle draw as it went off (what choosing the cheapest to boot reads:
        reading every off node's steady state at each pass cost more than the plan)."""
        self.seen_pods = np.full(n, -1, dtype=np.int64)
        """Pod count at the node's last derivation (-1: derive it at the next pass)."""
        self.drains: dict[int, tuple[float, float]] = {}
        """Draining node -> (drain start, when to check it)."""
        self.boots: dict[int, float] = {}
        """Booting node -> when it is Ready."""
        scheduler.cordoned = np.zeros(n, dtype=np.bool_)
        self._index = {name: i for i, name in enumerate(fleet.names)}
        self._name_rank = np.argsort(np.argsort(np.array(fleet.names)))
        """Each node's place in name order (``admit``'s last tie-break)."""
        self.next_pass = 0.0
        self.passed = False
        """A pass ran at the current moment: the provisioner runs after the scheduling pass."""
        self.boot_count = self.drains_started = self.drains_cancelled = self.shutdowns = 0
        self.off_node_s = 0.0
        self.boot_wait_pod_s = 0.0
        self.boots_held = 0
        self._off = 0
        self._off_clock = 0.0

    # --- time ---------------------------------------------------------------------------

    def next_event(self) -> float:
        checks = min((check for _, check in self.drains.values()), default=math.inf)
        return min(self.next_pass, checks, min(self.boots.values(), default=math.inf))

    def _count_off(self, t: float, delta: int) -> None:
        self.off_node_s += self._off * (t - self._off_clock)
        self._off_clock = t
        self._off += delta

    def step(self, t: float) -> list[int]:
        """Boots ended, drains checked, and the pass if due, at ``t``; the nodes that became
        schedulable again (the queue's parked work may fit there now)."""
        opened = [node for node, ready in sorted(self.boots.items()) if ready <= t]
        for node in opened:
            del self.boots[node]
            self.phase[node] = ON
            self.ready_at[node] = t
            self.seen_pods[node] = -1
            self._cordon(node, False)
        for node, (started, check) in sorted(self.drains.items()):
            if check <= t and self._check_drain(node, started, t):
                opened.append(node)
        if t >= self.next_pass:
            self._pass(t)
            self.passed = True
            self.next_pass += self.settings.interval_s
        return opened

    def close(self, t: float) -> LifecycleResult:
        self._count_off(t, 0)
        return LifecycleResult(
            off_node_hours=self.off_node_s / 3600.0,
            mean_nodes_off=self.off_node_s / t if t > 0 else 0.0,
            boots=self.boot_count,
            drains_started=self.drains_started,
            drains_cancelled=self.drains_cancelled,
            shutdowns=self.shutdowns,
            boot_wait_pod_hours=self.boot_wait_pod_s / 3600.0,
            boots_held=self.boots_held,
        )

    # --- one node -----------------------------------------------------------------------

    def _cordon(self, node: int, cordoned: bool) -> None:
        assert self.scheduler.cordoned is not None
        self.scheduler.cordoned[node] = cordoned

    def _facts(self, node: int, t: float, ready: bool, pods: int, spell: float) -> NodeFacts:
        return NodeFacts(
            name=self.fleet.names[node],
            launched_at=float(self.launched_at[node]),
            ready=ready,
            ready_changed_at=float(self.ready_at[node]) if ready else None,
            heartbeat_at=t if ready else None,
            workload_pods=pods,
            idle_since=None if spell == _NO_SPELL else spell,
        )

    def _free_gpus(self, node: int) -> dict[str, int]:
        resource = self.fleet.gpu_resource[node]
        if not resource:
            return {}
        return {resource: int(self.cluster.free_gpus[node])}

    def _check_drain(self, node: int, started: float, t: float) -> bool:
        """The drain's step after its settle; True when it was cancelled."""
        pods = int(self.cluster.pod_count[node])
        facts = self._facts(node, t, True, pods, float(self.idle_since[node]))
        derived = derive(facts, t, self.config)
        self.idle_since[node] = _NO_SPELL if derived.idle_since is None else derived.idle_since
        step, _ = drain_step(
            started,
            t,
            self.config,
            live_workload_pods=[
                p.name for pods in self.cluster.pods_on[node].values() for p in pods
            ],
            demand_fits=self._could_use(node, self.queue.waiting_requests()),
            fresh_action=decide(derived, self.matrix),
        )
        if step is DrainStep.WAIT:
            self.drains[node] = (started, t + self.config.drain_settle_s)
            return False
        del self.drains[node]
        if step is DrainStep.CANCEL:
            self.drains_cancelled += 1
            self.phase[node] = ON
            self._cordon(node, False)
            return True
        self._power_off(node, t)
        return False

    def _power_off(self, node: int, t: float) -> None:
        self.idle_draw[node] = self.cluster.steady[node].node_w
        self.boots.pop(node, None)
        self.shutdowns += 1
        self.phase[node] = OFF
        self._cordon(node, True)
        self.idle_since[node] = _NO_SPELL
        self.seen_pods[node] = -1
        self.cluster.power(node, False, t)
        self._count_off(t, 1)

    def _boot(self, node: int, t: float) -> None:
        self.boot_count += 1
        self.phase[node] = BOOTING
        self.launched_at[node] = t
        self.boots[node] = t + self.settings.boot_delay_s
        self.cluster.power(node, True, t)
        self._count_off(t, -1)

    # --- the pass -----------------------------------------------------------------------

    def _groups(self, nodes: IntArray) -> list[tuple[int, IntArray]]:
        """``nodes`` in groups of equal facts, longest idle first: each group's first node
        (the one derived for all) and its members in name order."""
        pods = self.cluster.pod_count[nodes]
        # A node is busy for any pod count; while the matrix leaves busy nodes alone, only
        # that count's being zero or not tells them apart, so busy nodes fall into few groups.
        keys = np.stack(
            (
                self.idle_since[nodes],
                self.phase[nodes] == ON,
                self.launched_at[nodes],
                self.ready_at[nodes],
                np.minimum(pods, 1) if self.lazy else pods,
            )
        )
        order = np.lexsort((self._name_rank[nodes], *keys[::-1]))
        keys, ordered = keys[:, order], nodes[order]
        starts = [0, *(np.flatnonzero((keys[:, 1:] != keys[:, :-1]).any(axis=0)) + 1).tolist()]
        ends = [*starts[1:], ordered.size]
        return [(int(ordered[a]), ordered[a:b]) for a, b in zip(starts, ends, strict=True)]

    def _derive(self, node: int, members: IntArray, t: float) -> tuple[Derived, Action]:
        ready = bool(self.phase[node] == ON)
        pods = int(self.cluster.pod_count[node])
        derived = derive(
            self._facts(node, t, ready, pods, float(self.idle_since[node])), t, self.config
        )
        spell = derived.idle_since
        self.idle_since[members] = _NO_SPELL if spell is None else spell
        self.seen_pods[members] = self.cluster.pod_count[members]
        return derived, decide(derived, self.matrix)

    def _pass(self, t: float) -> None:
        """Derive and decide, then hand the candidates to ``admit``.

        Which nodes are derived: every node whose facts changed since it was last derived (its
        pod count, a boot), and of the idle nodes that keep an idle spell only the longest idle,
        up to the drains the concurrency limit leaves room for. An idle node's derivation keeps
        its spell, and ``admit`` takes the longest idle drains first, never more than that
        limit, and once it holds one drain back it holds back every later one: so its verdicts
        on the nodes it is shown are those it would give on all (a test holds this). With
        hundreds of idle nodes waiting their turn, this is what keeps a pass cheap. Without
        that shape of matrix (a busy or idle tuple calling for a shutdown) every node is
        derived each pass."""
        phase, pods = self.phase, self.cluster.pod_count
        on, booting = phase == ON, phase == BOOTING
        fresh = (on & (pods != self.seen_pods)) | booting if self.lazy else on | booting
        shutdowns: list[Candidate] = []
        drains: list[tuple[int, Derived]] = []
        pending = self.queue.waiting_requests() if len(self.queue) else []
        nodes = np.flatnonzero(fresh)
        for node, members in self._groups(nodes) if nodes.size else []:
            derived, action = self._derive(node, members, t)
            if action is Action.START_SHUTDOWN:
                shutdowns += [self._candidate(int(n), action, derived) for n in members]
            elif action is Action.START_DRAIN:
                drains += [(n, derived) for n in self._unneeded(members, pending)]
        room = self.settings.limits.drains_at_once(len(self.fleet)) - len(self.drains)
        kept = np.flatnonzero(on & ~fresh & (pods == 0) & (self.lazy and room > 0))
        found = 0
        last = math.inf
        for node, members in self._groups(kept) if kept.size else []:
            if found >= room and self.idle_since[node] > last:
                break  # every later group was idle for less
            derived, action = self._derive(node, members, t)
            if action is Action.START_DRAIN:
                # Up to ``room`` of each group: a later group idle as long may win on names.
                free = self._unneeded(members, pending)
                drains += [(n, derived) for n in free[:room]]
                found += min(room, len(free))
                last = float(self.idle_since[node])
        if drains and (room > 0 or not self.lazy):
            picked = np.array([n for n, _ in drains], dtype=np.intp)
            if self.lazy:
                order = np.lexsort((self._name_rank[picked], self.idle_since[picked]))
                picked = picked[order][:room]
            of = dict(drains)
            shutdowns += [self._candidate(n, Action.START_DRAIN, of[n]) for n in picked.tolist()]
        if shutdowns:
            self._admit(shutdowns, t)

    def _unneeded(self, members: IntArray, pending: list[Demand]) -> list[int]:
        """Of ``members`` (idle nodes the matrix would drain), those no pending pod could use:
        the live controller holds the others back before its limits see them."""
        nodes: list[int] = members.tolist()
        if not pending:
            return nodes
        return [n for n in nodes if not self._could_use(n, pending)]

    def _could_use(self, node: int, pending: list[Demand]) -> bool:
        """Whether a pending pod could use ``node`` (a performance pod only where the
        extender's rule lets it run), as the live controller asks it."""
        return fits_pending(
            int(self.cluster.free_cpu[node]),
            self._free_gpus(node),
            pending,
            keeps_performance_off=bool(self.scheduler.kept_off[node]),
        )

    def _candidate(self, node: int, action: Action, derived: Derived) -> Candidate:
        spell = float(self.idle_since[node])
        return Candidate(
            self.fleet.names[node],
            action,
            derived.tuple,
            derived.reason,
            None if spell == _NO_SPELL else spell,
        )

    def _admit(self, candidates: list[Candidate], t: float) -> None:
        fleet = FleetCounts(
            managed=int((self.phase != OFF).sum()),
            unready=int((self.phase == BOOTING).sum()),
            draining=len(self.drains),
            shutting_down=0,
        )
        for verdict in admit(candidates, fleet, self.settings.limits):
            if not verdict.admitted:
                continue
            node = self._index[verdict.candidate.name]
            if verdict.candidate.action is Action.START_SHUTDOWN:
                self._power_off(node, t)
            else:
                self.drains_started += 1
                self.phase[node] = DRAINING
                self._cordon(node, True)
                self.drains[node] = (t, t + self.config.drain_settle_s)

    # --- demand returning ---------------------------------------------------------------

    def provision(self, t: float) -> None:
        """Boot the off nodes the pending workloads need (``joulie.sim.provisioning``)."""
        self.passed = False
        off = np.flatnonzero(self.phase == OFF)
        if (off.size == 0 and not self.boots) or not len(self.queue):
            return
        chosen, plan = nodes_to_boot(
            off,
            np.flatnonzero(self.phase == BOOTING),
            np.flatnonzero(self.phase == DRAINING),
            self.queue,
            self.jobs,
            self.cluster,
            self.scheduler,
            self.idle_draw,
            now=t,
            max_concurrent_boots=self.settings.limits.boots_at_once(len(self.fleet)),
        )
        if plan is not None:
            self.boot_wait_pod_s += plan.served * self.settings.interval_s
            self.boots_held += sum(plan.held.values())
        for node in chosen:
            self._boot(node, t)
