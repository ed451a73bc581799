"""Which nodes run in performance: the three policies and the per-family performance split.

``static_partition`` and ``queue_aware_v1`` only decide *how many* nodes stay in performance (the
requested count ``hp_count``); :func:`performance_set` decides *which*. It shares the slots between
hardware families with the Sainte-Laguë divisor method after giving every family one slot, so

* every family keeps performance capacity in proportion to its size, and at least one node;
* the method is house monotone: one more slot moves exactly one node, one less moves one back;
* within a family, nodes already labelled performance are kept first, so a reconcile at constant
  demand moves nothing;
* the answer depends on the set of nodes and their labels only, never on the order of the list.

``rule_swap_v1`` is a debugging policy that flips two nodes back and forth over time.

Everything here is pure: the current time is an argument, nothing is read from the cluster.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import pairwise
from types import MappingProxyType

from joulie.api.enums import PolicyType, Profile

__all__ = [
    "POLICY_NAMES",
    "Plan",
    "PlanNode",
    "PolicyInputs",
    "family_split",
    "performance_set",
    "plan",
    "queue_hp_count",
    "round_half_up",
    "rule_swap_assignment",
    "static_hp_count",
]

# Provenance written to NodeTwin.spec.policy.name for each policy.
POLICY_NAMES: Mapping[PolicyType, str] = MappingProxyType(
    {
        PolicyType.STATIC_PARTITION: "static-partition-v1",
        PolicyType.QUEUE_AWARE_V1: "queue-aware-v1",
        PolicyType.RULE_SWAP_V1: "rule-swap-v1",
    }
)


@dataclass(frozen=True)
class PlanNode:
    """One eligible node as the policy sees it."""

    name: str
    family: str
    """Hardware family, from :func:`joulie.hardware.family.hardware_family`."""
    current_profile: str | None
    """The node's ``joulie.io/power-profile`` label now; anything but ``performance`` (eco, a
    stray value, no label) counts as not performance."""


@dataclass(frozen=True)
class PolicyInputs:
    """The policy settings of the controller manager, as plain values."""

    policy: str
    """``static_partition``, ``queue_aware_v1`` or ``rule_swap_v1`` (a :class:`PolicyType`)."""
    static_hp_frac: float
    queue_hp_base_frac: float
    queue_hp_min: int
    queue_hp_max: int
    queue_perf_per_hp_node: int
    reconcile_interval_s: float


@dataclass(frozen=True)
class Plan:
    """The desired profile of every eligible node, before the downgrade guard."""

    profiles: Mapping[str, Profile]
    """Node name -> profile, for every node given, in node-name order."""
    hp_count: int
    """The count the policy asked for, before the family floor and the cap at the node count
    (``rule_swap_v1`` asks for no count: there it equals ``performance_count``)."""
    performance_count: int
    """Nodes planned in performance."""
    policy_name: str
    """Provenance for ``NodeTwin.spec.policy.name``."""


# -- counts ---------------------------------------------------------------------------------------


def round_half_up(value: Fraction) -> int:
    """Nearest integer, halves rounded up (``2.5 -> 3``), as the spec's ``round`` reads."""
    return math.floor(value + Fraction(1, 2))


def _exact_fraction(frac: float, what: str) -> Fraction:
    """The fraction as the operator wrote it (``0.35`` is 35/100, not the nearest binary float),
    clamped to [0, 1]."""
    if math.isnan(frac):
        raise ValueError(f"{what} is NaN; expected a fraction in [0, 1]")
    clamped = min(max(frac, 0.0), 1.0)
    # str() of a float is its shortest round-trip decimal form, i.e. what was typed.
    return Fraction(str(clamped))


def _fraction_of(n: int, frac: float, what: str) -> int:
    if n < 0:
        raise ValueError(f"node count is negative ({n})")
    return round_half_up(n * _exact_fraction(frac, what))


