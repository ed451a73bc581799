"""The energy of each PodGroup (gang) the accounts have seen lately: used, saved and lost per
``<namespace>/<podgroup>``, beside the per-class accounts of :mod:`joulie.manager.energy`.

PodGroups come and go with their jobs, so a cap that folded new ones into ``other`` (as the
class accounts do) would soon hold only old groups. Instead the table keeps the groups booked
most recently: past ENERGY_PODGROUPS_MAX, the group booked longest ago is dropped, and with it
its metric series (a finished job's series stops; its last value was scraped). The ConfigMap
keeps the same groups, so a new leader continues them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from prometheus_client import REGISTRY, CollectorRegistry, Counter

__all__ = ["GroupAccounts", "GroupCounters", "GroupTotals"]

KINDS: Final = ("used", "saved", "lost")


@dataclass(frozen=True)
class GroupCounters:
    used: Counter
    saved: Counter
    lost: Counter

    @classmethod
    def registered(cls, registry: CollectorRegistry) -> GroupCounters:
        what = {
            "used": "Measured node energy attributed to the pods of a PodGroup",
            "saved": "Energy the pods of a PodGroup would have drawn more uncontrolled",
            "lost": "Energy Joulie's controls cost the pods of a PodGroup",
        }
        return cls(
            *(
                Counter(
                    f"joulie_podgroup_energy_{'' if kind == 'used' else kind + '_'}joules_total",
                    what[kind],
                    ["namespace", "podgroup"],
                    registry=registry,
                )
                for kind in KINDS
            )
        )

    def of(self, kind: str) -> Counter:
        counter: Counter = getattr(self, kind)
        return counter


_COUNTERS: Final = GroupCounters.registered(REGISTRY)

GroupTotals = tuple[float, float, float]
"""Joules used, saved and lost."""


class GroupAccounts:
    """The most recently booked PodGroups' totals, oldest first."""

    def __init__(self, max_groups: int, counters: GroupCounters | None = None) -> None:
        self._max = max_groups
        self._counters = counters if counters is not None else _COUNTERS
        self._totals: dict[str, list[float]] = {}

    def items(self) -> list[tuple[str, GroupTotals]]:
        """``(namespace/podgroup, (used, saved, lost))``, booked longest ago first."""
        return [(key, (t[0], t[1], t[2])) for key, t in self._totals.items()]

    def add(self, group: str, kind: str, joules: float) -> None:
        """Book ``joules`` (> 0) of ``kind`` to ``group`` ("<namespace>/<podgroup>") and make it
        the most recent."""
        if joules <= 0:
            return
        totals = self._totals.pop(group, None)
        if totals is None:
            totals = [0.0, 0.0, 0.0]
        self._totals[group] = totals  # re-inserted: now the most recent
        totals[KINDS.index(kind)] += joules
        namespace, _, name = group.partition("/")
        self._counters.of(kind).labels(namespace, name).inc(joules)
        while len(self._totals) > self._max:
            self._drop(next(iter(self._totals)))

    def restore(self, stored: Iterable[tuple[str, GroupTotals]]) -> None:
        """Raise each stored group to at least its stored totals, in the stored order (oldest
        first), ahead of any group this process booked itself."""
        mine = dict(self._totals)
        self._totals.clear()
        for group, values in stored:
            have = mine.pop(group, [0.0, 0.0, 0.0])
            self._totals[group] = have
            for kind, value in zip(KINDS, values, strict=True):
                self.add(group, kind, value - have[KINDS.index(kind)])
        for group, totals in mine.items():
            self._totals[group] = totals
        while len(self._totals) > self._max:
            self._drop(next(iter(self._totals)))

    def _drop(self, group: str) -> None:
        del self._totals[group]
        namespace, _, name = group.partition("/")
        for kind in KINDS:
            with contextlib.suppress(KeyError):  # never booked that kind: no series
                self._counters.of(kind).remove(namespace, name)
