"""``class_caps``: no node partition. Every node stays in performance, and each GPU is capped by
the workload class of the pod running on it: standard work (and an idle board) at the board's
energy-optimal cap, performance work uncapped (or at a mild cap of its own setting). The node
agent puts each board's cap in force from the NodeTwin's per-class intents.

Why: the node partition makes performance work wait for the few performance nodes (the
simulator measured a third more job time for about 1 % of energy), while a cap at a board's
energy-optimal point costs standard work a little speed for about a quarter less energy per
unit of work on that board (``core.power_model.energy_optimal_cap_w``; Zeus, NSDI '23, measured
the A40's minimum between 175 and 200 W of 300 W).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType

from joulie.api.enums import Profile
from joulie.core.policies.base import ClassCaps, Parameter, Plan, PlanNode, Policy, Values
from joulie.core.policies.family_split import unique_names

__all__ = ["POLICY"]

PERFORMANCE_PCT = Parameter(
    "class_caps_performance_pct",
    float,
    100.0,
    "class_caps: cap of a GPU running performance work, as a percentage of its maximum power "
    "(100: uncapped; a mild cap such as 90 trades a little speed for energy).",
    minimum=50,
    maximum=100,
)

CPU_ECO_WHEN_STANDARD = Parameter(
    "class_caps_cpu_eco_when_standard",
    int,
    0,
    "class_caps: 1 puts a node's CPU at the eco caps and preset while every pod on it is "
    "standard; 0 (default) keeps it at performance. Off by default because the simulator "
    "measured it costing energy: default scenario, seed 1, IT energy 19,023 -> 19,362 kWh "
    "(+1.8 %) and standard p95 slowdown x1.267 -> x1.277, as capped CPU work holds its node "
    "longer at a power well above idle.",
    minimum=0,
    maximum=1,
)


def _decide(
    nodes: Sequence[PlanNode], values: Values, perf_pods: int, now: float, interval_s: float
) -> Plan:
    names = unique_names(nodes)
    profiles = MappingProxyType(dict.fromkeys(names, Profile.PERFORMANCE))
    return Plan(
        profiles,
        len(profiles),
        len(profiles),
        POLICY.provenance,
        ClassCaps(
            float(values[PERFORMANCE_PCT.name]),
            cpu_eco_when_standard=bool(values[CPU_ECO_WHEN_STANDARD.name]),
        ),
    )


POLICY = Policy(
    name="class_caps",
    provenance="class-caps-v1",
    summary="no node partition: every node in performance, each GPU capped by the class of the "
    "pod on it (standard work at the board's energy-optimal cap)",
    decide=_decide,
    parameters=(PERFORMANCE_PCT, CPU_ECO_WHEN_STANDARD),
)
