"""From the manager's caches to the plain inputs of ``core.lifecycle``: a node's facts, what the
lifecycle has in flight on it (read back from its annotations and taints), and the fleet's
counts.

Everything in flight is on the Node itself, so this module is also how a restarted manager
finds the drains and shutdowns its predecessor left: it reads them exactly as it reads its own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

import structlog

from joulie.api import keys
from joulie.api.enums import SchedulableClass, WorkloadClass
from joulie.api.gpu import gpu_resource_kind
from joulie.api.quantity import QuantityError, parse_quantity
from joulie.core.lifecycle import Demand, NodeFacts, fits_pending
from joulie.core.lifecycle_boot import Room
from joulie.core.scoring import filter_reason
from joulie.kube.ownership import OwnedObject
from joulie.kube.projections import LeaseView, SlimNode, SlimPod
from joulie.manager.lifecycle.actuator import BootOffer

log = structlog.get_logger("joulie.lifecycle")


class Phase(StrEnum):
    NONE = ""
    DRAINING = "draining"
    SHUTTING_DOWN = "shutting-down"
    OFF = "off"
    """The actuator confirmed the power-off (or the node went NotReady after it accepted): the
    Node stays registered, powered off, and is left alone until it is Ready again (or the
    lifecycle powers it on)."""
    BOOTING = "booting"
    """The lifecycle asked for the node to be powered on: left alone until it is Ready (it
    serves again) or its boot grace has passed (it is off again, and cools down)."""


@dataclass(frozen=True)
class InFlight:
    """What the lifecycle has under way on one node."""

    phase: Phase
    since: float | None
    """When the phase began."""
    cordoned_by_us: bool
    tainted: bool
    """Our NoSchedule taint is on the node."""
    retry_after: float | None
    failures: int

    @property
    def orphaned(self) -> bool:
        """A taint of ours without a phase (a crash between writes, or a phase someone removed):
        to be rolled back."""
        return self.phase is Phase.NONE and (self.tainted or self.cordoned_by_us)


def format_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_warned: set[tuple[str, str, str]] = set()


def annotation_time(node: SlimNode, key: str) -> float | None:
    """An annotation holding a time (RFC 3339 or epoch seconds); None when absent or unreadable
    (warned once per node, key and value)."""
    value = node.annotations.get(key)
    if value is None or value == "":
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            seconds = math.nan
    if math.isfinite(seconds):
        return seconds
    if (node.name, key, value) not in _warned:
        _warned.add((node.name, key, value))
        log.warning(
            "node annotation is not a time; ignored",
            node=node.name,
            annotation=key,
            value=value,
            accepted="RFC 3339 (2026-12-01T02:00:00Z) or epoch seconds",
        )
    return None


NOTHING = InFlight(Phase.NONE, None, False, False, None, 0)
_OURS = (
    keys.LIFECYCLE_PHASE_ANNOTATION,
    keys.LIFECYCLE_CORDONED_ANNOTATION,
    keys.LIFECYCLE_RETRY_AFTER_ANNOTATION,
    keys.LIFECYCLE_FAILURES_ANNOTATION,
)


def in_flight(node: SlimNode) -> InFlight:
    if keys.DRAINING_TAINT not in node.taints and not any(k in node.annotations for k in _OURS):
        return NOTHING  # most nodes, every pass: nothing to parse
    raw = node.annotations.get(keys.LIFECYCLE_PHASE_ANNOTATION, "")
    try:
        phase = Phase(raw)
    except ValueError:
        phase = Phase.NONE
    try:
        failures = max(0, int(node.annotations.get(keys.LIFECYCLE_FAILURES_ANNOTATION, "0")))
    except ValueError:
        failures = 0
    return InFlight(
        phase=phase,
        since=annotation_time(node, keys.LIFECYCLE_SINCE_ANNOTATION),
        cordoned_by_us=node.annotations.get(keys.LIFECYCLE_CORDONED_ANNOTATION) == "true",
        tainted=keys.DRAINING_TAINT in node.taints,
        retry_after=annotation_time(node, keys.LIFECYCLE_RETRY_AFTER_ANNOTATION),
        failures=failures,
    )


def launched_at(node: SlimNode) -> float:
    """The provisioner's launch time when it annotated one, else when the Node registered."""
    stated = annotation_time(node, keys.LAUNCHED_AT_ANNOTATION)
    return stated if stated is not None else node.created_at


def node_facts(
    node: SlimNode,
    lease: LeaseView | None,
    workload_pods: int,
    idle_since: float | None,
) -> NodeFacts:
    return NodeFacts(
        name=node.name,
        launched_at=launched_at(node),
        ready=node.ready,
        ready_changed_at=node.ready_changed_at,
        heartbeat_at=lease.renewed_at if lease is not None else None,
        workload_pods=workload_pods,
        idle_since=idle_since,
    )


def _amount(allocatable: Mapping[str, str], resource: str, scale: int) -> int:
    try:
        return max(0, int(parse_quantity(allocatable.get(resource, "0")) * scale))
    except QuantityError:
        return 0


def _gpus(allocatable: Mapping[str, str]) -> dict[str, int]:
    gpus: dict[str, int] = {}
    for resource, value in allocatable.items():
        if gpu_resource_kind(resource) is None:
            continue
        try:
            gpus[resource] = int(parse_quantity(value))
        except QuantityError:
            continue
    return gpus


