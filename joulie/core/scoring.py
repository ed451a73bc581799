"""The scheduler extender's decisions: which nodes a pod may not use (filter) and how much the
remaining ones are preferred (score), from each node's NodeTwin and NodeHardware status.

Filter: a performance pod is kept off nodes whose twin class is ``eco`` or ``draining`` (the
downgrade guard drains a node by declaring it ``draining``, so no new performance work lands on
it); without a twin class, a ``joulie.io/power-profile=eco`` label keeps it off too. Standard pods
and nodes Joulie knows nothing about always pass.

Score, 0-100, per node (a node without a twin, or with one that is not fresh, scores a neutral 50):

* headroom: the node's capped budget left after its measured draw and this pod's marginal watts
  (:mod:`joulie.core.pod_power`), in percent, at most 100 and negative when over budget; the
  twin's own ``predictedPowerHeadroomScore`` when the budget is unknown;
* ``headroom x 0.7 + (100 - coolingStress) x 0.15 + trend bonus``, where the trend bonus is
  ``-(trend / scale)`` bounded to +/-25 points (falling power is preferred) and the scale is 2
  while the cluster as a whole ramps faster than 500 W/min, else 6;
* a standard pod gets +10 on an eco node (eco capacity is for it) and loses 0.3 x the cluster's
  performance pressure on a performance node (it leaves room for performance pods when the
  performance nodes are busy); a performance pod gets neither;
* clamped to 0-100.

The work is split by how often its inputs change. :class:`NodeTerms` holds what one node
contributes independently of any pod and is built once per twin or hardware change;
:class:`ClusterTerms` aggregates over all nodes; :func:`score` combines them with one pod.
:class:`ScoreTable` does the same for many nodes at once over numpy arrays, for kube-scheduler's
prioritize calls, and returns exactly what :func:`score` returns for each node.

Decisions where the sources are silent or disagree:

* The cluster trend is the *mean* trend of the fresh twins that carry a power measurement.
  Upstream sums them although its comment says average; a sum would cross 500 W/min on any
  large cluster and pin the scale at 2.
* Cluster means are computed with ``math.fsum``: exactly rounded, so they do not depend on the
  order of the nodes, and the table and the scalar path agree to the bit.
* A twin status with neither a capped budget nor a headroom score has nothing to rank by and is
  treated as not fresh (neutral). A missing cooling stress reads 0, a missing trend 0.
* The twin class, when there is one, decides the filter; the ``power-profile`` label is only the
  fallback for a node without a twin class (upstream also let an ``eco`` label override a
  ``performance`` twin class). The filter does not look at freshness: a stale twin still says
  what the node was last made.
* Scores stay floats; the only rounding is :func:`extender_priority` (upstream truncated its
  0-100 score to an integer, so its pinned ``69`` is our 69.5, priority 7).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, Final, cast

import numpy as np
import numpy.typing as npt

from joulie.api.enums import Profile, SchedulableClass
from joulie.api.nodehardware import NodeHardwareStatus
from joulie.api.nodetwin import NodeTwinStatus
from joulie.core.pod_power import (
    DEFAULT_COEFFICIENTS,
    MarginalCoefficients,
    NodePowerProfile,
    PodDemand,
    gpu_coefficient,
    marginal_watts,
    memory_factor,
    node_power_profile,
)

__all__ = [
    "COOLING_WEIGHT",
    "ECO_BONUS",
    "HEADROOM_WEIGHT",
    "MAX_EXTENDER_PRIORITY",
    "NEUTRAL_SCORE",
    "PRESSURE_RELIEF_WEIGHT",
    "TREND_BONUS_LIMIT",
    "TREND_FAST_W_PER_MIN",
    "TREND_SCALE_FAST",
    "TREND_SCALE_NORMAL",
    "ClusterTerms",
    "NodeTerms",
    "ScoreBreakdown",
    "ScoreTable",
    "cluster_terms",
    "extender_priority",
    "filter_reason",
    "node_terms",
    "score",
    "score_breakdown",
]

NEUTRAL_SCORE: Final = 50.0
HEADROOM_WEIGHT: Final = 0.7
COOLING_WEIGHT: Final = 0.15
TREND_BONUS_LIMIT: Final = 25.0
TREND_FAST_W_PER_MIN: Final = 500.0
TREND_SCALE_FAST: Final = 2.0
TREND_SCALE_NORMAL: Final = 6.0
ECO_BONUS: Final = 10.0
PRESSURE_RELIEF_WEIGHT: Final = 0.3
MAX_SCORE: Final = 100.0
MAX_EXTENDER_PRIORITY: Final = 10
"""kube-scheduler's MaxExtenderPriority: extender scores are expected in 0..10."""

