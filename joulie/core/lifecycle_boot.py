"""Which powered-off nodes to power on for the work that waits: the decision the live lifecycle
and the simulator share. Nothing here reads a clock or the cluster; ``now`` is an argument.

The input is the pods that no serving node can take (the caller's finding: kube-scheduler
marked them Unschedulable and none fits the free room of a serving node; in the simulator, what
its scheduling pass left waiting), in the order they would be served. Each pod is packed, first
fit, onto the room already coming back (nodes draining, whose drain a fitting pod cancels;
nodes booting), then onto the nodes chosen earlier in the same plan. Only a pod that fits none
of these chooses a new node: from the groups whose node would take it, the one with the lowest
idle draw (unknown draws are 0), then the smallest node (cluster-autoscaler's ``least-waste``
expander, its default since 1.33, prefers the group that leaves the least unused), then the
group's place in the list. So a burst boots what it needs, and a CPU pod does not wake a GPU
server.

Never a boot for a pod no group's node could ever take (too big, a GPU kind no group has, a
performance pod where every group's node keeps it off): it is counted ``unfittable``. A pod that
some group could take but that cannot be served now is ``held``, with the reason: every such
group is at its maximum (or has no node off), cooling down after a boot that did not register
within its boot grace, or the boots in flight are at the concurrency limit.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from joulie.core.lifecycle import Demand

__all__ = [
    "FITS_SERVING",
    "HELD_AT_MAX",
    "HELD_BOOT_LIMIT",
    "HELD_COOLING",
    "ON_COMING_ROOM",
    "UNFITTABLE",
    "BootGroup",
    "BootPlan",
    "Room",
    "plan_boots",
]

HELD_AT_MAX = "every group that fits is at its maximum"
HELD_COOLING = "the groups that fit are cooling down after a boot that did not register"
HELD_BOOT_LIMIT = "the boots in flight are at the concurrency limit"
FITS_SERVING = "fits a serving node"
ON_COMING_ROOM = "waits for a node coming back"
UNFITTABLE = "no node group has a node that could take it"


@dataclass(frozen=True, slots=True)
class Room:
    """What one node offers pods: CPU millicores, memory bytes (0: not known, not checked) and
    GPUs per extended resource, and whether the extender keeps performance pods off it."""

    cpu_millis: int
    memory_bytes: int = 0
    gpus: Mapping[str, int] = field(default_factory=dict)
    keeps_performance_off: bool = False

    def takes(self, demand: Demand) -> bool:
        return (
            not (demand.performance and self.keeps_performance_off)
            and demand.cpu_millis <= self.cpu_millis
            and (not self.memory_bytes or demand.memory_bytes <= self.memory_bytes)
            and (demand.gpus <= 0 or self.gpus.get(demand.gpu_resource, 0) >= demand.gpus)
        )

    @property
    def gpu_total(self) -> int:
        return sum(self.gpus.values())


@dataclass(frozen=True)
class BootGroup:
    """Nodes of one shape that can be powered on: a node group (a MachineDeployment), or the
    powered-off nodes of one shape."""

    name: str
    room: Room
    """What one of its nodes offers when it comes up empty."""
    can_boot: int
    """How many more of its nodes may be powered on now: its nodes that are off, or its maximum
    size less its current size."""
    booting: int = 0
    """Its nodes powering on now (their room is coming back; they count against the limit)."""
    idle_w: float = 0.0
    """The idle draw of one of its nodes (0 when not known): the cheapest group is chosen."""
    cooling_until: float | None = None
    """A boot of the group did not register within its boot grace: no boot before this."""


@dataclass(frozen=True)
class BootPlan:
    boots: Mapping[str, int]
    """Nodes to power on per group, in the order the groups were first chosen."""
    served: int
    """Pods that will run on room coming back or on the nodes of this plan."""
    left_to_scheduler: int
    """Pods that fit the free room of a serving node: no boot for them."""
    held: Mapping[str, int]
    """Pods some group could take that cannot be served now, per reason."""
    unfittable: int
    """Pods no group's node could ever take: nothing is booted for them."""
    fates: tuple[str, ...] = ()
    """Per pod, in the order given: :data:`FITS_SERVING`, :data:`ON_COMING_ROOM`, the name of
    the group a node boots from for it, a ``held`` reason, or :data:`UNFITTABLE`."""

    @property
    def total(self) -> int:
        return sum(self.boots.values())


def _key(demand: Demand) -> tuple[int, int, int, str, bool]:
    return (
        demand.cpu_millis,
        demand.memory_bytes,
        demand.gpus,
        demand.gpu_resource,
        demand.performance,
    )


