"""Every known node's score terms in numpy columns, to score thousands of nodes for one pod at
once (kube-scheduler's prioritize calls) and to refuse them for a performance pod (filter).

The arithmetic is :mod:`joulie.core.scoring`'s, evaluated over arrays in the same order, so each
node gets exactly the score :func:`joulie.core.scoring.score` gives it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, Final, cast

import numpy as np
import numpy.typing as npt

from joulie.api.enums import SchedulableClass
from joulie.core.pod_power import (
    DEFAULT_COEFFICIENTS,
    MarginalCoefficients,
    PodDemand,
    gpu_coefficient,
    memory_factor,
)
from joulie.core.scoring import (
    COOLING_WEIGHT,
    ECO_BONUS,
    HEADROOM_WEIGHT,
    MAX_EXTENDER_PRIORITY,
    MAX_SCORE,
    NEUTRAL_SCORE,
    PRESSURE_RELIEF_WEIGHT,
    TREND_BONUS_LIMIT,
    ClusterTerms,
    FloatArray,
    NodeTerms,
    cluster_from,
    extender_priority,
    filter_reason,
    score_breakdown,
)

_FLOAT_COLUMNS: Final = (
    "capped",
    "measured",
    "headroom",
    "cooling",
    "trend",
    "cores_div",
    "cpu_max",
    "gpu_max",
)
_BOOL_COLUMNS: Final = ("fresh", "has_measurement", "eco", "performance", "draining")
_KEPT_OFF_REASONS: Final = np.array(
    [
        None,
        filter_reason(True, SchedulableClass.ECO, None),
        filter_reason(True, SchedulableClass.DRAINING, None),
    ],
    dtype=object,
)
"""A performance pod's filter reason by ``eco + 2 x draining``."""
_REMEMBERED_LISTS: Final = 4


