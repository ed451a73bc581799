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
:class:`joulie.core.score_table.ScoreTable` does the same for many nodes at once over numpy
arrays, for kube-scheduler's prioritize calls, and returns exactly what :func:`score` returns for
each node.

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
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

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
    marginal_watts,
    node_power_profile,
)

__all__ = [
    "COOLING_WEIGHT",
    "ECO_BONUS",
    "HEADROOM_WEIGHT",
    "MAX_EXTENDER_PRIORITY",
    "NEUTRAL_PRIORITY",
    "NEUTRAL_SCORE",
    "PRESSURE_RELIEF_WEIGHT",
    "TREND_BONUS_LIMIT",
    "TREND_FAST_W_PER_MIN",
    "TREND_SCALE_FAST",
    "TREND_SCALE_NORMAL",
    "ClusterTerms",
    "NodeTerms",
    "ScoreBreakdown",
    "cluster_from",
    "cluster_terms",
    "extender_priority",
    "filter_reason",
    "node_terms",
    "score",
    "score_breakdown",
    "terms_of",
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
NEUTRAL_PRIORITY: Final = 5
"""The extender's priority of a node it has no opinion on (:data:`NEUTRAL_SCORE` on the 0..10
scale): an unknown node among scored ones, and every node when the extender cannot decide
(not synced yet, the manager's Lease not current, the time limit spent, the placement failed).
Equal priorities for every node leave the ranking to kube-scheduler's own plugins."""
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


@dataclass(frozen=True, slots=True)
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
    return terms_of(
        schedulable_class=twin.schedulable_class if twin is not None else None,
        measured_w=measurement.measured_node_power_w if measurement is not None else None,
        capped_w=measurement.node_capped_power_w if measurement is not None else None,
        trend_w_per_min=measurement.power_trend_w_per_min if measurement is not None else None,
        headroom_score=twin.predicted_power_headroom_score if twin is not None else None,
        cooling_stress=twin.predicted_cooling_stress_score if twin is not None else None,
        has_measurement=measurement is not None,
        power=node_power_profile(hardware),
        fresh=fresh,
    )


def terms_of(
    *,
    schedulable_class: SchedulableClass | None,
    measured_w: float | None,
    capped_w: float | None,
    trend_w_per_min: float | None,
    headroom_score: float | None,
    cooling_stress: float | None,
    has_measurement: bool,
    power: NodePowerProfile | None,
    fresh: bool,
) -> NodeTerms:
    """:func:`node_terms` from the twin's figures as plain values (None: absent), for a caller
    that holds them without a parsed status (the standalone simulator)."""
    measured = _finite(measured_w) or 0.0
    capped = max(0.0, _finite(capped_w) or 0.0)
    trend = _finite(trend_w_per_min) or 0.0
    headroom = _finite(headroom_score)
    if headroom is None and capped > 0.0:
        headroom = min(MAX_SCORE, (capped - measured) / capped * 100.0)
    cooling = _finite(cooling_stress)
    return NodeTerms(
        schedulable_class=schedulable_class,
        fresh=fresh and headroom is not None,
        measured_w=measured,
        capped_w=capped,
        headroom_score=headroom if headroom is not None else 0.0,
        cooling_stress=min(max(cooling or 0.0, 0.0), MAX_SCORE),
        trend_w_per_min=trend,
        has_measurement=has_measurement,
        power=power,
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


def cluster_from(
    pressures: list[float], trends: list[float], trend_count: int | None = None
) -> ClusterTerms:
    """The cluster's terms from the performance nodes' pressures and the measured trends (the
    shared arithmetic of :func:`cluster_terms` and the score table). ``trend_count``: how many
    nodes the trends are the mean over, when zero trends were left out of ``trends`` (they add
    nothing to the exact sum); None: ``len(trends)``."""
    pressure = math.fsum(pressures) / len(pressures) if pressures else 0.0
    count = len(trends) if trend_count is None else trend_count
    mean_trend = math.fsum(trends) / count if count else 0.0
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
    return cluster_from(pressures, trends)


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
