"""Each step of a drain or a shutdown, from its start to the node being off (or back in
service): the part of the lifecycle that writes to Nodes and calls the actuator.

A drain is cancellable: it is undone (taint, cordon and phase removed, nothing else) when a
workload pod lands on the node, pending pods could use it, the node is no longer eligible, an
operator opts it out or the circuit breaker opens. Otherwise, once settled, it is handed over to
shutdown. A shutdown asks a live pod list first and refuses a node with workload pods; a refusal
or an actuator failure undoes the taint and cordon and backs the node off (the wait doubles with
each failure in a row, and honours a wait the far end asked for).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from joulie.api import keys
from joulie.api.lifecycle import Action
from joulie.core.lifecycle import (
    Demand,
    Derived,
    DrainStep,
    LifecycleConfig,
    drain_step,
)
from joulie.core.lifecycle_limits import backoff_s, left_alone
from joulie.kube.projections import SlimNode
from joulie.manager.cache import ClusterCache
from joulie.manager.lifecycle import metrics
from joulie.manager.lifecycle.actuator import Actuator, Outcome, ShutdownRequest
from joulie.manager.lifecycle.facts import (
    InFlight,
    Phase,
    format_time,
    in_flight,
    pending_could_use,
)
from joulie.manager.lifecycle.node_edits import NodeEdits, NodeGone

Say = Callable[[SlimNode, Derived, Action, str, str, float], Awaitable[None]]
"""Reports one node's decision: (node, derived, action, outcome, detail, now)."""


class Steps:
    def __init__(
        self,
        *,
        cache: ClusterCache,
        edits: NodeEdits,
        actuator: Actuator,
        config: LifecycleConfig,
        shutdown_timeout: float,
        backoff: tuple[float, float],
        say: Say,
    ) -> None:
        self._cache = cache
        self._edits = edits
        self._actuator = actuator
        self._config = config
        self._shutdown_timeout = shutdown_timeout
        self._backoff = backoff
        self._say = say
        self._alive_after = config.heartbeat_stale_s + config.not_ready_grace_s
        """A node still Ready this long after its power-off was not powered off."""

    # --- starting -------------------------------------------------------------------------

    async def start(self, node: SlimNode, derived: Derived, action: Action, now: float) -> None:
        if action is Action.START_DRAIN:
            await self._edits.begin(node.name, Phase.DRAINING, now)
            await self._say(node, derived, action, "started", "drain started", now)
            return
        await self._edits.begin(node.name, Phase.SHUTTING_DOWN, now)
        await self._say(node, derived, action, "started", "shutdown started", now)
        await self._actuate(node, derived, action, now, since=now)

    # --- what is in flight ----------------------------------------------------------------

    async def proceed(
        self,
        node: SlimNode,
        flight: InFlight,
        derived: Derived,
        action: Action,
        pending: list[Demand],
        halted: str | None,
        now: float,
    ) -> None:
        if flight.orphaned:
            await self._edits.roll_back(node.name)
            await self._say(
                node,
                derived,
                action,
                "rolled_back",
                "a taint or cordon of ours without a phase",
                now,
            )
            return
        since = flight.since if flight.since is not None else now
        opted_out = left_alone(node.annotations, node.labels, node.taints, node.deleting, None, now)
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
                demand_fits=pending_could_use(node, self._cache.twins.get(node.name), pending),
                fresh_action=action,
            )
            stop = halted or opted_out
            if stop is not None and step is not DrainStep.CANCEL:
                step, why = DrainStep.CANCEL, stop
            if step is DrainStep.WAIT:
                await self._say(node, derived, Action.START_DRAIN, "waiting", "drain settling", now)
            elif step is DrainStep.CANCEL:
                await self._edits.roll_back(node.name)
                await self._say(node, derived, Action.START_DRAIN, "cancelled", why, now)
            else:
                await self._edits.mark(node.name, Phase.SHUTTING_DOWN, now)
                await self._actuate(node, derived, Action.START_DRAIN, now, since=now)
            return
        if flight.phase is Phase.SHUTTING_DOWN:
            # NotReady since the request: the power went. (A node that was down before it is
            # not proof: it is asked again after the timeout.)
            if not node.ready and (node.ready_changed_at or 0.0) >= since:
                await self._edits.mark(node.name, Phase.OFF, now)
                await self._say(node, derived, action, "off", "NotReady after its shutdown", now)
                return
            if now - since < self._shutdown_timeout:
                await self._say(
                    node, derived, action, "waiting", "shutdown requested, waiting for it", now
                )
                return
            if halted or opted_out:
                await self._say(node, derived, action, "held", halted or opted_out or "", now)
                return
            await self._edits.mark(node.name, Phase.SHUTTING_DOWN, now, restamp=True)
            await self._actuate(node, derived, action, now, since=now)
            return
        if flight.phase is Phase.BOOTING:
            await self._booting(node, flight, derived, action, since, now)
            return
        if flight.phase is Phase.OFF and node.ready and now - since > self._alive_after:
            # Ready this long after its power-off: powered on again (or never off). It serves
            # again, and its idle spell starts afresh.
            await self._edits.roll_back(node.name)
            await self._say(
                node, derived, action, "rolled_back", "Ready again after being powered off", now
            )

    async def _booting(
        self,
        node: SlimNode,
        flight: InFlight,
        derived: Derived,
        action: Action,
        since: float,
        now: float,
    ) -> None:
        """A node powered on for pending work: in service once Ready; off again, cooling down,
        when it did not become Ready within its boot grace (cluster-autoscaler's
        max-node-provision-time, which backs the group off the same way)."""
        if node.ready:
            await self._edits.roll_back(node.name)
            if flight.failures:
                await self._clear_failures(node)
            metrics.BOOTS.labels(self._actuator.name, "registered").inc()
            await self._say(node, derived, action, "booted", "Ready after its power-on", now)
            return
        if now - since < self._config.boot_grace_s:
            await self._say(node, derived, action, "booting", "powering on", now)
            return
        failures = flight.failures + 1
        wait = backoff_s(failures, *self._backoff)
        await self._edits.cool_down(node.name, now, now + wait, failures)
        metrics.BOOTS.labels(self._actuator.name, "timed_out").inc()
        await self._say(
            node,
            derived,
            action,
            "boot_failed",
            f"not Ready {self._config.boot_grace_s:.0f} s after its power-on; next try in "
            f"{wait:.0f} s",
            now,
        )

    async def _actuate(
        self, node: SlimNode, derived: Derived, action: Action, now: float, *, since: float
    ) -> None:
        """The last live check, then the actuator; a refusal or failure undoes the taint and the
        cordon and backs the node off."""
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
            try:
                await self._edits.mark(node.name, Phase.OFF, now)
            except NodeGone:
                pass  # the actuator removed the Node itself (KWOK)
            else:
                if flight.failures:
                    await self._clear_failures(node)
            await self._say(node, derived, action, "shut_down", result.message, now)
            return
        await self._say(node, derived, action, "accepted", result.message, now)

    async def _clear_failures(self, node: SlimNode) -> None:
        await self._edits.annotate(
            node.name,
            {keys.LIFECYCLE_FAILURES_ANNOTATION: None, keys.LIFECYCLE_RETRY_AFTER_ANNOTATION: None},
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
        failures = flight.failures + 1
        wait = backoff_s(failures, *self._backoff, asked_wait)
        await self._edits.roll_back(node.name, retry_after=now + wait, failures=failures)
        await self._say(node, derived, action, outcome, f"{why}; next try in {wait:.0f} s", now)
