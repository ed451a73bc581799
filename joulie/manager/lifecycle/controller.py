"""The node-lifecycle pass, as the leader's work.

Every LIFECYCLE_INTERVAL the leader looks at every managed node: it derives the node's state
tuple from the caches, asks the matrix for an action, and then

* continues what is in flight on the node (read back from the Node's annotations and taint, so
  a new leader picks up where the last one stopped): a drain settles, is re-checked with a live
  pod list and either cancelled (every change undone) or handed over to shutdown; an accepted
  shutdown is waited for, and asked for again after LIFECYCLE_SHUTDOWN_TIMEOUT;
* rolls back a taint or cordon of ours that no phase explains;
* gathers the nodes whose action is START_DRAIN or START_SHUTDOWN and lets the safety limits
  (``core.lifecycle_limits``) admit some of them;
* powers nodes on for the pods no serving node can take (``boots``), and follows each boot
  until the node is Ready or its boot grace has passed.

Before a node is handed to the actuator, a live pod list (never the cache) must find no workload
pod on it. Nothing is done while a cache is stale. One node's failure is reported and the pass
goes on with the others; losing leadership ends the pass (the writer refuses to send).

In dry-run the pass decides and reports exactly as it would act, and writes nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from functools import partial

import structlog

from joulie.api import keys
from joulie.api.lifecycle import Action, Matrix, StateTuple
from joulie.core.lifecycle import (
    Derived,
    LifecycleConfig,
    derive,
)
from joulie.core.lifecycle_limits import (
    Candidate,
    FleetCounts,
    Limits,
    admit,
    circuit_open,
    left_alone,
)
from joulie.kube.events import EventRecorder
from joulie.kube.informer import Informer
from joulie.kube.projections import LeaseView, SlimNode
from joulie.kube.writes import NotPermitted
from joulie.manager.cache import ClusterCache
from joulie.manager.controller import WRITE_CONCURRENCY, run_bounded
from joulie.manager.lifecycle import metrics
from joulie.manager.lifecycle.actuator import Actuator
from joulie.manager.lifecycle.boots import Boots
from joulie.manager.lifecycle.facts import (
    Phase,
    annotation_time,
    format_time,
    in_flight,
    node_facts,
    pending_could_use,
    pending_demand,
)
from joulie.manager.lifecycle.isolation import one_node
from joulie.manager.lifecycle.node_edits import NodeEdits
from joulie.manager.lifecycle.report import Decision, Reporter
from joulie.manager.lifecycle.steps import Steps

log = structlog.get_logger("joulie.lifecycle")

Job = Callable[[], Awaitable[None]]
"""One node's work, started only when a slot is free (and never, if the pass ends first)."""

