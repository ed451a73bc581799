"""Node lifecycle decisions: a node's state tuple from plain facts, the matrix's action for it, and
each step of a drain. Time is an argument; nothing here reads a clock or the cluster.

The tuple (worker state, billing window, boot grace, idle grace) is derived as follows:

* **worker state**, first match wins:

  * ``down`` when the node's heartbeat (its Lease) was renewed once and is now older than
    ``heartbeat_stale_s``;
  * ``unpaired`` when the node is not Ready and either it is still within its boot grace (it is
    booting: a registered node that has not become Ready yet is not broken) or no heartbeat was
    ever seen (it never came up);
  * ``down`` when it is not Ready and has not been for ``not_ready_grace_s``;
  * ``busy`` when a workload pod is bound or nominated to it, and also while it is not Ready for
    less than ``not_ready_grace_s`` (a brief NotReady is not a decision to act on: busy is the
    state for which the matrix does nothing);
  * ``idle`` otherwise.

* **billing window**: open always by default (on premises a node off is saved power at any
  time); with a billing period, open only within the configured spans of each period, counted
  from the node's launch.
* **boot grace**: ``boot wait`` until ``boot_grace_s`` after launch, ``boot exceeded`` from that
  instant on.
* **idle grace**: ``not idle`` unless idle; ``idle wait`` until ``idle_grace_s`` after the moment
  the node was first seen idle, ``idle exceeded`` from that instant on. That moment is kept by the
  caller (in a node annotation) so a restart neither resets nor invents idleness.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from joulie.api.lifecycle import (
    Action,
    BootGrace,
    IdleGrace,
    Matrix,
    StateTuple,
    Window,
    WorkerState,
)

__all__ = [
    "Demand",
    "Derived",
    "DrainStep",
    "LifecycleConfig",
    "NodeFacts",
    "billing_window",
    "decide",
    "derive",
    "drain_step",
    "fits_pending",
]


@dataclass(frozen=True)
class LifecycleConfig:
    """The timings of the derivation (seconds); defaults follow cluster-autoscaler and Karpenter
    practice, made for power saving rather than billing."""

    boot_grace_s: float = 1200.0
    """A launched node has this long to become Ready before being called unpaired-and-broken."""
    idle_grace_s: float = 600.0
    """A node idle this long may be drained."""
    not_ready_grace_s: float = 100.0
    """A node NotReady this long is down (twice the node controller's own grace)."""
    heartbeat_stale_s: float = 120.0
    """A node whose Lease was not renewed for this long is down (kubelet renews every 10 s)."""
    billing_period_s: float = 0.0
    """0: the window is always open. Otherwise the billing period counted from launch."""
    shutdown_windows: tuple[tuple[float, float], ...] = ()
    """With a billing period: the spans [start, end) of each period in which the window is open."""
    drain_settle_s: float = 5.0
    """After tainting a node, wait this long (for the scheduler to see the taint) before the live
    re-check that hands the node over to shutdown."""

    def __post_init__(self) -> None:
        for name in ("boot_grace_s", "idle_grace_s", "not_ready_grace_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.heartbeat_stale_s <= 0:
            # A heartbeat renewed this instant would already be stale: every node would be down.
            raise ValueError("heartbeat_stale_s must be > 0")
        if self.billing_period_s < 0:
            raise ValueError("billing_period_s must be >= 0")
        if self.billing_period_s and not self.shutdown_windows:
            raise ValueError("a billing period needs at least one shutdown window")
        for start, end in self.shutdown_windows:
            if not 0 <= start < end <= self.billing_period_s:
                raise ValueError(
                    f"shutdown window {start:g}-{end:g} s is not within the billing period "
                    f"(0-{self.billing_period_s:g} s, start before end)"
                )


@dataclass(frozen=True)
class NodeFacts:
    """What the derivation reads of one node (times are epoch seconds)."""

    name: str
    launched_at: float
    """The provisioner's launch time if it said so, else when the Node registered."""
    ready: bool
    ready_changed_at: float | None
    """When the Ready condition last changed; None without one (read as the launch time)."""
    heartbeat_at: float | None
    """The last renewal of the node's Lease; None when it has none."""
    workload_pods: int
    """Pods bound to it, or nominated to it, that count as work (not DaemonSet, mirror or
    finished pods)."""
    idle_since: float | None
    """When the node was first seen idle in its current idle spell, as kept; None if not known."""


@dataclass(frozen=True)
class Derived:
    tuple: StateTuple
    reason: str
    """Why the worker state is what it is, for logs, Events and conditions (no figures that
    change from one moment to the next, so an unchanged decision reads the same)."""
    idle_since: float | None
    """What to keep as the idle spell's start from now on (None: not idle)."""


def billing_window(launched_at: float, now: float, config: LifecycleConfig) -> Window:
    if not config.billing_period_s:
        return Window.OPEN
    offset = (now - launched_at) % config.billing_period_s
    opened = any(start <= offset < end for start, end in config.shutdown_windows)
    return Window.OPEN if opened else Window.CLOSED


def _worker_state(
    facts: NodeFacts, now: float, config: LifecycleConfig, booting: bool
) -> tuple[WorkerState, str]:
    if facts.heartbeat_at is not None and now - facts.heartbeat_at >= config.heartbeat_stale_s:
        return WorkerState.DOWN, "its heartbeat is stale"
    if not facts.ready:
        if booting:
            return WorkerState.UNPAIRED, "not Ready yet, within its boot grace"
        if facts.heartbeat_at is None:
            return WorkerState.UNPAIRED, "never registered a heartbeat, and not Ready"
        since = facts.ready_changed_at if facts.ready_changed_at is not None else facts.launched_at
        if now - since >= config.not_ready_grace_s:
            return WorkerState.DOWN, "NotReady past the grace"
        return WorkerState.BUSY, "NotReady, within the grace"
    if facts.workload_pods:
        return WorkerState.BUSY, "workload pods on it"
    return WorkerState.IDLE, "no workload pods"


def derive(facts: NodeFacts, now: float, config: LifecycleConfig) -> Derived:
    """The node's state tuple at ``now``."""
    booting = now - facts.launched_at < config.boot_grace_s
    state, reason = _worker_state(facts, now, config, booting)
    idle_since: float | None = None
    idle = IdleGrace.NOT_IDLE
    if state is WorkerState.IDLE:
        idle_since = facts.idle_since if facts.idle_since is not None else now
        idle = IdleGrace.EXCEEDED if now - idle_since >= config.idle_grace_s else IdleGrace.WAIT
        reason = "idle past its grace" if idle is IdleGrace.EXCEEDED else "idle"
    elif state is WorkerState.BUSY and not facts.ready:
        # A brief NotReady neither ends nor starts an idle spell.
        idle_since = facts.idle_since
    key = StateTuple(
        state,
        billing_window(facts.launched_at, now, config),
        BootGrace.WAIT if booting else BootGrace.EXCEEDED,
        idle,
    )
    return Derived(key, reason, idle_since)


def decide(derived: Derived, matrix: Matrix) -> Action:
    return matrix.action(derived.tuple)


class DrainStep(StrEnum):
    WAIT = "wait"
    """Still settling: look again later."""
    CANCEL = "cancel"
    """Undo the taint and the cordon: the node is needed, or no longer eligible."""
    SHUT_DOWN = "shut-down"
    """Hand the node over to shutdown."""


def drain_step(
    started_at: float,
    now: float,
    config: LifecycleConfig,
    *,
    live_workload_pods: Sequence[str],
    demand_fits: bool,
    fresh_action: Action,
) -> tuple[DrainStep, str]:
    """The next step of a drain that started at ``started_at``: ``live_workload_pods`` are the
    workload pods a live list (not a cache) found on the node, ``demand_fits`` whether a pending
    pod could run there, ``fresh_action`` the matrix's action on the node's current facts."""
    if live_workload_pods:
        shown = ", ".join(live_workload_pods[:3])
        return DrainStep.CANCEL, f"a workload pod landed on the node ({shown})"
    if demand_fits:
        return DrainStep.CANCEL, "pending pods could use the node"
    if now - started_at < config.drain_settle_s:
        return DrainStep.WAIT, "settling"
    if fresh_action is Action.NONE:
        return DrainStep.CANCEL, "no longer eligible"
    return DrainStep.SHUT_DOWN, "idle past its grace, re-checked live"


@dataclass(frozen=True, slots=True)
class Demand:
    """What one pending pod asks of a node."""

    cpu_millis: int
    gpus: int = 0
    gpu_resource: str = ""
    """The extended resource its GPUs are asked as (``nvidia.com/gpu``, a MIG profile ...)."""
    performance: bool = False
    """A performance-class pod: the extender keeps it off eco and draining nodes
    (:func:`joulie.core.scoring.filter_reason`), so only nodes it may use are held for it."""
    memory_bytes: int = 0
    """Its memory request (read when a node is chosen to boot for it; a hold reads CPU and
    GPUs only, the cautious side)."""


def fits_pending(
    free_cpu_millis: int,
    free_gpus: Mapping[str, int],
    pending: Sequence[Demand],
    *,
    keeps_performance_off: bool = False,
) -> bool:
    """Whether any pending pod fits in what the node offers: its CPU, and its GPUs of the very
    resource it asks for (an AMD pod never keeps an NVIDIA node up); a performance pod only on a
    node that does not keep performance pods off (``keeps_performance_off``: the node's class is
    eco or draining, so the extender's filter would refuse it there). Node selectors and
    affinities are not read: a drain is cancelled for any pod that might fit, the cautious
    mistake."""
    return any(
        not (d.performance and keeps_performance_off)
        and d.cpu_millis <= free_cpu_millis
        and (d.gpus <= 0 or free_gpus.get(d.gpu_resource, 0) >= d.gpus)
        for d in pending
    )
