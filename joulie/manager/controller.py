"""The manager's reconcile loop, as the leader's work.

:meth:`Controller.lead` is what the leader elector runs for one term: it is started when this
process gains the Lease and cancelled, and awaited, when it loses the Lease or is told to stop,
before the Lease is released. So on SIGTERM (every rolling update) no write of this process can
land after its successor's first one; and every write is also checked against leadership, so a
renewal deadline that passes mid-reconcile stops the writes at once.

Within a term, one work queue carries two kinds of keys. ``reconcile`` plans every node, writes
what changed, cleans up twins and records metrics, every RECONCILE_INTERVAL and soon after any
trigger (at most once per TRIGGER_MIN_GAP); it does not stop at a node that fails. A node that
fails gets a key of its own, ``node/<name>``, retried with backoff capped at RECONCILE_INTERVAL
until it converges.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import structlog

from joulie.api.enums import SchedulableClass
from joulie.core.intents import spec_wire
from joulie.core.policies import Plan
from joulie.kube.projections import SlimNode
from joulie.kube.workqueue import WorkQueue, default_controller_rate_limiter, run_workers
from joulie.kube.writes import NotPermitted
from joulie.manager.cache import ClusterCache
from joulie.manager.cleanup import TwinCleanup
from joulie.manager.energy import EnergyAccountant
from joulie.manager.facility import FacilityPoller, FacilityReading
from joulie.manager.failures import NodeFailures
from joulie.manager.hardware_facts import HardwareFacts
from joulie.manager.metrics import LAST_RECONCILE, RECONCILE_SECONDS, RECONCILES, record_plan
from joulie.manager.node_writer import NodeWriter
from joulie.manager.planner import Planner
from joulie.manager.power import PowerReader, PowerReading
from joulie.manager.twin_status import TwinTracker

log = structlog.get_logger("joulie.manager")
_T = TypeVar("_T")

RECONCILE_KEY = "reconcile"
NODE_KEY_PREFIX = "node/"
TRIGGER_MIN_GAP = 1.0
"""Seconds from the start of one reconcile to the start of one that a change asks for. While pods
churn, every performance pod bound is a change, and a reconcile of thousands of nodes costs tens
of milliseconds of CPU: run back to back they took a core from kube-scheduler (bench.extender),
for plans that differed by the latest pods. A change now waits at most this long, and the changes
within one gap share one reconcile."""
WRITE_CONCURRENCY = 16
"""Nodes whose writes are in flight at once (the first reconcile of a large cluster writes three
objects per node)."""


@dataclass(frozen=True)
class PassInputs:
    """The cluster-wide inputs of the last reconcile, which a single node's retry reuses."""

    result: Plan
    reading: PowerReading
    facility: FacilityReading
    now: datetime