NODE_LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
_OUT_OF_SERVICE = (Phase.OFF, Phase.BOOTING)


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
        events: EventRecorder | None = None,
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
        self._steps = (
            Steps(
                cache=cache,
                edits=edits,
                actuator=actuator,
                config=config,
                shutdown_timeout=shutdown_timeout,
                backoff=backoff,
                say=self._report,
            )
            if edits is not None and actuator is not None
            else None
        )
        self._boots = (
            Boots(
                cache=cache,
                actuator=actuator,
                edits=edits,
                limits=limits,
                backoff=backoff,
                events=events,
                say=self._say_boot,
            )
            if edits is not None and actuator is not None and events is not None
            else None
        )
        self._derived: dict[str, tuple[Derived, Action]] = {}
        """This pass's derivations (what a boot's report on its node shows)."""
        self._idle_since: dict[str, float] = {}
        """Dry-run only: idle spells kept in memory, since nothing is written."""

    @property
    def dry_run(self) -> bool:
        return self._steps is None

    # --- the term -------------------------------------------------------------------------

    async def lead(self) -> None:
        """One leadership term: a pass every interval until cancelled."""
        self._reporter.new_term()
        if self._boots is not None:
            self._boots.new_term()
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
            await asyncio.sleep(self._interval)

    async def close(self) -> None:
        """Release the actuator's connections (the process is stopping)."""
        if self._actuator is not None:
            await self._actuator.close()

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
        # Nodes off or powering on serve nothing and are NotReady by design: neither managed
        # nor counted by the circuit breaker.
        out = sum(1 for f in flights.values() if f.phase in _OUT_OF_SERVICE)
        fleet = FleetCounts(
            managed=len(nodes) - out,
            unready=sum(
                1 for n in nodes if not n.ready and flights[n.name].phase not in _OUT_OF_SERVICE
            ),
            draining=sum(1 for f in flights.values() if f.phase is Phase.DRAINING),
            shutting_down=sum(1 for f in flights.values() if f.phase is Phase.SHUTTING_DOWN),
        )
        halted = circuit_open(fleet, self._limits)
        metrics.CIRCUIT_OPEN.set(1 if halted else 0)
        for phase in (Phase.DRAINING, Phase.SHUTTING_DOWN, Phase.OFF, Phase.BOOTING):
            metrics.IN_FLIGHT.labels(phase.value).set(
                sum(1 for f in flights.values() if f.phase is phase)
            )
        pending = pending_demand(self._cache.pending_pods())
        tuples: Counter[tuple[StateTuple, Action]] = Counter()
        candidates: list[Candidate] = []
        derived_of: dict[str, tuple[Derived, Action]] = {}
        quiet: list[Job] = []
        """Writes of nodes with nothing in flight (idle spells, reports), sent side by side."""
        for node in nodes:
            derived, record = self._derive(node, now)
            if record is not None:
                quiet.append(record)
            action = self._matrix.action(derived.tuple)
            derived_of[node.name] = (derived, action)
            tuples[(derived.tuple, action)] += 1
            flight = flights[node.name]
            if flight.phase is not Phase.NONE or flight.orphaned:
                continue
            if action is Action.NONE:
                quiet.append(
                    partial(self._report, node, derived, action, "none", derived.reason, now)
                )
                continue
            why = left_alone(
                node.annotations, node.labels, node.taints, node.deleting, flight.retry_after, now
            )
            if (
                why is None
                and action is Action.START_DRAIN
                and pending_could_use(node, self._cache.twins.get(node.name), pending)
            ):
                why = "pending pods could use the node"
            if why is not None:
                quiet.append(partial(self._report, node, derived, action, "held", why, now))
                continue
            candidates.append(
                Candidate(node.name, action, derived.tuple, derived.reason, derived.idle_since)
            )
        await run_bounded((job() for job in quiet), WRITE_CONCURRENCY)
        metrics.record_tuples(tuples)

        by_name = {n.name: n for n in nodes}
        # Each node's steps touch only that node, so they run side by side: a slow actuator
        # (a webhook retrying) does not hold up another node's drain being cancelled.
        steps: list[Job] = []
        for node in nodes:
            flight = flights[node.name]
            if flight.phase is Phase.NONE and not flight.orphaned:
                continue
            derived, action = derived_of[node.name]
            if self._steps is None:
                what = flight.phase.value or "a taint of ours"
                detail = f"{what}: left as it is"
                steps.append(partial(self._report, node, derived, action, "dry_run", detail, now))
                continue
            work = partial(self._steps.proceed, node, flight, derived, action, pending, halted, now)
            steps.append(partial(self._isolated, node, derived, action, now, work))
        for verdict in admit(candidates, fleet, self._limits):
            node = by_name[verdict.candidate.name]
            derived, action = derived_of[node.name]
            if not verdict.admitted:
                steps.append(
                    partial(self._report, node, derived, action, "held", verdict.reason, now)
                )
            elif self._steps is None:
                steps.append(
                    partial(self._report, node, derived, action, "dry_run", derived.reason, now)
                )
            else:
                work = partial(self._steps.start, node, derived, action, now)
                steps.append(partial(self._isolated, node, derived, action, now, work))
        await run_bounded((job() for job in steps), WRITE_CONCURRENCY)
        if self._boots is not None:
            self._derived = derived_of
            try:
                await self._boots.run(nodes, flights, now)
            except (NotPermitted, asyncio.CancelledError):
                raise
            except Exception as exc:  # the rest of the pass is done; the next one tries again
                metrics.NODE_ERRORS.inc()
                log.warning("powering nodes on failed", error=repr(exc))
        self._reporter.forget(set(by_name))
        for name in [n for n in self._idle_since if n not in by_name]:
            del self._idle_since[name]
        metrics.PASS_SECONDS.observe(time.perf_counter() - started)

    async def _say_boot(self, node: SlimNode, outcome: str, detail: str, now: float) -> None:
        derived, action = self._derived[node.name]
        await self._report(node, derived, action, outcome, detail, now)

    async def _isolated(
        self,
        node: SlimNode,
        derived: Derived,
        action: Action,
        now: float,
        work: Job,
    ) -> None:
        """One node's writes and actuator call. A failure (a refused patch, a timeout) is
        logged, counted and reported as an Event once; the next pass tries that node again, and
        the other nodes go on now."""
        exc = await one_node(work, node.name, "lifecycle step")
        if exc is not None:
            detail = f"{type(exc).__name__}: {str(exc)[:200]}"
            await self._report(node, derived, action, "failed", detail, now)

    def _derive(self, node: SlimNode, now: float) -> tuple[Derived, Job | None]:
        """The node's tuple, and the write that keeps its idle spell's start when that changed
        (in the node's annotation; in memory in dry-run, at once)."""
        stored = self._stored_idle_since(node)
        derived = derive(
            node_facts(
                node,
                self._leases.get(f"kube-node-lease/{node.name}"),
                self._cache.workload_count(node.name),
                stored,
            ),
            now,
            self._config,
        )
        if derived.idle_since == stored:
            return derived, None
        if self._edits is None or self._steps is None:
            if derived.idle_since is None:
                self._idle_since.pop(node.name, None)
            else:
                self._idle_since[node.name] = derived.idle_since
            return derived, None
        return derived, partial(self._record_idle_since, self._edits, node, derived.idle_since)

    async def _record_idle_since(
        self, edits: NodeEdits, node: SlimNode, since: float | None
    ) -> None:
        value = None if since is None else format_time(since)
        try:
            await edits.annotate(node.name, {keys.IDLE_SINCE_ANNOTATION: value}, node.annotations)
        except NotPermitted:
            raise
        except Exception as exc:
            log.warning("idle-since not recorded", node=node.name, error=repr(exc))

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