_KEPT_OFF: Final = (SchedulableClass.ECO, SchedulableClass.DRAINING)

FloatArray = npt.NDArray[np.float64]


# --- filter -------------------------------------------------------------------------------------


def filter_reason(
    performance_pod: bool,
    schedulable_class: SchedulableClass | None,
    profile_label: str | None,
) -> str | None:
    """Why a pod must not be placed on a node, or None when it may.

    ``schedulable_class`` is the node's NodeTwin ``status.schedulableClass`` (None without a twin
    or without a class in it), ``profile_label`` its ``joulie.io/power-profile`` label (None when
    the label is absent or unknown to the caller). Only performance pods are ever refused.
    """
    if not performance_pod:
        return None
    if schedulable_class is not None:
        if schedulable_class in _KEPT_OFF:
            return f"joulie: performance pods are kept off {schedulable_class} nodes"
        return None
    if profile_label == Profile.ECO:
        return "joulie: performance pods are kept off eco nodes (power-profile label; no twin)"
    return None


# --- per-node terms -----------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeTerms:
    """What one node contributes to every score, independent of the pod being placed."""

    schedulable_class: SchedulableClass | None
    """NodeTwin ``status.schedulableClass``."""
    fresh: bool
    """Whether the twin can be trusted now; a node that is not fresh scores neutral."""
    measured_w: float = 0.0
    """``powerMeasurement.measuredNodePowerW``."""
    capped_w: float = 0.0
    """``powerMeasurement.nodeCappedPowerW``; 0 when unknown."""
    headroom_score: float = 0.0
    """The twin's ``predictedPowerHeadroomScore``: the headroom used when the budget is unknown,
    and this node's part of the cluster's performance pressure."""
    cooling_stress: float = 0.0
    """``predictedCoolingStressScore``, 0-100."""
    trend_w_per_min: float = 0.0
    """``powerMeasurement.powerTrendWPerMin``."""
    has_measurement: bool = False
    """Whether the twin carries a ``powerMeasurement`` block (its trend counts for the cluster)."""
    power: NodePowerProfile | None = None
    """From the node's NodeHardware; None without one (a pod then adds 0 W)."""


def _finite(value: float | None) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def node_terms(
    twin: NodeTwinStatus | None, hardware: NodeHardwareStatus | None, *, fresh: bool
) -> NodeTerms:
    """The pod-independent terms of one node, from its NodeTwin and NodeHardware status.

    ``fresh`` is the caller's verdict on the twin (see :func:`joulie.core.twin.twin_is_fresh`).
    Non-finite figures count as missing.
    """
    measurement = twin.power_measurement if twin is not None else None
    measured = capped = trend = 0.0
    if measurement is not None:
        measured = _finite(measurement.measured_node_power_w) or 0.0
        capped = max(0.0, _finite(measurement.node_capped_power_w) or 0.0)
        trend = _finite(measurement.power_trend_w_per_min) or 0.0
    headroom = _finite(twin.predicted_power_headroom_score) if twin is not None else None
    if headroom is None and capped > 0.0:
        headroom = min(MAX_SCORE, (capped - measured) / capped * 100.0)
    cooling = _finite(twin.predicted_cooling_stress_score) if twin is not None else None
    return NodeTerms(
        schedulable_class=twin.schedulable_class if twin is not None else None,
        fresh=fresh and headroom is not None,
        measured_w=measured,
        capped_w=capped,
        headroom_score=headroom if headroom is not None else 0.0,
        cooling_stress=min(max(cooling or 0.0, 0.0), MAX_SCORE),
        trend_w_per_min=trend,
        has_measurement=measurement is not None,
        power=node_power_profile(hardware),
    )


