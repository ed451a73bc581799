"""``static_partition``: a fixed fraction of the eligible nodes stays in performance."""

from __future__ import annotations

from collections.abc import Sequence

from joulie.core.policies.base import Parameter, Plan, PlanNode, Policy, Values
from joulie.core.policies.family_split import fraction_of, partition_plan

__all__ = ["POLICY", "static_hp_count"]

HP_FRAC = Parameter(
    "static_hp_frac",
    float,
    0.5,
    "static_partition: fraction of eligible nodes kept in performance.",
    minimum=0,
    maximum=1,
    flag="--hp-frac",
)


def static_hp_count(n: int, hp_frac: float) -> int:
    """``static_partition``: ``round(N * STATIC_HP_FRAC)``.

    ``round`` rounds halves up and works on the decimal fraction as written. Python's own
    ``round`` rounds halves to even, which would give 2 for 5 nodes at 0.5 and 4 for 9 nodes at
    0.5 (the direction depends on parity); upstream rounds halves away from zero, and an operator
    reads "half of 5 nodes, rounded" as 3. Multiplying binary floats would also turn
    ``90 * 0.35`` (31.5) into 31.499999999999996 and round it down, so the product is exact.
    ``hp_frac`` outside [0, 1] is clamped (settings reject it anyway).
    """
    return fraction_of(n, hp_frac, "STATIC_HP_FRAC")


def _decide(
    nodes: Sequence[PlanNode], values: Values, perf_pods: int, now: float, interval_s: float
) -> Plan:
    hp = static_hp_count(len(nodes), float(values[HP_FRAC.name]))
    return partition_plan(nodes, hp, POLICY.provenance)


POLICY = Policy(
    name="static_partition",
    provenance="static-partition-v1",
    summary="a fixed fraction of the eligible nodes (STATIC_HP_FRAC) stays in performance",
    decide=_decide,
    parameters=(HP_FRAC,),
)
