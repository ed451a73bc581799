"""What a policy is: the parameters it declares, what it reads, and the plan it makes.

A policy decides which eligible nodes run in performance. Each one lives in its own module of
this package and is one :class:`Policy` value listed in the registry
(:mod:`joulie.core.policies`); the controller manager's settings, the simulator, ``joulie plan``
and the settings documentation all read that registry, so a new policy is its module plus one
registry entry.

Everything here is pure: the current time is an argument, nothing is read from the cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from joulie.api.enums import Profile

__all__ = [
    "ClassCaps",
    "Parameter",
    "ParameterProblem",
    "Plan",
    "PlanNode",
    "Policy",
    "PolicyInputs",
    "Reads",
]

Number = int | float


class Reads(StrEnum):
    """What a policy reads besides the nodes and its parameters. The simulator asks a policy
    again only when something it reads moved, so a policy that reads something not declared
    here would silently be planned from a stale answer."""

    DEMAND = "demand"
    """The performance pods running or pending cluster-wide (``queue_aware_v1``)."""
    CLOCK = "clock"
    """The current time (``rule_swap_v1``)."""


@dataclass(frozen=True)
class Parameter:
    """One setting of a policy: an environment variable of the controller manager (its name in
    upper case), a key of a simulator run spec's ``params``, and a ``joulie plan`` flag when
    :attr:`flag` is set."""

    name: str
    """Lower-case name: the settings field, ``params`` key and ``PolicyInputs.params`` key."""
    type: type[int] | type[float]
    default: Number
    doc: str
    """What it means, for the settings documentation and ``--help``."""
    minimum: Number | None = None
    maximum: Number | None = None
    flag: str | None = None
    """The ``joulie plan`` option that overrides it (``--hp-frac``), if any."""


@dataclass(frozen=True)
class ParameterProblem:
    """A combination of parameters a policy refuses (the settings report it per variable)."""

    parameter: str
    detail: str
    accepted: str


@dataclass(frozen=True)
class PlanNode:
    """One eligible node as the policy sees it."""

    name: str
    family: str
    """Hardware family, from :func:`joulie.hardware.family.hardware_family`."""
    current_profile: str | None
    """The node's ``joulie.io/power-profile`` label now; anything but ``performance`` (eco, a
    stray value, no label) counts as not performance."""


@dataclass(frozen=True)
class PolicyInputs:
    """The policy settings of the controller manager, as plain values."""

    policy: str
    """The registry name of the policy (``static_partition``, ``queue_aware_v1``, ...)."""
    params: Mapping[str, Number] = field(default_factory=lambda: MappingProxyType({}))
    """Parameter values by name; a parameter not given takes its declared default."""
    reconcile_interval_s: float = 60.0
    """RECONCILE_INTERVAL (``rule_swap_v1`` flips at this period)."""


@dataclass(frozen=True)
class ClassCaps:
    """Per-device caps by the workload class of each board's pod (``class_caps``): what the
    policy asks of every GPU node, which each node's intent turns into watts for its boards."""

    performance_pct_of_max: float
    """A board running performance work, as a percentage of its maximum (100: uncapped)."""
    standard_at_energy_optimum: bool = True
    """A board running standard work, or none, at its energy-optimal cap (the catalog's law)."""
    cpu_standard_at_nominal: bool = True
    """Cores a standard pod holds exclusively at their nominal (non-boost) frequency."""
    cpu_eco_when_standard: bool = False
    """The node-level CPU intent at eco while every pod on the node is standard."""


@dataclass(frozen=True)
class Plan:
    """The desired profile of every eligible node, before the downgrade guard."""

    profiles: Mapping[str, Profile]
    """Node name -> profile, for every node given, in node-name order."""
    hp_count: int
    """The count the policy asked for, before the family floor and the cap at the node count
    (a policy that asks for no count reports ``performance_count`` here)."""
    performance_count: int
    """Nodes planned in performance."""
    policy_name: str
    """Provenance for ``NodeTwin.spec.policy.name``."""
    class_caps: ClassCaps | None = None
    """Per-device caps by class, for a policy that sets them (None: node-level caps only)."""


Values = Mapping[str, Number]
"""A policy's parameter values, every declared one present (defaults filled in)."""


def _no_problems(values: Values) -> list[ParameterProblem]:
    return []


@dataclass(frozen=True)
class Policy:
    """One policy, as the registry lists it."""

    name: str
    """The POLICY_TYPE value."""
    provenance: str
    """Written to ``NodeTwin.spec.policy.name`` (``static-partition-v1``)."""
    summary: str
    """One line for the settings documentation."""
    decide: Callable[[Sequence[PlanNode], Values, int, float, float], Plan]
    """``(nodes, values, perf_pods, now, reconcile_interval_s)`` -> the plan."""
    parameters: tuple[Parameter, ...] = ()
    reads: frozenset[Reads] = frozenset()
    demand: Callable[[int, int, Values], Hashable] | None = None
    """For a policy that reads :attr:`Reads.DEMAND`: what ``(node count, perf_pods, values)``
    comes to for it (``queue_aware_v1``: the node count it asks for). Two demands with the same
    answer give the same plan, so the simulator plans again only when the answer moves."""
    check: Callable[[Values], list[ParameterProblem]] = _no_problems
    """Rules across its parameters (QUEUE_HP_MAX not below QUEUE_HP_MIN)."""
