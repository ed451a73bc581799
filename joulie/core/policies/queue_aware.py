"""``queue_aware_v1``: enough performance nodes for the performance pods running or pending,
never fewer than a base fraction, within a floor and a ceiling."""

from __future__ import annotations

from collections.abc import Sequence

from joulie.core.policies.base import (
    Parameter,
    ParameterProblem,
    Plan,
    PlanNode,
    Policy,
    Reads,
    Values,
)
from joulie.core.policies.family_split import fraction_of, partition_plan

__all__ = ["POLICY", "queue_hp_count"]

BASE_FRAC = Parameter(
    "queue_hp_base_frac",
    float,
    0.6,
    "queue_aware_v1: fraction of eligible nodes kept in performance without demand.",
    minimum=0,
    maximum=1,
)
HP_MIN = Parameter(
    "queue_hp_min", int, 1, "queue_aware_v1: lower bound of the performance node count.", 0
)
HP_MAX = Parameter(
    "queue_hp_max",
    int,
    1_000_000,
    "queue_aware_v1: upper bound of the performance node count.",
    0,
)
PERF_PER_HP_NODE = Parameter(
    "queue_perf_per_hp_node",
    int,
    10,
    "queue_aware_v1: running or pending performance pods one performance node serves.",
    1,
)


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
    base = fraction_of(n, base_frac, "QUEUE_HP_BASE_FRAC")
    need = -(-perf_pods // perf_per_hp_node)
    return max(min(max(base, need), hp_max), hp_min)


def _count(n: int, perf_pods: int, values: Values) -> int:
    return queue_hp_count(
        n,
        perf_pods,
        float(values[BASE_FRAC.name]),
        int(values[HP_MIN.name]),
        int(values[HP_MAX.name]),
        int(values[PERF_PER_HP_NODE.name]),
    )


def _decide(
    nodes: Sequence[PlanNode], values: Values, perf_pods: int, now: float, interval_s: float
) -> Plan:
    return partition_plan(nodes, _count(len(nodes), perf_pods, values), POLICY.provenance)


def _check(values: Values) -> list[ParameterProblem]:
    low, high = values[HP_MIN.name], values[HP_MAX.name]
    if high < low:
        return [
            ParameterProblem(
                HP_MAX.name, f"is below QUEUE_HP_MIN={low}", f"an integer >= QUEUE_HP_MIN ({low})"
            )
        ]
    return []


POLICY = Policy(
    name="queue_aware_v1",
    provenance="queue-aware-v1",
    summary="performance nodes follow the performance pods running or pending (QUEUE_*)",
    decide=_decide,
    parameters=(BASE_FRAC, HP_MIN, HP_MAX, PERF_PER_HP_NODE),
    reads=frozenset({Reads.DEMAND}),
    demand=_count,
    check=_check,
)
