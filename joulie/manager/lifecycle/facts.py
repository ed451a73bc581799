"""From the manager's caches to the plain inputs of ``core.lifecycle``: a node's facts, what the
lifecycle has in flight on it (read back from its annotations and taints), and the fleet's
counts.

Everything in flight is on the Node itself, so this module is also how a restarted manager
finds the drains and shutdowns its predecessor left: it reads them exactly as it reads its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

import structlog

from joulie.api import keys
from joulie.api.enums import SchedulableClass, WorkloadClass
from joulie.api.gpu import gpu_resource_kind
from joulie.api.quantity import QuantityError, parse_quantity
from joulie.core.lifecycle import Demand, NodeFacts, fits_pending
from joulie.core.scoring import filter_reason
from joulie.kube.ownership import OwnedObject
from joulie.kube.projections import LeaseView, SlimNode, SlimPod

log = structlog.get_logger("joulie.lifecycle")


class Phase(StrEnum):
    NONE = ""
    DRAINING = "draining"
    SHUTTING_DOWN = "shutting-down"
    OFF = "off"
    """The actuator confirmed the power-off (or the node went NotReady after it accepted): the
    Node stays registered, powered off, and is left alone until it is Ready again."""


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


def capacity(node: SlimNode) -> tuple[int, dict[str, int]]:
    """CPU millicores and GPUs per GPU resource the node can offer a pod (for "could a pending
    pod use it")."""
    try:
        cpu = int(parse_quantity(node.allocatable.get("cpu", "0")) * 1000)
    except QuantityError:
        cpu = 0
    gpus: dict[str, int] = {}
    for resource, value in node.allocatable.items():
        if gpu_resource_kind(resource) is None:
            continue
        try:
            gpus[resource] = int(parse_quantity(value))
        except QuantityError:
            continue
    return cpu, gpus


def pending_demand(pods: list[SlimPod]) -> list[Demand]:
    return [
        Demand(
            pod.cpu_millis,
            pod.gpus,
            pod.gpu_resource,
            performance=pod.annotations.get(keys.WORKLOAD_CLASS_ANNOTATION)
            == WorkloadClass.PERFORMANCE,
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