# --- cluster terms ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterTerms:
    """What the whole cluster contributes to every score."""

    perf_pressure: float = 0.0
    """Mean of (100 - headroom score) over fresh performance-class twins; 0 without any."""
    trend_scale: float = TREND_SCALE_NORMAL
    """Divisor of a node's trend in its trend bonus."""
    mean_trend_w_per_min: float = 0.0
    """Mean trend over fresh twins with a power measurement (what chose the scale)."""


def _cluster(pressures: list[float], trends: list[float]) -> ClusterTerms:
    pressure = math.fsum(pressures) / len(pressures) if pressures else 0.0
    mean_trend = math.fsum(trends) / len(trends) if trends else 0.0
    scale = TREND_SCALE_FAST if abs(mean_trend) > TREND_FAST_W_PER_MIN else TREND_SCALE_NORMAL
    return ClusterTerms(pressure, scale, mean_trend)


def cluster_terms(terms: Iterable[NodeTerms]) -> ClusterTerms:
    """The cluster's terms over every node's terms (stale nodes do not count).

    Performance pressure is the mean of ``100 - headroom`` over fresh performance-class nodes.
    The trend scale is 2 when the mean trend of fresh nodes with a measurement exceeds
    500 W/min in magnitude, else 6: upstream sums the trends here though its comment says
    average; we take the mean, so the threshold means the same on 10 nodes as on 5,000.
    """
    pressures: list[float] = []
    trends: list[float] = []
    for node in terms:
        if not node.fresh:
            continue
        if node.schedulable_class == SchedulableClass.PERFORMANCE:
            pressures.append(100.0 - node.headroom_score)
        if node.has_measurement:
            trends.append(node.trend_w_per_min)
    return _cluster(pressures, trends)


# --- score --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScoreBreakdown:
    """Every term of one node's score for one pod (the debug view)."""

    score: float
    neutral: str | None
    """Why the node scored neutral ("no twin", "stale twin"), or None."""
    marginal_w: float = 0.0
    headroom: float = 0.0
    headroom_source: str = ""
    """``projected`` (budget minus measured minus marginal) or ``twin`` (its headroom score)."""
    trend_bonus: float = 0.0
    base: float = 0.0
    """headroom x 0.7 + (100 - cooling) x 0.15."""
    profile_bonus: float = 0.0
    pressure_relief: float = 0.0
    """The (non-positive) adjustment of a standard pod on a performance node."""


def _clamp(value: float, low: float, high: float) -> float:
    return min(max(value, low), high)


def score_breakdown(
    demand: PodDemand,
    terms: NodeTerms | None,
    cluster: ClusterTerms,
    coefficients: MarginalCoefficients = DEFAULT_COEFFICIENTS,
) -> ScoreBreakdown:
    """:func:`score` with every term it is made of."""
    if terms is None:
        return ScoreBreakdown(NEUTRAL_SCORE, "no twin")
    if not terms.fresh:
        return ScoreBreakdown(NEUTRAL_SCORE, "stale twin")
    marginal = marginal_watts(demand, terms.power, coefficients)
    if terms.capped_w > 0.0:
        available = terms.capped_w - (terms.measured_w + marginal)
        headroom = min(MAX_SCORE, available / terms.capped_w * 100.0)
        source = "projected"
    else:
        headroom = terms.headroom_score
        source = "twin"
    trend = terms.trend_w_per_min
    bonus = (
        0.0
        if trend == 0.0
        else -_clamp(trend / cluster.trend_scale, -TREND_BONUS_LIMIT, TREND_BONUS_LIMIT)
    )
    # One expression, in the order ScoreTable evaluates it, so both round alike.
    value = headroom * HEADROOM_WEIGHT + (MAX_SCORE - terms.cooling_stress) * COOLING_WEIGHT + bonus
    profile_bonus = relief = 0.0
    if not demand.performance:
        if terms.schedulable_class == SchedulableClass.ECO:
            profile_bonus = ECO_BONUS
            value = value + ECO_BONUS
        elif terms.schedulable_class == SchedulableClass.PERFORMANCE:
            relief = -(PRESSURE_RELIEF_WEIGHT * cluster.perf_pressure)
            value = value - PRESSURE_RELIEF_WEIGHT * cluster.perf_pressure
    return ScoreBreakdown(
        score=_clamp(value, 0.0, MAX_SCORE),
        neutral=None,
        marginal_w=marginal,
        headroom=headroom,
        headroom_source=source,
        trend_bonus=bonus,
        base=headroom * HEADROOM_WEIGHT + (MAX_SCORE - terms.cooling_stress) * COOLING_WEIGHT,
        profile_bonus=profile_bonus,
        pressure_relief=relief,
    )


