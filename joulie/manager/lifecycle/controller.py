"""The node-lifecycle pass, as the leader's work.

Every LIFECYCLE_INTERVAL the leader looks at every managed node: it derives the node's state
tuple from the caches, asks the matrix for an action, and then

* continues what is in flight on the node (read back from the Node's annotations and taint, so
  a new leader picks up where the last one stopped): a drain settles, is re-checked with a live
  pod list and either cancelled (every change undone) or handed over to shutdown; an accepted
  shutdown is waited for, and asked for again after LIFECYCLE_SHUTDOWN_TIMEOUT;
* rolls back a taint or cordon of ours that no phase explains;
* gathers the nodes whose action is START_DRAIN or START_SHUTDOWN and lets the safety limits
  (``core.lifecycle_limits``) admit some of them.

Before a node is handed to the actuator, a live pod list (never the cache) must find no workload
pod on it. Nothing is done while a cache is stale. One node's failure is reported and the pass
goes on with the others; losing leadership ends the pass (the writer refuses to send).

In dry-run the pass decides and reports exactly as it would act, and writes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime

import structlog

from joulie.api import keys
from joulie.api.lifecycle import Action, Matrix, StateTuple
from joulie.core.lifecycle import (
    Derived,
    DrainStep,
    LifecycleConfig,
    derive,
    drain_step,
    fits_pending,
)
from joulie.core.lifecycle_limits import (
    Candidate,
    FleetCounts,
    Limits,
    admit,
    circuit_open,
    left_alone,
)
from joulie.kube.informer import Informer
from joulie.kube.projections import LeaseView, SlimNode
from joulie.kube.writes import NotPermitted
from joulie.manager.cache import ClusterCache
from joulie.manager.lifecycle import metrics
from joulie.manager.lifecycle.actuator import Actuator, Outcome, ShutdownRequest
from joulie.manager.lifecycle.facts import (
    InFlight,
    Phase,
    annotation_time,
    capacity,
    format_time,
    in_flight,
    node_facts,
    pending_demand,
)
from joulie.manager.lifecycle.node_edits import NodeEdits, NodeGone
from joulie.manager.lifecycle.report import Decision, Reporter

log = structlog.get_logger("joulie.lifecycle")

NODE_LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


class LifecycleController:
    def __init__(
        self,
        *,
        cache: ClusterCache,
        leases: Informer[LeaseView],
        eligible: Callable[[SlimNode], bool],
        matrix: Matrix,
        config: LifecycleConfig,
        limits: Limits,
        interval: float,
        stale_after: float,
        shutdown_timeout: float,
        backoff: tuple[float, float],
        edits: NodeEdits | None,
        actuator: Actuator | None,
        reporter: Reporter,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        """``edits`` and ``actuator`` None: dry-run (decide and report, write nothing)."""
        self._cache = cache
        self._leases = leases
        self._eligible = eligible
        self._matrix = matrix
        self._config = config
        self._limits = limits
        self._interval = interval
        self._stale_after = stale_after
        self._shutdown_timeout = shutdown_timeout
        self._backoff = backoff
        self._edits = edits
        self._actuator = actuator
        self._reporter = reporter
        self._wall_clock = wall_clock
        self._idle_since: dict[str, float] = {}
        """Dry-run only: idle spells kept in memory, since nothing is written."""
        self._wake = asyncio.Event()

    @property
    def dry_run(self) -> bool:
        return self._edits is None or self._actuator is None

    # --- the term -------------------------------------------------------------------------

    async def lead(self) -> None:
        """One leadership term: a pass every interval until cancelled."""
        self._reporter.new_term()
        await self._cache.wait_synced()
        await self._leases.wait_synced()
        while True:
            try:
                await self.run_pass()
            except NotPermitted:
                log.warning("leadership ended during a lifecycle pass")
                return
            except Exception as exc:  # the pass never stops for good
                log.exception("lifecycle pass failed", error=repr(exc))
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._interval)

    def poke(self) -> None:
        """Run the next pass now (tests, and a new node's first look)."""
        self._wake.set()

    def _stale(self) -> str | None:
        now = time.monotonic()
        for informer in (*self._cache.informers, self._leases):
            contact = informer.last_contact
            if contact is None or now - contact > self._stale_after:
                return informer.resource
        return None

    # --- one pass -------------------------------------------------------------------------

    async def run_pass(self) -> None:
        started = time.perf_counter()
        metrics.PASSES.inc()
        stale = self._stale()
        if stale is not None:
            metrics.SKIPPED_PASSES.inc()
            log.warning("lifecycle pass skipped: a cache is stale", resource=stale)
            return
        now = self._wall_clock().timestamp()
        nodes = [n for n in self._cache.nodes.values() if self._eligible(n)]
        flights = {n.name: in_flight(n) for n in nodes}
        off = sum(1 for f in flights.values() if f.phase is Phase.OFF)
        fleet = FleetCounts(
            managed=len(nodes) - off,
            unready=sum(1 for n in nodes if not n.ready and flights[n.name].phase is not Phase.OFF),
            draining=sum(1 for f in flights.values() if f.phase is Phase.DRAINING),
            shutting_down=sum(1 for f in flights.values() if f.phase is Phase.SHUTTING_DOWN),
        )
        halted = circuit_open(fleet, self._limits)
        metrics.CIRCUIT_OPEN.set(1 if halted else 0)
        for phase in (Phase.DRAINING, Phase.SHUTTING_DOWN, Phase.OFF):
            metrics.IN_FLIGHT.labels(phase.value).set(
                sum(1 for f in flights.values() if f.phase is phase)
            )
        pending = pending_demand(self._cache.pending_pods())
        tuples: Counter[tuple[StateTuple, Action]] = Counter()
        candidates: list[Candidate] = []
        derived_of: dict[str, tuple[Derived, Action]] = {}
        for node in nodes:
            derived = await self._derive(node, now)
            action = self._matrix.action(derived.tuple)
            derived_of[node.name] = (derived, action)
            tuples[(derived.tuple, action)] += 1
            flight = flights[node.name]
            if flight.phase is not Phase.NONE or flight.orphaned:
                continue
            if action is Action.NONE:
                await self._report(node, derived, action, "none", derived.reason, now)
                continue
            why = left_alone(
                node.annotations, node.labels, node.taints, node.deleting, flight.retry_after, now
            )
            if (
                why is None
                and action is Action.START_DRAIN
                and fits_pending(*capacity(node), pending)
            ):
                why = "pending pods could use the node"
            if why is not None:
                await self._report(node, derived, action, "held", why, now)
                continue
            candidates.append(
                Candidate(node.name, action, derived.tuple, derived.reason, derived.idle_since)
            )
        metrics.record_tuples(tuples)

        by_name = {n.name: n for n in nodes}
        for node in nodes:
            flight = flights[node.name]
            if flight.phase is Phase.NONE and not flight.orphaned:
                continue
            derived, action = derived_of[node.name]
            await self._isolated(
                node, self._continue(node, flight, derived, action, pending, halted, now)
            )
        for verdict in admit(candidates, fleet, self._limits):
            node = by_name[verdict.candidate.name]
            derived, action = derived_of[node.name]
            if not verdict.admitted:
                await self._report(node, derived, action, "held", verdict.reason, now)
            elif self.dry_run:
                await self._report(node, derived, action, "dry_run", derived.reason, now)
            else:
                await self._isolated(node, self._start(node, derived, action, now))
        self._reporter.forget(set(by_name))
        for name in [n for n in self._idle_since if n not in by_name]:
            del self._idle_since[name]
        metrics.PASS_SECONDS.observe(time.perf_counter() - started)

    async def _isolated(self, node: SlimNode, work: object) -> None:
        """One node's writes and actuator call; a failure is reported and the pass goes on."""
        assert asyncio.iscoroutine(work)
        try:
            await work
        except (NotPermitted, asyncio.CancelledError):
            raise
        except NodeGone:
            pass
        except Exception as exc:
            log.warning("lifecycle step failed for a node", node=node.name, error=repr(exc))

    async def _derive(self, node: SlimNode, now: float) -> Derived:
        """The node's tuple; the idle spell's start is kept in the node's annotation (in memory
        in dry-run), written only when it changes."""
        stored = self._stored_idle_since(node)
        derived = derive(
            node_facts(
                node,
                self._leases.get(f"kube-node-lease/{node.name}"),
                self._cache.workload_pods(node.name),
                stored,
            ),
            now,
            self._config,
        )
        if derived.idle_since != stored:
            if self._edits is None:
                if derived.idle_since is None:
                    self._idle_since.pop(node.name, None)
                else:
                    self._idle_since[node.name] = derived.idle_since
            else:
                value = None if derived.idle_since is None else format_time(derived.idle_since)
                try:
                    await self._edits.annotate(
                        node.name, {keys.IDLE_SINCE_ANNOTATION: value}, node.annotations
                    )
                except NotPermitted:
                    raise
                except Exception as exc:
                    log.warning("idle-since not recorded", node=node.name, error=repr(exc))
        return derived

    def _stored_idle_since(self, node: SlimNode) -> float | None:
        if self.dry_run:
            return self._idle_since.get(node.name)
        return annotation_time(node, keys.IDLE_SINCE_ANNOTATION)

    async def _report(
        self,
        node: SlimNode,
        derived: Derived,
        action: Action,
        outcome: str,
        detail: str,
        now: float,
    ) -> None:
        decision = Decision(derived.tuple, action, outcome, detail)
        try:
            await self._reporter.report(node, decision, self._cache.twins.get(node.name), now)
        except NotPermitted:
            raise
        except Exception as exc:
            log.warning("lifecycle condition not written", node=node.name, error=repr(exc))

    # --- starting -------------------------------------------------------------------------

    async def _start(self, node: SlimNode, derived: Derived, action: Action, now: float) -> None:
        assert self._edits is not None
        if action is Action.START_DRAIN:
            await self._edits.begin(node.name, Phase.DRAINING, now)
            await self._report(node, derived, action, "started", "drain started", now)
            return
        await self._edits.begin(node.name, Phase.SHUTTING_DOWN, now)
        await self._report(node, derived, action, "started", "shutdown started", now)
        await self._actuate(node, derived, action, now, since=now)

    # --- what is in flight ----------------------------------------------------------------

    async def _continue(
        self,
        node: SlimNode,
        flight: InFlight,
        derived: Derived,
        action: Action,
        pending: list[tuple[int, int]],
        halted: str | None,
        now: float,
    ) -> None:
        if self.dry_run:
            await self._report(
                node,
                derived,
                action,
                "dry_run",
                f"{flight.phase or 'orphaned taint'} in flight; left as it is",
                now,
            )
            return
        assert self._edits is not None
        if flight.orphaned:
            await self._edits.roll_back(node.name)
            await self._report(
                node,
                derived,
                action,
                "rolled_back",
                "a taint or cordon of ours without a phase",
                now,
            )
            return
        since = flight.since if flight.since is not None else now
        if flight.phase is Phase.DRAINING:
            live = await self._edits.live_workload_pods(node.name)
            nominated = [
                p.key
                for p in self._cache.workload_pods(node.name)
                if p.nominated_node == node.name and p.node_name != node.name
            ]
            step, why = drain_step(
                since,
                now,
                self._config,
                live_workload_pods=live + nominated,
                demand_fits=fits_pending(*capacity(node), pending),
                fresh_action=action,
            )
            if halted is not None and step is not DrainStep.CANCEL:
                step, why = DrainStep.CANCEL, halted
            if step is DrainStep.WAIT:
                await self._report(
                    node, derived, Action.START_DRAIN, "waiting", "drain settling", now
                )
            elif step is DrainStep.CANCEL:
                await self._edits.roll_back(node.name)
                await self._report(node, derived, Action.START_DRAIN, "cancelled", why, now)
            else:
                await self._edits.mark(node.name, Phase.SHUTTING_DOWN, now)
                await self._actuate(node, derived, Action.START_DRAIN, now, since=now)
            return
        if flight.phase is Phase.SHUTTING_DOWN:
            if not node.ready:
                await self._edits.mark(node.name, Phase.OFF, now)
                await self._report(node, derived, action, "off", "NotReady after its shutdown", now)
                return
            if now - since < self._shutdown_timeout:
                await self._report(
                    node, derived, action, "waiting", "shutdown requested, waiting for it", now
                )
                return
            if halted is not None:
                await self._report(node, derived, action, "held", halted, now)
                return
            await self._edits.mark(node.name, Phase.SHUTTING_DOWN, now)
            await self._actuate(node, derived, action, now, since=now)
            return
        if flight.phase is Phase.OFF and node.ready:
            # Powered on again by someone: it serves again, and its idle spell starts afresh.
            await self._edits.roll_back(node.name)
            await self._report(
                node, derived, action, "rolled_back", "Ready again after being powered off", now
            )

    async def _actuate(
        self, node: SlimNode, derived: Derived, action: Action, now: float, *, since: float
    ) -> None:
        """The last live check, then the actuator; a refusal or failure undoes the taint and the
        cordon and backs the node off."""
        assert self._edits is not None
        assert self._actuator is not None
        flight = in_flight(node)
        live = await self._edits.live_workload_pods(node.name)
        if live:
            await self._fail(
                node,
                derived,
                action,
                flight,
                now,
                "refused",
                f"workload pods on it: {', '.join(live[:3])}",
                None,
            )
            return
        request = ShutdownRequest(
            node=node.name,
            uid=node.uid,
            provider_id=node.provider_id,
            action=action,
            tuple=derived.tuple,
            reason=derived.reason,
            idempotency_key=f"{node.uid}/{format_time(since)}",
            annotations=node.annotations,
            labels=node.labels,
        )
        started = time.perf_counter()
        result = await self._actuator.shutdown(request)
        metrics.ACTUATOR_SECONDS.labels(self._actuator.name, result.outcome.value).observe(
            time.perf_counter() - started
        )
        if result.outcome is Outcome.FAILED:
            await self._fail(
                node, derived, action, flight, now, "failed", result.message, result.retry_after_s
            )
            return
        if result.outcome is Outcome.DONE:
            with contextlib.suppress(NodeGone):
                await self._edits.mark(node.name, Phase.OFF, now)
            if flight.failures:
                await self._clear_failures(node)
            await self._report(node, derived, action, "shut_down", result.message, now)
            return
        await self._report(node, derived, action, "accepted", result.message, now)

    async def _clear_failures(self, node: SlimNode) -> None:
        assert self._edits is not None
        with contextlib.suppress(NodeGone):
            await self._edits.annotate(
                node.name,
                {
                    keys.LIFECYCLE_FAILURES_ANNOTATION: None,
                    keys.LIFECYCLE_RETRY_AFTER_ANNOTATION: None,
                },
                node.annotations,
            )

    async def _fail(
        self,
        node: SlimNode,
        derived: Derived,
        action: Action,
        flight: InFlight,
        now: float,
        outcome: str,
        why: str,
        asked_wait: float | None,
    ) -> None:
        assert self._edits is not None
        failures = flight.failures + 1
        base, cap = self._backoff
        wait = min(cap, base * 2 ** (failures - 1))
        if asked_wait is not None:
            wait = max(wait, min(cap, asked_wait))
        await self._edits.roll_back(node.name, retry_after=now + wait, failures=failures)
        await self._report(node, derived, action, outcome, f"{why}; next try in {wait:.0f} s", now)