class Controller:
    def __init__(
        self,
        interval: float,
        cache: ClusterCache,
        planner: Planner,
        writer: NodeWriter,
        failures: NodeFailures,
        power: PowerReader,
        twin: TwinTracker,
        facility: FacilityPoller | None,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        energy: EnergyAccountant | None = None,
    ) -> None:
        self._interval = interval
        self._energy = energy
        if energy is not None:
            energy.follow_models(planner.on_model_change)
        self._wall_clock = wall_clock
        self._cache = cache
        self._planner = planner
        self._writer = writer
        self._failures = failures
        self._power = power
        self._twin = twin
        self._facility = facility
        self._cleanup = TwinCleanup(cache, writer, _drain_all)
        self._queue: WorkQueue[str] | None = None
        self._last: PassInputs | None = None
        self._last_started = -math.inf
        """time.monotonic() at the start of the last reconcile."""

    # --- the term ---------------------------------------------------------------------------

    async def lead(self) -> None:
        """One leadership term: reconcile until cancelled."""
        self._writer.new_term()
        self._failures.reset()
        self._last = None
        queue: WorkQueue[str] = WorkQueue(
            "joulie-manager",
            rate_limiter=default_controller_rate_limiter(max_delay_seconds=self._interval),
        )
        await self._cache.wait_synced()
        self._queue = queue
        queue.add(RECONCILE_KEY)
        try:
            await run_workers(queue, self._handle, 1, asyncio.Event())
        finally:
            self._queue = None
            queue.shutdown()
            # Cancelled (the term ends): writes already sent still land, so the term is over
            # only once they are answered; then the elector may hand the Lease on.
            await self._writer.settle()

    def trigger(self) -> None:
        """Something a decision reads has changed: reconcile soon, TRIGGER_MIN_GAP after the
        last one started at the earliest (a no-op while following)."""
        if self._queue is None:
            return
        wait = self._last_started + TRIGGER_MIN_GAP - time.monotonic()
        if wait > 0:
            self._queue.add_after(RECONCILE_KEY, wait)
        else:
            self._queue.add(RECONCILE_KEY)

    async def _handle(self, key: str) -> None:
        try:
            if key == RECONCILE_KEY:
                try:
                    await self.reconcile()
                finally:
                    # The periodic reconcile never stops; a failed one comes back sooner,
                    # through the queue's backoff (the earlier deadline wins).
                    if self._queue is not None:
                        self._queue.add_after(key, self._interval)
            else:
                await self._retry(key.removeprefix(NODE_KEY_PREFIX))
        except NotPermitted:
            # Leadership ended (a renew deadline passed, or the elector is stopping us): nothing
            # more is sent in this term, so the term's work ends here.
            log.warning("leadership ended during a reconcile; its remaining writes not sent")
            if self._queue is not None:
                self._queue.shutdown()

    # --- one reconcile ----------------------------------------------------------------------

    async def reconcile(self) -> None:
        self._last_started = time.monotonic()
        started = time.perf_counter()
        RECONCILES.inc()
        planned = self._planner.planned()
        names = [n.name for n in planned.nodes]
        reading = await self._power.reading(names)
        if self._energy is not None:
            # Leader only, as all of this: who used the energy of the intervals this reading
            # closes (joulie.manager.energy).
            await self._energy.record(reading)
        facility = self._facility.latest if self._facility is not None else FacilityReading()
        inputs = PassInputs(planned.result, reading, facility, self._wall_clock())
        self._last = inputs
        writes_before = self._writer.writes
        performing: set[str] = set()
        transitions = {"deferred": 0, "applied": 0}

        def jobs() -> Iterator[Awaitable[str | None]]:
            for node in planned.nodes:
                job = self._node_job(node, planned.hardware[node.name], inputs, performing)
                if job is not None:
                    yield self._isolated(node, job)

        for event in await run_bounded(jobs(), WRITE_CONCURRENCY):
            if event is not None:
                transitions[event] += 1
        planned_names = set(names)
        self._twin.forget(names)
        self._failures.forget(planned_names)
        await self._cleanup.retire_unplanned(planned_names)
        deleted = await self._cleanup.delete_orphans()
        existing = set(self._cache.nodes.keys())
        self._planner.forget(existing)
        self._writer.retain(existing)
        record_plan(planned.plan_nodes, planned.result, planned.perf_pods, frozenset(performing))
        RECONCILE_SECONDS.observe(time.perf_counter() - started)
        LAST_RECONCILE.set_to_current_time()
        log.info(
            "reconciled",
            policy=planned.result.policy_name,
            nodes=len(names),
            hp_count=planned.result.hp_count,
            performance=len(performing),
            # Named for what they count: a bare "applied: 0" beside "writes: 123" read as
            # "nothing of the 123 writes took effect". These count profile moves of nodes
            # (deferred: a move to eco waiting for performance pods, as draining); api_writes
            # counts the requests sent to the API server in this reconcile.
            profile_changes_deferred=transitions["deferred"],
            profile_changes_applied=transitions["applied"],
            performance_pods=planned.perf_pods,
            api_writes=self._writer.writes - writes_before,
            deleted_twins=deleted,
            failing_nodes=len(self._failures),
            seconds=round(time.perf_counter() - started, 4),
        )

    def _node_job(
        self,
        node: SlimNode,
        facts: HardwareFacts | None,
        inputs: PassInputs,
        performing: set[str] | None = None,
    ) -> Awaitable[str | None] | None:
        """The write of one node, or None when everything stored is known to match."""
        memo = self._planner.current(node, facts)
        intent = self._planner.intent(memo, inputs.result)
        if performing is not None and intent.schedulable_class is SchedulableClass.PERFORMANCE:
            performing.add(node.name)
        twin = self._cache.twins.get(node.name)
        fields = self._twin.status(
            node.name,
            intent.spec,
            intent.schedulable_class,
            self._planner.twin_hardware(memo),
            inputs.reading.nodes[node.name],
            inputs.reading.at,
            inputs.facility,
            node.labels,
            twin.stored_status if twin is not None else {},
        )
        reporting = self._writer.reporting(facts, inputs.now)
        if self._writer.verified(memo, twin, node, intent, fields, reporting):
            return None
        # Built only when something may need writing; kept per node, it cost 10 MiB at 5,000.
        spec = spec_wire(intent, node.name)
        return self._writer.write(memo, node, intent, spec, twin, fields, reporting, inputs.now)

    async def _isolated(self, node: SlimNode, job: Awaitable[_T]) -> _T | None:
        """Run one node's writes; a failure is recorded and retried alone, not raised (except
        lost leadership, which ends the whole pass)."""
        try:
            result = await job
        except (NotPermitted, asyncio.CancelledError):
            raise
        except Exception as exc:
            await self._failures.failed(node, exc)
            if self._queue is not None:
                self._queue.add_rate_limited(NODE_KEY_PREFIX + node.name)
            return None
        self._failures.succeeded(node.name)
        return result

    async def _retry(self, name: str) -> None:
        """Retry one failing node with the last reconcile's cluster-wide inputs."""
        queue, inputs, node = self._queue, self._last, self._cache.nodes.get(name)
        if (
            name not in self._failures
            or inputs is None
            or node is None
            or name not in inputs.result.profiles
            or not self._planner.eligible(node)
        ):
            # Converged meanwhile, or no longer planned: the next reconcile decides.
            if queue is not None:
                queue.forget(NODE_KEY_PREFIX + name)
            return
        job = self._node_job(node, self._cache.hardware_of(name), inputs)
        if job is not None:
            await self._isolated(node, job)
        else:
            self._failures.succeeded(name)
        if name not in self._failures and queue is not None:
            queue.forget(NODE_KEY_PREFIX + name)


async def run_bounded(jobs: Iterator[Awaitable[_T]], concurrency: int) -> list[_T]:
    """Await ``jobs`` with at most ``concurrency`` in flight, taking the next one only when a slot
    is free. A job that needs no I/O finishes without yielding, so a reconcile with nothing to
    write costs no more than a plain loop; one that writes thousands of nodes overlaps them."""
    results: list[_T] = []

    async def worker() -> None:
        for job in jobs:  # one shared iterator: each job is taken by exactly one worker
            results.append(await job)

    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(concurrency):
                group.create_task(worker())
    except BaseExceptionGroup as errors:
        # Jobs isolate their own failures; what escapes is lost leadership (with, maybe, the
        # cancellation that goes with it), which ends the pass as one NotPermitted. A task group
        # would report it as a group, and would swallow the cancellation while doing so.
        lost, other = errors.split((NotPermitted, asyncio.CancelledError))
        if other is None and lost is not None and lost.subgroup(NotPermitted) is not None:
            raise NotPermitted("leadership ended during the writes") from None
        raise
    return results


async def _drain_all(jobs: Iterator[Awaitable[Any]]) -> list[Any]:
    return await run_bounded(jobs, WRITE_CONCURRENCY)
