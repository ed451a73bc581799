"""Powering nodes on for the work that waits: the leader's part of each lifecycle pass that asks
the actuator what could be powered on, lets the shared decision (``core.lifecycle_boot``)
choose, and asks for the boots.

What waits: pods a scheduler tried and could not place (PodScheduled False, reason
Unschedulable: what cluster-autoscaler scales up for), not being deleted, and not nominated to a
node (preemption is making room for them there). Of these, a pod that fits the free room of a
serving node is left to the scheduler (it will retry), one that fits a node draining cancels
that drain, and one that fits a node booting waits for it.

Nothing about a boot is kept in memory: the actuator reads what it has in flight from objects
(a Node's phase annotations, a record, a MachineDeployment's replicas), so a manager restarted
mid-boot counts the boot as coming and does not boot again. A registered Node is marked
``booting`` before the actuator is asked (a crash in between leaves a booting node that never
came up, which its boot grace catches, rather than a second power-on).

Reports: an Event on each waiting pod whose fate changed (a boot was triggered for it, it is
held and why, no node group could take it: cluster-autoscaler's TriggeredScaleUp and
NotTriggerScaleUp), the node's own Events and NodeLifecycle condition for a node powered on,
and metrics.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial

import structlog

from joulie.api import keys
from joulie.core.lifecycle_boot import (
    FITS_SERVING,
    ON_COMING_ROOM,
    UNFITTABLE,
    BootGroup,
    BootPlan,
    Room,
    plan_boots,
)
from joulie.core.lifecycle_limits import Limits, backoff_s
from joulie.core.scoring import filter_reason
from joulie.kube.events import NORMAL, WARNING, EventRecorder, ObjectRef
from joulie.kube.ownership import OwnedObject
from joulie.kube.projections import SlimNode, SlimPod
from joulie.kube.writes import NotPermitted
from joulie.manager.cache import ClusterCache
from joulie.manager.controller import WRITE_CONCURRENCY, run_bounded
from joulie.manager.lifecycle import metrics
from joulie.manager.lifecycle.actuator import (
    Actuator,
    BootOffer,
    Outcome,
    PowerOnRequest,
)
from joulie.manager.lifecycle.facts import (
    InFlight,
    Phase,
    format_time,
    free_room,
    keeps_performance_off,
    pending_demand,
    room,
)
from joulie.manager.lifecycle.isolation import one_node
from joulie.manager.lifecycle.node_edits import NodeEdits

log = structlog.get_logger("joulie.lifecycle")

Said = Callable[[SlimNode, str, str, float], Awaitable[None]]
"""Reports a node's boot on the node itself: (node, outcome, detail, now)."""

_FATES_KEPT = 10_000
"""Pods whose last reported fate is remembered (so an unchanged fate sends no Event); past this
many waiting pods the rest are reported through the metrics only."""


def waiting_pods(pods: Sequence[SlimPod]) -> list[SlimPod]:
    """The pending pods a boot may be for."""
    return [p for p in pods if p.unschedulable and not p.deleting and not p.nominated_node]


def _group(offer: BootOffer) -> BootGroup:
    performance_off = filter_reason(True, None, offer.labels.get(keys.POWER_PROFILE_LABEL))
    return BootGroup(
        offer.group,
        room(offer.allocatable, performance_off is not None),
        offer.can_boot if not offer.problem else 0,
        offer.booting,
        0.0,  # idle draws are not modelled per node live: the smallest node that fits wins
        offer.cooling_until,
    )


def plan_for(
    waiting: Sequence[SlimPod],
    nodes: Sequence[SlimNode],
    flights: Mapping[str, InFlight],
    offers: Sequence[BootOffer],
    twin_of: Callable[[str], OwnedObject | None],
    bound: Mapping[str, Sequence[SlimPod]],
    limits: Limits,
    now: float,
) -> BootPlan:
    """The boot decision from the live facts: the waiting pods, the managed nodes (serving ones
    offer their free room, draining ones their whole room), what the actuator offers, the pods
    bound to each node. What the simulator decides from its own facts
    (``joulie.sim.provisioning``), by the same ``plan_boots``."""
    serving: list[Room] = []
    coming: list[Room] = []
    for node in nodes:
        phase = flights[node.name].phase
        twin = twin_of(node.name)
        if phase is Phase.DRAINING:
            coming.append(room(node.allocatable, keeps_performance_off(node, twin)))
        elif phase is Phase.NONE and node.ready and not node.unschedulable:
            serving.append(free_room(node, twin, bound.get(node.name, ())))
    # Every node the lifecycle knows: those registered, and those a group could still make.
    known = len(nodes) + sum(o.can_boot for o in offers if not o.nodes)
    known += sum(len(o.nodes) for o in offers if not any(n in flights for n in o.nodes))
    return plan_boots(
        pending_demand(list(waiting)),
        [_group(o) for o in offers],
        now=now,
        serving=serving,
        coming=coming,
        max_concurrent_boots=limits.boots_at_once(known),
    )


