"""Every known node's score terms in numpy columns, to score thousands of nodes for one pod at
once (kube-scheduler's prioritize calls) and to refuse them for a performance pod (filter).

The arithmetic is :mod:`joulie.core.scoring`'s, evaluated over arrays in the same order, so each
node gets exactly the score :func:`joulie.core.scoring.score` gives it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from operator import itemgetter
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
_REMEMBERED_DEMANDS: Final = 8
"""Pod demands whose priorities over every row are kept until a node's terms change."""


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
    added or removed. A list the table has not seen is looked up in a copy of the index made
    for lookups (:meth:`_lookup_index`).
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
        self._kinds: _Kinds | None = None
        """The distinct power profiles of the rows, until a row's profile changes."""
        self._layout = 0
        """Changes whenever a name gets or loses a row."""
        self._lookup = _RowIndex()
        """``_index`` as :meth:`_lookup_index` copied it, for the layout ``_lookup_layout``."""
        self._lookup_layout = -1
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
        if row is None:
            return None
        terms = self._terms[row]
        assert terms is not None  # rows past 0 always hold terms
        trend = float(self._float["trend"][row])
        # set_trend moves only the column: the stored terms catch up when read.
        return terms if terms.trend_w_per_min == trend else replace(terms, trend_w_per_min=trend)

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
            self._kinds = None
        else:
            self._terms[row] = terms
        self._write(row, terms)
        self._cluster = None
        self._static = None

    def set_trend(self, name: str, trend_w_per_min: float) -> None:
        """Replace only the power trend of a node the table holds (the one figure that moves
        at every reconcile while a node's power moved lately): one column written."""
        self._float["trend"][self._index[name]] = trend_w_per_min
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
        self._kinds = None
        self._layout += 1

    def cluster(self) -> ClusterTerms:
        """The cluster terms over every stored node (equal to :func:`cluster_terms` of them)."""
        if self._cluster is None:
            n = len(self._names)
            fresh = self._bool["fresh"][:n]
            perf = fresh & self._bool["performance"][:n]
            measured = fresh & self._bool["has_measurement"][:n]
            pressures = (100.0 - self._float["headroom"][:n][perf]).tolist()
            trends = self._float["trend"][:n][measured]
            # Zeros (every quiet node's trend) add nothing to the exact sum: only the moving
            # trends are summed, the mean still taken over every measured node.
            self._cluster = cluster_from(
                pressures, trends[trends != 0.0].tolist(), trend_count=trends.size
            )
        return self._cluster

    def rows(self, names: Sequence[str]) -> npt.NDArray[np.intp]:
        """Each name's row (0 for a name the table does not hold); read-only."""
        for listed, layout, rows in self._rows_of:
            if listed is names and layout == self._layout:
                return rows
        index = self._lookup_index()
        count = len(names)
        # One C call for every name (itemgetter with a key per name; a missing name is row 0 by
        # _RowIndex.__missing__): a third less time than a map over index.get, which calls a
        # method per name (bench.prioritize, 5,000 new names: 0.91 -> 0.63 ms, p50 of 300).
        found = itemgetter(*names)(index) if count > 1 else [index[n] for n in names]
        rows = np.fromiter(found, dtype=np.intp, count=count)
        rows.flags.writeable = False
        if isinstance(names, tuple):  # immutable, so the same object is the same names
            self._rows_of.appendleft((names, self._layout, rows))
        return rows

    def checked_rows(self, names: Sequence[Any]) -> npt.NDArray[np.intp] | None:
        """:meth:`rows` of a list as it arrived, when every name is a non-empty str given once;
        None when one is not, or when the table cannot tell (it holds an empty name).

        Names it holds are told apart by their rows, so only the names it does not hold are
        checked one by one: a request's list need not go into a set of its own first
        (bench.prioritize, 5,000 new names: 0.3-0.45 ms less per request). A tuple's rows are
        kept as :meth:`rows` keeps them, for the scores asked next."""
        if "" in self._index:
            return None
        try:
            rows = self.rows(names)
        except TypeError:  # an unhashable item
            return None
        known = rows[rows != 0]
        if known.size and int(np.bincount(known).max()) > 1:
            return None
        unknown = np.flatnonzero(rows == 0).tolist()
        if unknown:
            others = [names[i] for i in unknown]
            if not all(type(name) is str for name in others):
                return None
            distinct = set(others)
            if "" in distinct or len(distinct) != len(others):
                return None
        return rows

    def unclassified(self, names: Sequence[str]) -> list[int]:
        """The positions in ``names`` of the nodes the table holds no class for (no twin, or a
        twin without ``schedulableClass``): the only ones a class-less rule, such as the eco
        label's, still has to look at."""
        b = self._bool
        classified = b["eco"] | b["performance"] | b["draining"]
        positions: list[int] = np.flatnonzero(~classified[self.rows(names)]).tolist()
        return positions

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
        return self._all_priorities(demand)[self.rows(names)]

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

    def _lookup_index(self) -> _RowIndex:
        """Name to row, for looking up many names: a copy of ``_index`` made after a node was
        added or removed, so that its keys and rows lie side by side in memory.

        A request's names are new str objects, so each lookup compares against the stored key
        and reads its row: two reads of objects the informers made one by one, scattered over
        the heap, which the rest of the request has pushed out of the CPU caches. Copies made
        in one go are packed together (bench.prioritize, 5,000 new names, the same requests in
        turn: the lookup 1.52 -> 1.37 ms, the request 3.48 -> 3.27 ms of CPU, p50 of 300 on the
        busy development VM). Rows change only with the layout, so the copy is exact until the
        next node is added or removed; making it takes about a millisecond at 5,000 nodes, and
        it holds one more copy of the names (about 0.6 MiB at 5,000 nodes)."""
        if self._lookup_layout != self._layout:
            names = cast(list[str], self._names[1:])
            joined = "\0".join(names)
            copies = joined.split("\0") if joined.count("\0") == len(names) - 1 else names
            self._lookup = _RowIndex(zip(copies, range(1, len(names) + 1), strict=True))
            self._lookup_layout = self._layout
        return self._lookup

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
        cores_div = max(1, power.cores) if power is not None else 1
        cpu_max = power.cpu_max_watts if power is not None else 0.0
        gpu_max = power.gpu_max_watts if power is not None and power.has_gpu else 0.0
        if (f["cores_div"][row], f["cpu_max"][row], f["gpu_max"][row]) != (
            cores_div,
            cpu_max,
            gpu_max,
        ):
            self._kinds = None
        f["cores_div"][row] = cores_div
        f["cpu_max"][row] = cpu_max
        f["gpu_max"][row] = gpu_max
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
        come between two twin updates. One matrix of float columns and one of flags, so that
        the parts of a few rows are gathered in two operations (:meth:`scores_at`)."""
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
            # Row-major (a node's parts side by side): gathering a few nodes copies whole
            # rows, several times faster than picking them out of each column.
            floats = np.empty((n, len(_STATIC_FLOATS)))
            columns = floats.T
            columns[_CAPPED] = capped
            columns[_MEASURED] = f["measured"][:n]
            columns[_SAFE_CAPPED] = np.where(budgeted, capped, 1.0)
            columns[_HEADROOM] = f["headroom"][:n]
            columns[_COOLING] = (MAX_SCORE - f["cooling"][:n]) * COOLING_WEIGHT
            columns[_BONUS] = bonus
            columns[_STANDARD] = standard
            flags = np.empty((n, 2), dtype=np.bool_)
            flags.T[_BUDGETED] = budgeted
            flags.T[_FRESH] = b["fresh"][:n]
            self._static = _Static(floats, flags, bool(budgeted.all()), bool(b["fresh"][:n].all()))
        return self._static

    def _kinds_of_rows(self) -> _Kinds:
        """The rows' distinct power profiles (a pod's marginal watts depend on nothing else):
        thousands of nodes are a handful of hardware kinds, so the marginal watts are worked
        out per kind and spread to the rows in one gather."""
        if self._kinds is None:
            n = len(self._names)
            f = self._float
            profiles = np.column_stack(
                (
                    f["cores_div"][:n],
                    # The scalar expression multiplies the CPU maximum by the coefficient first.
                    f["cpu_max"][:n] * self._coefficients.cpu_util,
                    f["gpu_max"][:n],
                )
            )
            kinds, of_row = np.unique(profiles, axis=0, return_inverse=True)
            self._kinds = _Kinds(np.ascontiguousarray(kinds.T), of_row.reshape(-1).astype(np.intp))
        return self._kinds

    def _all_scores(self, demand: PodDemand) -> FloatArray:
        """Scores of rows 0..n-1, the expression of :func:`score_breakdown` over columns."""
        static = self._static_parts()
        kinds = self._kinds_of_rows()
        return self._scores_of(demand, static, static.floats.T, static.flags.T, kinds.of_row)

    def _all_priorities(self, demand: PodDemand) -> npt.NDArray[np.intp]:
        """Every row's priority for the pod, kept with the static parts for the last few
        demands: kube-scheduler asks about pod after pod of the same Job, and between two twin
        updates their priorities are the same array (priorities are per row, so those of every
        row gathered equal those of the gathered rows). Saves 0.2-0.3 ms of arithmetic per
        request at 5,000 nodes (bench.prioritize --stages)."""
        static = self._static_parts()
        kept = static.priorities.get(demand)
        if kept is None:
            if len(static.priorities) >= _REMEMBERED_DEMANDS:
                static.priorities.clear()
            kept = _priorities(self._all_scores(demand))
            kept.flags.writeable = False
            static.priorities[demand] = kept
        return kept

    def scores_at(self, demand: PodDemand, rows: npt.NDArray[np.intp]) -> FloatArray:
        """The scores of the given rows (:meth:`rows`) only: cheaper than every node's when
        they are few (a placement that already knows which nodes fit)."""
        static = self._static_parts()
        kinds = self._kinds_of_rows()
        return self._scores_of(
            demand,
            static,
            static.floats.take(rows, axis=0).T,
            static.flags.take(rows, axis=0).T,
            kinds.of_row.take(rows),
        )

    def priorities_at(self, demand: PodDemand, rows: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
        """:meth:`priority_array` of the given rows (:meth:`rows`)."""
        return _priorities(self.scores_at(demand, rows))

    def _scores_of(
        self,
        demand: PodDemand,
        static: _Static,
        floats: FloatArray,
        flags: npt.NDArray[np.bool_],
        kind_of: npt.NDArray[np.intp],
    ) -> FloatArray:
        """The scores of the rows whose static parts are ``floats`` and ``flags`` (columns)
        and whose power profiles are ``kind_of`` (rows of :meth:`_kinds_of_rows`)."""
        # Operation for operation the scalar expression, written in place (one new array per
        # step would double the cost of a request on thousands of nodes).
        coefficients = self._coefficients
        kinds = self._kinds_of_rows().profiles
        per_kind = demand.cpu_cores / kinds[_CORES_DIV]  # the pod's share of the cores
        np.maximum(per_kind, 0.0, out=per_kind)
        np.minimum(per_kind, 1.0, out=per_kind)
        np.multiply(kinds[_CPU_WATTS], per_kind, out=per_kind)
        per_kind *= memory_factor(demand.memory_gib)
        if demand.gpus > 0:
            gpu = demand.gpus * kinds[_GPU_MAX]
            gpu *= gpu_coefficient(demand.performance, coefficients)
            per_kind += gpu
        marginal = per_kind.take(kind_of)
        projected = np.add(floats[_MEASURED], marginal, out=marginal)
        np.subtract(floats[_CAPPED], projected, out=projected)
        # A budget of a tiny fraction of a watt overflows to -inf/inf here exactly as the scalar
        # division does in Python (no warning there); the clamp below maps it to 0 or 100.
        with np.errstate(over="ignore"):
            projected /= floats[_SAFE_CAPPED]
            projected *= 100.0
        np.minimum(projected, MAX_SCORE, out=projected)
        # The headroom (where every row has a budget, the projection is it: no selection).
        value = (
            projected
            if static.all_budgeted
            else np.where(flags[_BUDGETED], projected, floats[_HEADROOM])
        )
        value *= HEADROOM_WEIGHT
        value += floats[_COOLING]
        value += floats[_BONUS]
        if not demand.performance:
            value += floats[_STANDARD]
        np.maximum(value, 0.0, out=value)
        np.minimum(value, MAX_SCORE, out=value)
        result: FloatArray = (
            value if static.all_fresh else np.where(flags[_FRESH], value, NEUTRAL_SCORE)
        )
        return result


class _RowIndex(dict[str, int]):
    """Name to row; a name it does not hold is row 0 (the unknown node)."""

    def __missing__(self, name: str) -> int:
        return 0


def _priorities(values: FloatArray) -> npt.NDArray[np.intp]:
    """Scores as kube-scheduler priorities (:func:`extender_priority` over an array)."""
    rounded = values / 10.0
    rounded += 0.5
    np.floor(rounded, out=rounded)
    np.maximum(rounded, 0, out=rounded)
    np.minimum(rounded, MAX_EXTENDER_PRIORITY, out=rounded)
    return rounded.astype(np.intp)


_STATIC_FLOATS: Final = (
    "capped",
    "measured",
    "safe_capped",
    "headroom",
    "cooling",
    "bonus",
    "standard",
)
_CAPPED, _MEASURED, _SAFE_CAPPED, _HEADROOM, _COOLING, _BONUS, _STANDARD = range(7)
_BUDGETED, _FRESH = 0, 1
_CORES_DIV, _CPU_WATTS, _GPU_MAX = 0, 1, 2
"""Columns of a power profile (:class:`_Kinds`)."""


@dataclass(frozen=True, slots=True)
class _Static:
    floats: FloatArray
    """Per node (a row): capped budget, measured power, the budget or 1 where there is none
    (a safe divisor), the twin's headroom, (100 - cooling stress) x the cooling weight, the
    trend bonus, and what a standard pod's score gains (eco bonus) or loses (pressure
    relief)."""
    flags: npt.NDArray[np.bool_]
    """Per node: whether the node has a capped budget, whether its twin is fresh."""
    all_budgeted: bool
    all_fresh: bool
    priorities: dict[PodDemand, npt.NDArray[np.intp]] = field(default_factory=dict)
    """Every row's priority by pod demand (:meth:`ScoreTable._all_priorities`): as long as
    these static parts, since any change to a node's terms replaces them."""


@dataclass(frozen=True, slots=True)
class _Kinds:
    profiles: FloatArray
    """Per distinct power profile (columns): the logical-CPU divisor, the CPU maximum x the
    CPU coefficient, the GPU maximum."""
    of_row: npt.NDArray[np.intp]
    """Each row's profile."""