class ScoreTable:
    """Every known node's terms in numpy columns, to score many nodes for one pod at once.

    Pure and synchronous: the extender's informer handlers call :meth:`set` and :meth:`remove`
    when a node's twin or hardware changes; its request handlers call :meth:`priorities`. The
    cluster terms are recomputed lazily, on the first request after a change.

    Row 0 is a permanent unknown node (neutral), so a name the table does not hold is looked up
    as row 0 without a branch. Removing a node moves the last row into its place.

    Looking up thousands of names is most of a request's cost, and kube-scheduler often asks
    about the same list again (see :class:`joulie.extender.wire.NameLists`, which hands over the
    same tuple for it): the rows of the last few tuples are kept, by identity, until a node is
    added or removed.
    """

    def __init__(
        self, coefficients: MarginalCoefficients = DEFAULT_COEFFICIENTS, capacity: int = 64
    ) -> None:
        self._coefficients = coefficients
        self._index: dict[str, int] = {}
        self._names: list[str | None] = [None]
        self._terms: list[NodeTerms | None] = [None]
        self._capacity = max(2, capacity)
        self._float = {name: np.zeros(self._capacity, dtype=np.float64) for name in _FLOAT_COLUMNS}
        self._bool = {name: np.zeros(self._capacity, dtype=np.bool_) for name in _BOOL_COLUMNS}
        self._float["cores_div"][:] = 1.0
        self._cluster: ClusterTerms | None = ClusterTerms()
        self._static: _Static | None = None
        """The pod-independent columns of the score, until a node's terms change."""
        self._layout = 0
        """Changes whenever a name gets or loses a row."""
        self._rows_of: deque[tuple[Sequence[str], int, npt.NDArray[np.intp]]] = deque(
            maxlen=_REMEMBERED_LISTS
        )

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    @property
    def coefficients(self) -> MarginalCoefficients:
        return self._coefficients

    def terms(self, name: str) -> NodeTerms | None:
        """The terms stored for a node (None for a node the table does not hold)."""
        row = self._index.get(name)
        return None if row is None else self._terms[row]

    def set(self, name: str, terms: NodeTerms | None) -> None:
        """Store (or replace) a node's terms; None forgets the node (no twin scores neutral)."""
        if terms is None:
            self.remove(name)
            return
        row = self._index.get(name)
        if row is None:
            row = len(self._names)
            if row == self._capacity:
                self._grow()
            self._index[name] = row
            self._names.append(name)
            self._terms.append(terms)
            self._layout += 1
        else:
            self._terms[row] = terms
        self._write(row, terms)
        self._cluster = None
        self._static = None

    def remove(self, name: str) -> None:
        """Forget a node; a name the table does not hold is ignored."""
        row = self._index.pop(name, None)
        if row is None:
            return
        last = len(self._names) - 1
        if row != last:
            moved = self._names[last]
            assert moved is not None  # rows past 0 always hold a name
            self._names[row] = moved
            self._terms[row] = self._terms[last]
            self._index[moved] = row
            for column in (*self._float.values(), *self._bool.values()):
                column[row] = column[last]
        self._names.pop()
        self._terms.pop()
        self._clear(last)
        self._cluster = None
        self._static = None
        self._layout += 1

    def cluster(self) -> ClusterTerms:
        """The cluster terms over every stored node (equal to :func:`cluster_terms` of them)."""
        if self._cluster is None:
            n = len(self._names)
            fresh = self._bool["fresh"][:n]
            perf = fresh & self._bool["performance"][:n]
            measured = fresh & self._bool["has_measurement"][:n]
            pressures = (100.0 - self._float["headroom"][:n][perf]).tolist()
            trends = self._float["trend"][:n][measured].tolist()
            self._cluster = cluster_from(pressures, trends)
        return self._cluster

    def rows(self, names: Sequence[str]) -> npt.NDArray[np.intp]:
        """Each name's row (0 for a name the table does not hold); read-only."""
        for listed, layout, rows in self._rows_of:
            if listed is names and layout == self._layout:
                return rows
        rows = np.fromiter(
            map(self._index.get, names, repeat(0, len(names))), dtype=np.intp, count=len(names)
        )
        rows.flags.writeable = False
        if isinstance(names, tuple):  # immutable, so the same object is the same names
            self._rows_of.appendleft((names, self._layout, rows))
        return rows

    def filter_reasons(self, names: Sequence[str]) -> list[str | None]:
        """:func:`filter_reason` of a performance pod for each named node by its twin class alone
        (None where the table holds no class that keeps it off)."""
        rows = self.rows(names)
        code = self._bool["eco"][rows].astype(np.intp) + 2 * self._bool["draining"][rows]
        return cast(list[str | None], _KEPT_OFF_REASONS[code].tolist())

    def scores(self, demand: PodDemand, names: Sequence[str]) -> FloatArray:
        """The score (0-100) of each named node for the pod; unknown names score neutral."""
        return self._all_scores(demand)[self.rows(names)]

    def priorities(self, demand: PodDemand, names: Sequence[str]) -> list[int]:
        """kube-scheduler priorities (0..10, see :func:`extender_priority`), one per name."""
        return cast(list[int], self.priority_array(demand, names).tolist())

    def priority_array(self, demand: PodDemand, names: Sequence[str]) -> npt.NDArray[np.intp]:
        """:meth:`priorities` as an array."""
        values = self.scores(demand, names)
        rounded = np.clip(np.floor(values / 10.0 + 0.5), 0, MAX_EXTENDER_PRIORITY)
        return rounded.astype(np.intp)

    def explain(self, demand: PodDemand, name: str) -> dict[str, Any]:
        """Every term of one node's score for the pod, as JSON-ready values."""
        terms = self.terms(name)
        cluster = self.cluster()
        parts = score_breakdown(demand, terms, cluster, self._coefficients)
        power = terms.power if terms is not None else None
        return {
            "node": name,
            "known": terms is not None,
            "schedulableClass": (
                str(terms.schedulable_class)
                if terms is not None and terms.schedulable_class is not None
                else None
            ),
            "fresh": terms.fresh if terms is not None else False,
            "neutralBecause": parts.neutral,
            "pod": {
                "cpuCores": demand.cpu_cores,
                "memoryGiB": demand.memory_gib,
                "gpus": demand.gpus,
                "performance": demand.performance,
            },
            "measuredPowerW": terms.measured_w if terms is not None else None,
            "cappedPowerW": terms.capped_w if terms is not None else None,
            "twinHeadroomScore": terms.headroom_score if terms is not None else None,
            "coolingStress": terms.cooling_stress if terms is not None else None,
            "powerTrendWPerMin": terms.trend_w_per_min if terms is not None else None,
            "powerProfile": (
                {
                    "cores": power.cores,
                    "cpuMaxWatts": power.cpu_max_watts,
                    "hasGpu": power.has_gpu,
                    "gpuMaxWatts": power.gpu_max_watts,
                }
                if power is not None
                else None
            ),
            "podMarginalW": parts.marginal_w,
            "headroom": parts.headroom,
            "headroomSource": parts.headroom_source or None,
            "baseScore": parts.base,
            "trendBonus": parts.trend_bonus,
            "trendScale": cluster.trend_scale,
            "clusterMeanTrendWPerMin": cluster.mean_trend_w_per_min,
            "profileBonus": parts.profile_bonus,
            "pressureRelief": parts.pressure_relief,
            "perfPressure": cluster.perf_pressure,
            "score": parts.score,
            "priority": extender_priority(parts.score),
        }

    # --- internals ---

    def _grow(self) -> None:
        # Doubling: the new rows are zero, i.e. unknown nodes, as _clear leaves a row.
        self._capacity *= 2
        for name in list(self._float):
            values = self._float[name]
            self._float[name] = np.concatenate((values, np.zeros_like(values)))
        for name in list(self._bool):
            flags = self._bool[name]
            self._bool[name] = np.concatenate((flags, np.zeros_like(flags)))
        self._float["cores_div"][len(self._names) :] = 1.0

    def _write(self, row: int, terms: NodeTerms) -> None:
        f, b = self._float, self._bool
        power = terms.power
        f["capped"][row] = terms.capped_w
        f["measured"][row] = terms.measured_w
        f["headroom"][row] = terms.headroom_score
        f["cooling"][row] = terms.cooling_stress
        f["trend"][row] = terms.trend_w_per_min
        # A node without a profile adds 0 W: a CPU maximum of 0 makes its marginal watts 0.
        f["cores_div"][row] = max(1, power.cores) if power is not None else 1
        f["cpu_max"][row] = power.cpu_max_watts if power is not None else 0.0
        f["gpu_max"][row] = power.gpu_max_watts if power is not None and power.has_gpu else 0.0
        b["fresh"][row] = terms.fresh
        b["has_measurement"][row] = terms.has_measurement
        b["eco"][row] = terms.schedulable_class == SchedulableClass.ECO
        b["performance"][row] = terms.schedulable_class == SchedulableClass.PERFORMANCE
        b["draining"][row] = terms.schedulable_class == SchedulableClass.DRAINING

    def _clear(self, row: int) -> None:
        for values in self._float.values():
            values[row] = 0.0
        for flags in self._bool.values():
            flags[row] = False
        self._float["cores_div"][row] = 1.0

    def _static_parts(self) -> _Static:
        """What every request's scores share, kept until a node's terms change: most requests
        come between two twin updates."""
        if self._static is None:
            n = len(self._names)
            f, b = self._float, self._bool
            cluster = self.cluster()
            capped = f["capped"][:n]
            budgeted = capped > 0.0
            trend = f["trend"][:n]
            bonus = np.where(
                trend == 0.0,
                0.0,
                -np.clip(trend / cluster.trend_scale, -TREND_BONUS_LIMIT, TREND_BONUS_LIMIT),
            )
            # What a standard pod adds: the eco bonus, or the pressure relief (x + 0.0 == x,
            # and x + -c == x - c, so adding this column is the scalar expression exactly).
            standard = np.where(b["eco"][:n], ECO_BONUS, 0.0)
            standard = np.where(
                b["performance"][:n], -(PRESSURE_RELIEF_WEIGHT * cluster.perf_pressure), standard
            )
            self._static = _Static(
                capped=capped,
                budgeted=budgeted,
                safe_capped=np.where(budgeted, capped, 1.0),
                cooling=(MAX_SCORE - f["cooling"][:n]) * COOLING_WEIGHT,
                bonus=bonus,
                standard=standard,
            )
        return self._static

    def _all_scores(self, demand: PodDemand) -> FloatArray:
        """Scores of rows 0..n-1, the expression of :func:`score_breakdown` over columns."""
        n = len(self._names)
        f, b = self._float, self._bool
        coefficients = self._coefficients
        static = self._static_parts()
        share = np.minimum(np.maximum(demand.cpu_cores / f["cores_div"][:n], 0.0), 1.0)
        marginal = (
            f["cpu_max"][:n] * coefficients.cpu_util * share * memory_factor(demand.memory_gib)
        )
        if demand.gpus > 0:
            gpu = demand.gpus * f["gpu_max"][:n] * gpu_coefficient(demand.performance, coefficients)
            marginal = marginal + gpu
        # A budget of a tiny fraction of a watt overflows to -inf/inf here exactly as the scalar
        # division does in Python (no warning there); the clamp below maps it to 0 or 100.
        with np.errstate(over="ignore"):
            projected = np.minimum(
                MAX_SCORE,
                (static.capped - (f["measured"][:n] + marginal)) / static.safe_capped * 100.0,
            )
        headroom = np.where(static.budgeted, projected, f["headroom"][:n])
        value = headroom * HEADROOM_WEIGHT + static.cooling + static.bonus
        if not demand.performance:
            value = value + static.standard
        value = np.minimum(np.maximum(value, 0.0), MAX_SCORE)
        result: FloatArray = np.where(b["fresh"][:n], value, NEUTRAL_SCORE)
        return result


@dataclass(frozen=True, slots=True)
class _Static:
    capped: FloatArray
    budgeted: npt.NDArray[np.bool_]
    safe_capped: FloatArray
    cooling: FloatArray
    """(100 - cooling stress) x the cooling weight."""
    bonus: FloatArray
    """The trend bonus."""
    standard: FloatArray
    """What a standard pod's score gains (eco bonus) or loses (pressure relief)."""
