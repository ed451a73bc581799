"""``rule_swap_v1`` (debugging): two nodes flip between eco and performance over time."""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import MappingProxyType

from joulie.api.enums import Profile
from joulie.core.policies.base import Plan, PlanNode, Policy, Reads, Values
from joulie.core.policies.family_split import unique_names

__all__ = ["POLICY", "rule_swap_assignment"]


def rule_swap_assignment(
    nodes: Sequence[PlanNode], now: float, interval_s: float
) -> dict[str, Profile]:
    """``rule_swap_v1`` (debugging): the phase ``floor(now / interval_s) mod 2`` picks which of
    the first two nodes in name order is eco (the first in phase 0, the second in phase 1); all
    other nodes are performance. A lone node is eco in phase 0 and performance in phase 1.

    ``now`` is seconds since the epoch (any fixed origin works); ``interval_s`` must be positive.
    Node names must be unique (:class:`ValueError` otherwise).
    """
    if not interval_s > 0 or not math.isfinite(interval_s):
        raise ValueError(f"reconcile interval must be a positive number of seconds: {interval_s}")
    if not math.isfinite(now):
        raise ValueError(f"time must be finite: {now}")
    phase = math.floor(now / interval_s) % 2
    names = unique_names(nodes)
    profiles = dict.fromkeys(names, Profile.PERFORMANCE)
    if phase < len(names):
        profiles[names[phase]] = Profile.ECO
    return profiles


def _decide(
    nodes: Sequence[PlanNode], values: Values, perf_pods: int, now: float, interval_s: float
) -> Plan:
    profiles = rule_swap_assignment(nodes, now, interval_s)
    count = sum(p is Profile.PERFORMANCE for p in profiles.values())
    return Plan(MappingProxyType(profiles), count, count, POLICY.provenance)


POLICY = Policy(
    name="rule_swap_v1",
    provenance="rule-swap-v1",
    summary="debugging only: the first two nodes take turns in eco every RECONCILE_INTERVAL",
    decide=_decide,
    reads=frozenset({Reads.CLOCK}),
)