def score(
    demand: PodDemand,
    terms: NodeTerms | None,
    cluster: ClusterTerms,
    coefficients: MarginalCoefficients = DEFAULT_COEFFICIENTS,
) -> float:
    """How much a pod prefers a node, 0-100 (higher is better); 50 without a fresh twin."""
    return score_breakdown(demand, terms, cluster, coefficients).score


def extender_priority(value: float) -> int:
    """A 0-100 score as the 0..10 priority kube-scheduler expects from an extender.

    kube-scheduler multiplies an extender's priority by its weight and by 10 (MaxNodeScore /
    MaxExtenderPriority) and does not clamp it. Upstream returned its 0-100 score as is, so with
    weight 5 a node could gain 5,000 points against the ~1,200 all default plugins give together:
    the extender alone decided every placement. Dividing by 10 restores the intended balance.
    Rounded half up (69.5 -> 7), clamped to 0..10; a non-finite input is neutral (5).
    """
    if not math.isfinite(value):
        return extender_priority(NEUTRAL_SCORE)
    rounded = math.floor(value / 10.0 + 0.5)
    return min(max(rounded, 0), MAX_EXTENDER_PRIORITY)


# --- many nodes at once -------------------------------------------------------------------------


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
            self._cluster = _cluster(pressures, trends)
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

    def _all_scores(self, demand: PodDemand) -> FloatArray:
        """Scores of rows 0..n-1, the expression of :func:`score_breakdown` over columns."""
        n = len(self._names)
        f, b = self._float, self._bool
        coefficients = self._coefficients
        cluster = self.cluster()
        capped = f["capped"][:n]
        share = np.minimum(np.maximum(demand.cpu_cores / f["cores_div"][:n], 0.0), 1.0)
        marginal = (
            f["cpu_max"][:n] * coefficients.cpu_util * share * memory_factor(demand.memory_gib)
        )
        if demand.gpus > 0:
            gpu = demand.gpus * f["gpu_max"][:n] * gpu_coefficient(demand.performance, coefficients)
            marginal = marginal + gpu
        budgeted = capped > 0.0
        safe_capped = np.where(budgeted, capped, 1.0)
        # A budget of a tiny fraction of a watt overflows to -inf/inf here exactly as the scalar
        # division does in Python (no warning there); the clamp below maps it to 0 or 100.
        with np.errstate(over="ignore"):
            projected = np.minimum(
                MAX_SCORE, (capped - (f["measured"][:n] + marginal)) / safe_capped * 100.0
            )
        headroom = np.where(budgeted, projected, f["headroom"][:n])
        trend = f["trend"][:n]
        bonus = np.where(
            trend == 0.0,
            0.0,
            -np.clip(trend / cluster.trend_scale, -TREND_BONUS_LIMIT, TREND_BONUS_LIMIT),
        )
        value = headroom * HEADROOM_WEIGHT + (MAX_SCORE - f["cooling"][:n]) * COOLING_WEIGHT + bonus
        if not demand.performance:
            value = np.where(b["eco"][:n], value + ECO_BONUS, value)
            value = np.where(
                b["performance"][:n], value - PRESSURE_RELIEF_WEIGHT * cluster.perf_pressure, value
            )
        value = np.minimum(np.maximum(value, 0.0), MAX_SCORE)
        result: FloatArray = np.where(b["fresh"][:n], value, NEUTRAL_SCORE)
        return result
