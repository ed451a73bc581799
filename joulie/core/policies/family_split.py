"""Which nodes run in performance for a requested count: the per-family performance split.

The partition policies only decide *how many* nodes stay in performance (the requested count
``hp_count``); :func:`performance_set` decides *which*. It shares the slots between hardware
families with the Sainte-Laguë divisor method after giving every family one slot, so

* every family keeps performance capacity in proportion to its size, and at least one node;
* the method is house monotone: one more slot moves exactly one node, one less moves one back;
* within a family, nodes already labelled performance are kept first, so a reconcile at constant
  demand moves nothing;
* the answer depends on the set of nodes and their labels only, never on the order of the list.

Also here: the spec's rounding of a fraction of the node count, which the partition policies
share.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from fractions import Fraction
from itertools import pairwise
from types import MappingProxyType

from joulie.api.enums import Profile
from joulie.core.policies.base import Plan, PlanNode

__all__ = [
    "family_split",
    "fraction_of",
    "partition_plan",
    "performance_set",
    "round_half_up",
    "unique_names",
]


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


def fraction_of(n: int, frac: float, what: str) -> int:
    if n < 0:
        raise ValueError(f"node count is negative ({n})")
    return round_half_up(n * _exact_fraction(frac, what))


# -- the split ------------------------------------------------------------------------------------


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


def unique_names(nodes: Sequence[PlanNode]) -> list[str]:
    """Node names in name order; a name listed twice is the caller's bug, not a tie to break."""
    names = sorted(node.name for node in nodes)
    for before, after in pairwise(names):
        if before == after:
            raise ValueError(f"node {after!r} is listed twice")
    return names


def _families(nodes: Sequence[PlanNode]) -> dict[str, list[PlanNode]]:
    unique_names(nodes)
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


def partition_plan(nodes: Sequence[PlanNode], hp_count: int, provenance: str) -> Plan:
    """Every node's profile when ``hp_count`` nodes are asked for in performance."""
    chosen = performance_set(nodes, hp_count)
    profiles = {
        name: Profile.PERFORMANCE if name in chosen else Profile.ECO for name in unique_names(nodes)
    }
    return Plan(MappingProxyType(profiles), hp_count, len(chosen), provenance)