def capacity(node: SlimNode) -> tuple[int, dict[str, int]]:
    """CPU millicores and GPUs per GPU resource the node can offer a pod (for "could a pending
    pod use it")."""
    return _amount(node.allocatable, "cpu", 1000), _gpus(node.allocatable)


def room(allocatable: Mapping[str, str], keeps_performance_off: bool = False) -> Room:
    """What a node with ``allocatable`` offers an empty node's worth of pods."""
    return Room(
        cpu_millis=_amount(allocatable, "cpu", 1000),
        memory_bytes=_amount(allocatable, "memory", 1),
        gpus=_gpus(allocatable),
        keeps_performance_off=keeps_performance_off,
    )


def free_room(node: SlimNode, twin: OwnedObject | None, pods: Iterable[SlimPod]) -> Room:
    """What ``node`` offers beyond the requests of ``pods`` (those bound to it, not
    finished)."""
    full = room(node.allocatable, keeps_performance_off(node, twin))
    gpus = dict(full.gpus)
    cpu, memory = full.cpu_millis, full.memory_bytes
    for pod in pods:
        cpu -= pod.cpu_millis
        memory -= pod.memory_bytes
        if pod.gpus and pod.gpu_resource in gpus:
            gpus[pod.gpu_resource] -= pod.gpus
    return Room(
        max(0, cpu),
        # 0 would read as "memory not known": a node whose memory is taken keeps 1 byte.
        max(1, memory) if full.memory_bytes else 0,
        {r: max(0, n) for r, n in gpus.items()},
        full.keeps_performance_off,
    )


@dataclass(frozen=True)
class OffNode:
    """A node that could be powered on (or is powering on), as an actuator knows it."""

    name: str
    allocatable: Mapping[str, str]
    labels: Mapping[str, str]
    retry_after: float | None = None
    """Cooling down after a boot that did not register: not powered on before this."""


def registered_off_nodes(nodes: Iterable[SlimNode]) -> tuple[list[OffNode], list[OffNode]]:
    """The Nodes the lifecycle powered off that stay registered, and those it is powering on
    (read from their phase annotations, so a restarted manager sees them as they are)."""
    off: list[OffNode] = []
    booting: list[OffNode] = []
    for node in nodes:
        flight = in_flight(node)
        if flight.phase is Phase.OFF and not node.ready:
            off.append(OffNode(node.name, node.allocatable, node.labels, flight.retry_after))
        elif flight.phase is Phase.BOOTING:
            booting.append(OffNode(node.name, node.allocatable, node.labels))
    return off, booting


def _shape(node: OffNode) -> tuple[object, ...]:
    gpus = tuple(sorted(_gpus(node.allocatable).items()))
    resources = (node.allocatable.get("cpu", ""), node.allocatable.get("memory", ""), gpus)
    return (*resources, node.labels.get(keys.POWER_PROFILE_LABEL, ""))


def offers_by_shape(
    off: Iterable[OffNode], booting: Iterable[OffNode], now: float
) -> list[BootOffer]:
    """Off and booting nodes as offers, one per shape (resources and power profile), each
    naming its off nodes in name order; a node cooling down is not offered before its time."""
    shapes: dict[tuple[object, ...], tuple[list[OffNode], list[OffNode]]] = {}
    for node in sorted(off, key=lambda n: n.name):
        shapes.setdefault(_shape(node), ([], []))[0].append(node)
    for node in booting:
        shapes.setdefault(_shape(node), ([], []))[1].append(node)
    offers = []
    for waiting, coming in shapes.values():
        first = (waiting or coming)[0]
        ready = [n for n in waiting if n.retry_after is None or now >= n.retry_after]
        cooling = [n.retry_after for n in waiting if n not in ready and n.retry_after is not None]
        offers.append(
            BootOffer(
                group=first.name,
                allocatable=first.allocatable,
                can_boot=len(ready),
                booting=len(coming),
                nodes=tuple(n.name for n in ready),
                labels=first.labels,
                cooling_until=min(cooling) if cooling and not ready else None,
            )
        )
    return offers


def pending_demand(pods: list[SlimPod]) -> list[Demand]:
    return [
        Demand(
            pod.cpu_millis,
            pod.gpus,
            pod.gpu_resource,
            performance=pod.annotations.get(keys.WORKLOAD_CLASS_ANNOTATION)
            == WorkloadClass.PERFORMANCE,
            memory_bytes=pod.memory_bytes,
        )
        for pod in pods
    ]


def pending_could_use(node: SlimNode, twin: OwnedObject | None, pending: list[Demand]) -> bool:
    """Whether a pending pod could use ``node``: it fits what the node offers, and a
    performance pod only where the extender lets it run."""
    return fits_pending(
        *capacity(node), pending, keeps_performance_off=keeps_performance_off(node, twin)
    )


def keeps_performance_off(node: SlimNode, twin: OwnedObject | None) -> bool:
    """Whether the extender keeps performance pods off ``node`` (the class in its NodeTwin's
    status, else its power-profile label), so that no pending performance pod holds it up."""
    raw = twin.stored_status.get("schedulableClass") if twin is not None else None
    try:
        schedulable = SchedulableClass(raw) if isinstance(raw, str) else None
    except ValueError:
        schedulable = None
    label = node.labels.get(keys.POWER_PROFILE_LABEL)
    return filter_reason(True, schedulable, label) is not None