class _Bin:
    """The room left on one node coming back or chosen."""

    __slots__ = ("cpu", "gpus", "memory", "perf_off")

    def __init__(self, room: Room) -> None:
        self.cpu = room.cpu_millis
        self.memory = room.memory_bytes
        self.gpus = dict(room.gpus)
        self.perf_off = room.keeps_performance_off

    def take(self, demand: Demand) -> bool:
        """Take ``demand`` when it fits (and say so)."""
        if demand.performance and self.perf_off:
            return False
        if demand.cpu_millis > self.cpu:
            return False
        if self.memory and demand.memory_bytes > self.memory:
            return False
        if demand.gpus > 0 and self.gpus.get(demand.gpu_resource, 0) < demand.gpus:
            return False
        self.cpu -= demand.cpu_millis
        if self.memory:
            self.memory -= demand.memory_bytes
        if demand.gpus > 0:
            self.gpus[demand.gpu_resource] -= demand.gpus
        return True


def plan_boots(
    unserved: Sequence[Demand],
    groups: Sequence[BootGroup],
    *,
    now: float,
    serving: Sequence[Room] = (),
    coming: Sequence[Room] = (),
    max_concurrent_boots: int | None = None,
) -> BootPlan:
    """The boots for ``unserved`` (pods waiting for a node, in queue order).

    ``serving``: the free room of the serving nodes (a pod that fits there is left to the
    scheduler). ``coming``: nodes that take pods again soon without a boot (draining); the
    groups' booting nodes are coming too. ``max_concurrent_boots``: boots in flight (the
    groups' ``booting`` and this plan's) at most; None: only the groups' ``can_boot`` bound
    them."""
    bins = [_Bin(room) for room in serving]
    serving_bins = len(bins)
    bins += [_Bin(room) for room in coming]
    for group in groups:
        bins += [_Bin(group.room) for _ in range(max(0, group.booting))]
    in_flight = sum(max(0, g.booting) for g in groups)
    left = {g.name: max(0, g.can_boot) for g in groups}
    order = {g.name: i for i, g in enumerate(groups)}
    boots: Counter[str] = Counter()
    held: Counter[str] = Counter()
    served = unfittable = scheduler = 0
    fates: list[str] = []
    start: dict[tuple[int, int, int, str, bool], int] = {}
    """Per kind of pod, the first bin worth trying: bins only lose room, so a bin that could
    not take a pod of this kind earlier cannot take one now (a burst of equal pods is linear)."""
    placed_in: dict[int, str] = {}
    """Bins of the nodes this plan boots -> their group."""
    refused: dict[tuple[int, int, int, str, bool], str] = {}
    """Kinds of pod that found neither a bin nor a boot, and why: the chances only shrink."""
    for demand in unserved:
        key = _key(demand)
        gone = refused.get(key)
        if gone is not None:
            if gone:
                held[gone] += 1
            else:
                unfittable += 1
            fates.append(gone or UNFITTABLE)
            continue
        first = start.get(key, 0)
        placed = next((i for i in range(first, len(bins)) if bins[i].take(demand)), None)
        if placed is not None:
            start[key] = placed
            if placed < serving_bins:
                scheduler += 1
                fates.append(FITS_SERVING)
            else:
                served += 1
                fates.append(placed_in.get(placed, ON_COMING_ROOM))
            continue
        start[key] = len(bins)
        fitting = [g for g in groups if g.room.takes(demand)]
        if not fitting:
            refused[key] = ""
            unfittable += 1
            fates.append(UNFITTABLE)
            continue
        open_now = [g for g in fitting if left[g.name] > 0]
        ready = [g for g in open_now if g.cooling_until is None or now >= g.cooling_until]
        reason = ""
        if not open_now:
            reason = HELD_AT_MAX
        elif not ready:
            reason = HELD_COOLING
        elif max_concurrent_boots is not None and in_flight >= max_concurrent_boots:
            reason = HELD_BOOT_LIMIT
        if reason:
            refused[key] = reason
            held[reason] += 1
            fates.append(reason)
            continue
        chosen = min(
            ready,
            key=lambda g: (
                g.idle_w,
                g.room.gpu_total,
                g.room.cpu_millis,
                g.room.memory_bytes,
                order[g.name],
            ),
        )
        boots[chosen.name] += 1
        left[chosen.name] -= 1
        in_flight += 1
        fresh = _Bin(chosen.room)
        fresh.take(demand)
        placed_in[len(bins)] = chosen.name
        bins.append(fresh)
        served += 1
        fates.append(chosen.name)
    return BootPlan(dict(boots), served, scheduler, dict(held), unfittable, tuple(fates))