class Boots:
    def __init__(
        self,
        *,
        cache: ClusterCache,
        actuator: Actuator,
        edits: NodeEdits,
        limits: Limits,
        backoff: tuple[float, float],
        events: EventRecorder,
        say: Said,
    ) -> None:
        self._cache = cache
        self._actuator = actuator
        self._edits = edits
        self._limits = limits
        self._backoff = backoff
        self._events = events
        self._say = say
        self._fates: dict[str, str] = {}
        self._problems: dict[str, str] = {}
        self._cooling: dict[str, tuple[float, int]] = {}
        """Failed power-ons of what has no Node to carry the backoff (a record, a node group):
        name -> (no retry before, failures in a row). In memory: a restart tries once more."""

    def new_term(self) -> None:
        self._fates.clear()
        self._problems.clear()

    async def run(
        self, nodes: Sequence[SlimNode], flights: Mapping[str, InFlight], now: float
    ) -> BootPlan | None:
        """One pass: the plan (None when nothing waits) after its boots were asked for."""
        waiting = waiting_pods(self._cache.pending_pods())
        if not waiting:
            self._fates.clear()
            metrics.record_unserved({})
            return None
        # A backoff long over is forgotten: what is kept is bounded by what failed lately.
        self._cooling = {k: v for k, v in self._cooling.items() if v[0] + self._backoff[1] > now}
        offers = [self._cooled(o, now) for o in await self._actuator.bootable(nodes, now)]
        self._report_problems(offers)
        plan = plan_for(
            waiting,
            nodes,
            flights,
            offers,
            self._cache.twins.get,
            self._bound_pods(),
            self._limits,
            now,
        )
        metrics.record_unserved(
            {
                "fits_serving": plan.left_to_scheduler,
                "waits_for_boot": plan.served,
                "held": sum(plan.held.values()),
                "unfittable": plan.unfittable,
            }
        )
        await self._report_fates(waiting, plan)
        by_group = {o.group: o for o in offers}
        by_name = {n.name: n for n in nodes}
        jobs: list[Callable[[], Awaitable[None]]] = []
        for group, count in plan.boots.items():
            pods = sum(1 for fate in plan.fates if fate == group)
            jobs += self._power_ons(by_group[group], count, pods, by_name, flights, now)
        # Side by side, as the drains' steps: a webhook retrying one node's power-on does not
        # hold up the others.
        await run_bounded((job() for job in jobs), WRITE_CONCURRENCY)
        return plan

    def _cooled(self, offer: BootOffer, now: float) -> BootOffer:
        """``offer`` less what is backing off after a failed power-on."""
        waits = {k: until for k, (until, _) in self._cooling.items() if until > now}
        if offer.nodes:
            kept = tuple(n for n in offer.nodes if n not in waits)
            if len(kept) == len(offer.nodes):
                return offer
            cooling = offer.cooling_until
            if not kept:
                cooling = min(waits[n] for n in offer.nodes)
            return replace(offer, nodes=kept, can_boot=len(kept), cooling_until=cooling)
        until = waits.get(offer.group)
        if until is None:
            return offer
        return replace(offer, cooling_until=max(until, offer.cooling_until or 0.0))

    def _bound_pods(self) -> dict[str, list[SlimPod]]:
        """Each node's pods that hold room (bound, not finished), DaemonSet pods included."""
        bound: dict[str, list[SlimPod]] = {}
        for pod in self._cache.pods.values():
            if pod.node_name and pod.phase not in ("Succeeded", "Failed"):
                bound.setdefault(pod.node_name, []).append(pod)
        return bound

    def _power_ons(
        self,
        offer: BootOffer,
        count: int,
        pods: int,
        nodes: Mapping[str, SlimNode],
        flights: Mapping[str, InFlight],
        now: float,
    ) -> list[Callable[[], Awaitable[None]]]:
        reason = f"{pods} pending pods no serving node can take"
        if not offer.nodes:
            key = f"{offer.group}/{format_time(now)}"
            request = PowerOnRequest(offer.group, "", count, reason, key)
            return [partial(self._ask, request, None, None, now)]
        jobs: list[Callable[[], Awaitable[None]]] = []
        for name in offer.nodes[:count]:
            node = nodes.get(name)
            flight = flights.get(name)
            since = flight.since if flight is not None and flight.since is not None else now
            request = PowerOnRequest(
                offer.group,
                name,
                1,
                reason,
                f"{node.uid if node is not None else name}/{format_time(since)}/on",
                uid=node.uid if node is not None else "",
                provider_id=node.provider_id if node is not None else "",
                annotations=node.annotations if node is not None else {},
                labels=node.labels if node is not None else {},
            )
            jobs.append(partial(self._power_on, request, node, flight, now))
        return jobs

    async def _power_on(
        self, request: PowerOnRequest, node: SlimNode | None, flight: InFlight | None, now: float
    ) -> None:
        """One node's power-on; a failure of its writes is logged and counted, and the next pass
        tries again (the other nodes go on now)."""

        async def work() -> None:
            if node is not None:
                # On the object before the power-on: a crash in between is a boot that never
                # registers (its grace catches it), never a second power-on.
                await self._edits.mark(node.name, Phase.BOOTING, now)
            await self._ask(request, node, flight, now)

        await one_node(work, request.node or request.group, "power-on step")

    async def _ask(
        self,
        request: PowerOnRequest,
        node: SlimNode | None,
        flight: InFlight | None,
        now: float,
    ) -> None:
        started = time.perf_counter()
        try:
            result = await self._actuator.power_on(request)
        except NotPermitted:
            raise
        metrics.ACTUATOR_SECONDS.labels(self._actuator.name, result.outcome.value).observe(
            time.perf_counter() - started
        )
        what = request.node or f"{request.count} nodes of {request.group}"
        unregistered = request.node or request.group
        if result.outcome is Outcome.FAILED:
            metrics.BOOTS.labels(self._actuator.name, "failed").inc(request.count)
            log.warning("power-on failed", target=what, error=result.message)
            if node is None:
                failures = self._cooling.get(unregistered, (0.0, 0))[1] + 1
                wait = backoff_s(failures, *self._backoff, result.retry_after_s)
                self._cooling[unregistered] = (now + wait, failures)
            if node is not None:
                failures = (flight.failures if flight is not None else 0) + 1
                wait = backoff_s(failures, *self._backoff, result.retry_after_s)
                await self._edits.cool_down(node.name, now, now + wait, failures)
                await self._say(
                    node, "boot_failed", f"{result.message}; next try in {wait:.0f} s", now
                )
            return
        self._cooling.pop(unregistered, None)
        metrics.BOOTS.labels(self._actuator.name, "requested").inc(request.count)
        log.info("power-on requested", target=what, reason=request.reason, answer=result.message)
        if node is not None:
            await self._say(node, "booting", f"{request.reason}: {result.message}", now)

    def _report_problems(self, offers: Sequence[BootOffer]) -> None:
        for offer in offers:
            if offer.problem and self._problems.get(offer.group) != offer.problem:
                log.warning("node group cannot be powered on", group=offer.group, why=offer.problem)
            if offer.problem:
                self._problems[offer.group] = offer.problem
            else:
                self._problems.pop(offer.group, None)

    async def _report_fates(self, waiting: Sequence[SlimPod], plan: BootPlan) -> None:
        current: dict[str, str] = {}
        for pod, fate in zip(waiting, plan.fates, strict=True):
            if len(current) >= _FATES_KEPT:
                break
            current[pod.key] = fate
            if self._fates.get(pod.key) == fate or fate in (FITS_SERVING, ON_COMING_ROOM):
                continue
            if fate in plan.boots:
                kind, reason, note = NORMAL, "LifecycleBootTriggered", f"powering on {fate}"
            elif fate == UNFITTABLE:
                kind, reason, note = WARNING, "LifecycleNoBoot", fate
            else:
                kind, reason, note = NORMAL, "LifecycleBootHeld", fate
            await self._events.emit(
                ObjectRef(kind="Pod", name=pod.name, namespace=pod.namespace),
                kind,
                reason,
                "PowerOn",
                note,
            )
        self._fates = current