def static_hp_count(n: int, hp_frac: float) -> int:
    """``static_partition``: ``round(N * STATIC_HP_FRAC)``.

    ``round`` rounds halves up and works on the decimal fraction as written. Python's own
    ``round`` rounds halves to even, which would give 2 for 5 nodes at 0.5 and 4 for 9 nodes at
    0.5 (the direction depends on parity); upstream rounds halves away from zero, and an operator
    reads "half of 5 nodes, rounded" as 3. Multiplying binary floats would also turn
    ``90 * 0.35`` (31.5) into 31.499999999999996 and round it down, so the product is exact.
    ``hp_frac`` outside [0, 1] is clamped (settings reject it anyway).
    """
    return _fraction_of(n, hp_frac, "STATIC_HP_FRAC")


def queue_hp_count(
    n: int,
    perf_pods: int,
    base_frac: float,
    hp_min: int,
    hp_max: int,
    perf_per_hp_node: int,
) -> int:
    """``queue_aware_v1``: ``clamp(max(round(N * base_frac), ceil(P / perf_per_hp_node)))``.

    ``perf_pods`` (P) is the number of running *and* pending performance pods cluster-wide.
    Rounding is :func:`static_hp_count`'s. The clamp is to ``[hp_min, hp_max]`` as given: a
    ``hp_max`` of 0 means at most 0 (the family floor in :func:`performance_set` still keeps one
    node per family), not "unbounded". Should ``hp_max`` be below ``hp_min`` (settings reject
    that), the minimum wins: it is the operator's guarantee of performance capacity. The raise to
    the number of families and the cap at N are :func:`performance_set`'s.
    """
    if perf_pods < 0:
        raise ValueError(f"performance pod count is negative ({perf_pods})")
    if perf_per_hp_node < 1:
        raise ValueError(f"QUEUE_PERF_PER_HP_NODE must be at least 1, got {perf_per_hp_node}")
    if hp_min < 0 or hp_max < 0:
        raise ValueError(f"QUEUE_HP_MIN/QUEUE_HP_MAX must not be negative ({hp_min}, {hp_max})")
    base = _fraction_of(n, base_frac, "QUEUE_HP_BASE_FRAC")
    need = -(-perf_pods // perf_per_hp_node)
    return max(min(max(base, need), hp_max), hp_min)


# -- the per-family split -------------------------------------------------------------------------


class _Bid:
    """A family's claim on the next slot: ``size / (2 * slots + 1)``, ordered so that the
    strongest claim is the smallest item of a heap (larger quotient first, then smaller key)."""

    __slots__ = ("family", "size", "slots")

    def __init__(self, family: str, size: int, slots: int) -> None:
        self.family = family
        self.size = size
        self.slots = slots

    def __lt__(self, other: _Bid) -> bool:
        # size_a / (2 slots_a + 1) > size_b / (2 slots_b + 1), cross-multiplied: exact integers.
        mine = self.size * (2 * other.slots + 1)
        theirs = other.size * (2 * self.slots + 1)
        if mine != theirs:
            return mine > theirs
        return self.family < other.family


def _unique_names(nodes: Sequence[PlanNode]) -> list[str]:
    """Node names in name order; a name listed twice is the caller's bug, not a tie to break."""
    names = sorted(node.name for node in nodes)
    for before, after in pairwise(names):
        if before == after:
            raise ValueError(f"node {after!r} is listed twice")
    return names


def _families(nodes: Sequence[PlanNode]) -> dict[str, list[PlanNode]]:
    _unique_names(nodes)
    groups: dict[str, list[PlanNode]] = defaultdict(list)
    for node in nodes:
        groups[node.family].append(node)
    return groups


def _slots(sizes: Mapping[str, int], total: int) -> dict[str, int]:
    """Sainte-Laguë seats for ``total`` slots after one slot per family, capped at family size.

    ``total`` must lie in ``[len(sizes), sum(sizes)]``.
    """
    slots = dict.fromkeys(sizes, 1)
    heap = [_Bid(family, size, 1) for family, size in sizes.items() if size > 1]
    heapq.heapify(heap)
    for _ in range(total - len(sizes)):
        bid = heapq.heappop(heap)
        bid.slots += 1
        slots[bid.family] = bid.slots
        # A full family bids no more. (Its claim would be below 1/2 and any other family's above,
        # so this never changes the outcome while slots remain; it keeps the rule explicit.)
        if bid.slots < bid.size:
            heapq.heappush(heap, bid)
    return slots


def performance_set(nodes: Sequence[PlanNode], hp_count: int) -> frozenset[str]:
    """Names of the nodes to run in performance for a requested count ``hp_count``.

    The count is raised to the number of families and capped at the number of nodes, so the
    result always has ``clamp(hp_count, families, N)`` nodes (none when there are no nodes).
    Every family gets one slot; each further slot goes to the family with the largest
    ``size / (2 * slots + 1)``, ties to the smaller family key, never beyond a family's size.
    Within a family the nodes labelled performance come first, then the others, each by name.

    Node names must be unique (:class:`ValueError` otherwise).
    """
    groups = _families(nodes)
    if not groups:
        return frozenset()
    total = min(max(hp_count, len(groups)), len(nodes))
    slots = _slots({family: len(members) for family, members in groups.items()}, total)
    chosen: list[str] = []
    for family, members in groups.items():
        ranked = sorted(members, key=lambda n: (n.current_profile != Profile.PERFORMANCE, n.name))
        chosen.extend(node.name for node in ranked[: slots[family]])
    return frozenset(chosen)


def family_split(
    nodes: Sequence[PlanNode], performance: frozenset[str]
) -> dict[str, tuple[int, int]]:
    """Family -> (nodes, nodes in ``performance``), families in key order."""
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for node in nodes:
        counts = totals[node.family]
        counts[0] += 1
        counts[1] += node.name in performance
    return {family: (c[0], c[1]) for family, c in sorted(totals.items())}


# -- rule_swap_v1 ---------------------------------------------------------------------------------


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
    names = _unique_names(nodes)
    profiles = dict.fromkeys(names, Profile.PERFORMANCE)
    if phase < len(names):
        profiles[names[phase]] = Profile.ECO
    return profiles


# -- the plan -------------------------------------------------------------------------------------


def plan(nodes: Sequence[PlanNode], inputs: PolicyInputs, perf_pods: int, now: float) -> Plan:
    """The desired profile of every node under ``inputs.policy``.

    ``perf_pods`` is P of ``queue_aware_v1``: performance pods running or pending cluster-wide
    (the other policies ignore it). ``now`` only matters to ``rule_swap_v1``. An unknown policy
    name raises :class:`ValueError`.
    """
    try:
        policy = PolicyType(inputs.policy)
    except ValueError:
        accepted = ", ".join(p.value for p in PolicyType)
        raise ValueError(f"unknown policy {inputs.policy!r}; expected one of {accepted}") from None

    if policy is PolicyType.RULE_SWAP_V1:
        profiles = rule_swap_assignment(nodes, now, inputs.reconcile_interval_s)
        count = sum(p is Profile.PERFORMANCE for p in profiles.values())
        return Plan(MappingProxyType(profiles), count, count, POLICY_NAMES[policy])

    if policy is PolicyType.STATIC_PARTITION:
        hp = static_hp_count(len(nodes), inputs.static_hp_frac)
    else:
        hp = queue_hp_count(
            len(nodes),
            perf_pods,
            inputs.queue_hp_base_frac,
            inputs.queue_hp_min,
            inputs.queue_hp_max,
            inputs.queue_perf_per_hp_node,
        )
    chosen = performance_set(nodes, hp)
    profiles = {
        name: Profile.PERFORMANCE if name in chosen else Profile.ECO
        for name in _unique_names(nodes)
    }
    return Plan(MappingProxyType(profiles), hp, len(chosen), POLICY_NAMES[policy])
