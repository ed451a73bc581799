"""The policies, registered: which nodes run in performance.

Each policy is a module of this package declaring one :class:`~joulie.core.policies.base.Policy`
(its parameters with defaults and bounds, what it reads, its plan). :data:`POLICIES` lists them;
the controller manager's settings (POLICY_TYPE and every parameter's variable), the simulator,
``joulie plan`` and the settings documentation are all built from it. Adding a policy is its
module, a member of :class:`PolicyType` and an entry in :data:`POLICIES`, all in this package.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from types import MappingProxyType

from joulie.core.policies import class_caps, queue_aware, rule_swap, static_partition
from joulie.core.policies.base import (
    ClassCaps,
    Number,
    Parameter,
    ParameterProblem,
    Plan,
    PlanNode,
    Policy,
    PolicyInputs,
    Reads,
    Values,
)
from joulie.core.policies.family_split import family_split, performance_set, round_half_up
from joulie.core.policies.queue_aware import queue_hp_count
from joulie.core.policies.rule_swap import rule_swap_assignment
from joulie.core.policies.static_partition import static_hp_count

__all__ = [
    "PARAMETERS",
    "POLICIES",
    "POLICY_NAMES",
    "ClassCaps",
    "Parameter",
    "ParameterProblem",
    "Plan",
    "PlanNode",
    "Policy",
    "PolicyInputs",
    "PolicyType",
    "Reads",
    "family_split",
    "parameter_problems",
    "performance_set",
    "plan",
    "policy_of",
    "queue_hp_count",
    "round_half_up",
    "rule_swap_assignment",
    "static_hp_count",
    "values_of",
]


class PolicyType(StrEnum):
    """The POLICY_TYPE values, one per registered policy."""

    STATIC_PARTITION = "static_partition"
    QUEUE_AWARE_V1 = "queue_aware_v1"
    RULE_SWAP_V1 = "rule_swap_v1"
    CLASS_CAPS = "class_caps"


POLICIES: Mapping[PolicyType, Policy] = MappingProxyType(
    {
        PolicyType.STATIC_PARTITION: static_partition.POLICY,
        PolicyType.QUEUE_AWARE_V1: queue_aware.POLICY,
        PolicyType.RULE_SWAP_V1: rule_swap.POLICY,
        PolicyType.CLASS_CAPS: class_caps.POLICY,
    }
)

PARAMETERS: tuple[Parameter, ...] = tuple(
    parameter for policy in POLICIES.values() for parameter in policy.parameters
)
"""Every policy's parameters, in registry order (names are unique across policies)."""

POLICY_NAMES: Mapping[PolicyType, str] = MappingProxyType(
    {kind: policy.provenance for kind, policy in POLICIES.items()}
)
"""Provenance written to NodeTwin.spec.policy.name for each policy."""


def policy_of(name: str) -> Policy:
    """The registered policy called ``name``; :class:`ValueError` naming the accepted ones."""
    try:
        return POLICIES[PolicyType(name)]
    except ValueError:
        accepted = ", ".join(p.value for p in PolicyType)
        raise ValueError(f"unknown policy {name!r}; expected one of {accepted}") from None


def values_of(params: Mapping[str, Number]) -> Values:
    """Every parameter's value: those given, the declared default for the rest."""
    return MappingProxyType({p.name: params.get(p.name, p.default) for p in PARAMETERS})


def parameter_problems(params: Mapping[str, Number]) -> list[ParameterProblem]:
    """What every registered policy refuses in these values (each policy's own rules)."""
    values = values_of(params)
    return [problem for policy in POLICIES.values() for problem in policy.check(values)]


def plan(nodes: Sequence[PlanNode], inputs: PolicyInputs, perf_pods: int, now: float) -> Plan:
    """The desired profile of every node under ``inputs.policy``.

    ``perf_pods``: performance pods running or pending cluster-wide, for a policy that reads
    the demand. ``now``: seconds since the epoch, for a policy that reads the clock. An unknown
    policy name raises :class:`ValueError`.
    """
    policy = policy_of(inputs.policy)
    return policy.decide(
        nodes, values_of(inputs.params), perf_pods, now, inputs.reconcile_interval_s
    )
