"""The downgrade guard: a node planned to eco keeps performance caps while performance pods
run on it, and drains instead; and the transition events that tell of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from joulie.api.enums import (
    Profile,
    SchedulableClass,
)

TRANSITION_DEFERRED: Final = "deferred"
TRANSITION_APPLIED: Final = "applied"


@dataclass(frozen=True)
class GuardDecision:
    profile: Profile
    """NodeTwin.spec.profile: always the planned profile."""
    schedulable_class: SchedulableClass
    """NodeTwin.status.schedulableClass."""
    control_profile: Profile
    """The profile whose caps and governor presets are written (performance while draining)."""

    @property
    def deferred(self) -> bool:
        """Whether the move to eco waits for performance pods to finish."""
        return self.schedulable_class is SchedulableClass.DRAINING


def downgrade_guard(planned: Profile, active_perf_pods: int) -> GuardDecision:
    """Apply the downgrade guard to one node's planned profile.

    ``active_perf_pods`` counts the node's pods for which :func:`is_active_performance_pod` holds.
    An eco node that runs one drains: its profile stays eco, but it keeps the performance caps and
    presets until those pods are gone, whether it is leaving performance or was in eco already.
    """
    planned = Profile(planned)  # a stray string fails here rather than reading as eco
    if active_perf_pods < 0:
        raise ValueError(f"active_perf_pods must be >= 0, got {active_perf_pods}")
    if planned == Profile.PERFORMANCE:
        return GuardDecision(Profile.PERFORMANCE, SchedulableClass.PERFORMANCE, Profile.PERFORMANCE)
    if active_perf_pods > 0:
        return GuardDecision(Profile.ECO, SchedulableClass.DRAINING, Profile.PERFORMANCE)
    return GuardDecision(Profile.ECO, SchedulableClass.ECO, Profile.ECO)


def transition_event(
    previous: SchedulableClass | None, current: SchedulableClass
) -> Literal["deferred", "applied"] | None:
    """The transition to record (metric and Event) when a node's class changes.

    ``previous`` is the class last written to NodeTwin.status (None for a node seen for the first
    time). Returns None when nothing changed, so a node that keeps draining is recorded once, not
    at every reconcile. Entering ``draining`` is ``deferred`` (also for a new node or an eco node
    that runs a performance pod); any other change is ``applied``, including ``draining -> eco``
    when the deferred move completes; a new node that is not draining records nothing.
    """
    if previous == current:
        return None
    if current == SchedulableClass.DRAINING:
        return TRANSITION_DEFERRED
    if previous is None:
        return None
    return TRANSITION_APPLIED
