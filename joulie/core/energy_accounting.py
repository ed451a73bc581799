"""Who used a node's energy, and what the same work would have used without Joulie: the split of
one node's measured energy over one interval between the pods on it, and the counterfactual it
is judged against. Pure; the interval's length is an argument.

The split, for a node that drew ``energy_j`` over ``seconds`` with an idle draw of ``idle_w``:

* **idle energy** (``min(energy_j, idle_w x seconds)``: what the node draws with nothing on it)
  goes to the pods by their share of the node's resources: the mean of their requests' shares of
  its CPUs, memory and (on a GPU node) GPUs. A pod asking for twice as much gets twice as much;
  what no pod asked for is the node's **overhead** (a node kept on for nobody).
* **dynamic energy** (the rest) goes to the pods in proportion to their modelled marginal power
  (the estimate the extender subtracts from a node's headroom, ``core.pod_power.marginal_watts``):
  all of it, whether the model explains more or less than was measured. Only the model's
  proportions between pods are used, because its absolute watts are a coarse estimate (fixed
  utilisation coefficients of each part's maximum) that routinely misses the measured draw by a
  fifth or more either way; what runs a node above its idle draw is the work on it. Where no pod
  has a modelled marginal power (a node without a power profile), the dynamic energy is
  overhead. A stated bias: the draw of system daemons above idle is counted to the pods.

So the pods' parts and the overhead add up to the measured energy exactly (a property test
holds this). The equal weights of CPU, memory and GPUs in the idle share are an assumption: no
published split of a server's idle power by resource applies to every node.

**The counterfactual** is the same work in the performance profile (no cap, no clock ceiling):
the power model's energy for the pod's work there over its energy under the controls in force
(``core.energy_counterfactual``), a factor applied to the pod's measured part. ``saved_j`` is
that part times the factor less one: what the same work would have drawn more without the
controls, negative where they cost energy (a cap below a board's energy-optimal point does
that). Only a ratio comes from the model, so a node without controls saves exactly nothing and
a model that is off by a constant factor in watts does not change the saving.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from joulie.api.enums import WorkloadClass

__all__ = [
    "Attribution",
    "NodeInterval",
    "PodUse",
    "SplitPlan",
    "account_key",
    "attribute",
    "pod_use",
    "resource_share",
    "split_plan",
]

_CLASSES = frozenset(c.value for c in WorkloadClass)


@dataclass(frozen=True, slots=True)
class PodUse:
    """One pod on the node over the interval."""

    account: str
    """Where its energy is booked (the caller's key: namespace and class, a PodGroup ...)."""
    cpu_share: float
    """Its CPU request over the node's allocatable CPUs (0-1)."""
    memory_share: float
    """Its memory request over the node's allocatable memory (0-1)."""
    gpu_share: float = 0.0
    """Its GPUs over the node's GPUs (0-1; 0 on a node without GPUs)."""
    marginal_w: float = 0.0
    """Its modelled marginal power under the node's controls now."""
    counterfactual: float = 1.0
    """The energy of its work in the performance profile over its energy now (1: the controls
    change nothing; see ``core.energy_counterfactual``)."""


def _ratio(amount: float, total: float) -> float:
    return amount / total if total > 0 else 0.0


def pod_use(
    account: str,
    requested: tuple[float, float, float],
    offered: tuple[float, float, float],
    marginal_w: float,
) -> PodUse:
    """A pod's use from its requests and the node's allocatable resources, each as (CPU,
    memory, GPUs) in the same units on both sides."""
    return PodUse(
        account,
        cpu_share=_ratio(requested[0], offered[0]),
        memory_share=_ratio(requested[1], offered[1]),
        gpu_share=_ratio(requested[2], offered[2]),
        marginal_w=marginal_w,
    )


@dataclass(frozen=True, slots=True)
class NodeInterval:
    energy_j: float
    """Measured over the interval (the power source's reading times its span)."""
    seconds: float
    idle_w: float
    """What the node draws with nothing running, under the controls of the interval."""
    has_gpus: bool = False


@dataclass(frozen=True)
class Attribution:
    used_j: Mapping[str, float] = field(default_factory=dict)
    """Joules per account."""
    saved_j: Mapping[str, float] = field(default_factory=dict)
    """Joules per account the same work would have drawn more in the performance profile
    (negative: it drew more under Joulie's controls); every account with a pod is present."""
    overhead_j: float = 0.0
    """Measured energy no pod explains (idle capacity nobody asked for; the dynamic draw of a
    node where no pod has a modelled marginal power)."""


def account_key(namespace: str, workload_class: str | None) -> str:
    """``<namespace>/<class>``, the account a pod's energy is booked to: the workload class its
    ``joulie.io/workload-class`` annotation names when that is one, else standard."""
    known = workload_class if workload_class in _CLASSES else WorkloadClass.STANDARD.value
    return f"{namespace}/{known}"


def resource_share(pod: PodUse, has_gpus: bool) -> float:
    """The pod's share of the node's resources: the mean of its CPU, memory and (on a GPU node)
    GPU shares; what its share of the idle draw is, before any over-commit is scaled away."""
    parts = [_unit(pod.cpu_share), _unit(pod.memory_share)]
    if has_gpus:
        parts.append(_unit(pod.gpu_share))
    return sum(parts) / len(parts)


def _watts(value: float) -> float:
    return value if math.isfinite(value) and value > 0.0 else 0.0


def _unit(value: float) -> float:
    return min(max(value, 0.0), 1.0)


@dataclass(frozen=True)
class SplitPlan:
    """How one node's energy is split between its pods, whatever the interval: the split is
    linear in the interval's idle and dynamic energy, so a node whose pods, requests and
    controls stay the same keeps its plan and each interval costs one pass over its accounts
    (the manager reuses a plan across reconciles; :func:`attribute` is one plan applied once).

    Per account: its share of the idle energy, of the dynamic energy, and the saving per joule
    of each (sum over its pods of share x (factor - 1))."""

    accounts: tuple[tuple[str, float, float, float, float], ...]
    """(account, idle share, dynamic share, saved per idle joule, saved per dynamic joule)."""

    def apply(self, node: NodeInterval) -> Attribution:
        energy = max(0.0, node.energy_j)
        idle = min(energy, max(0.0, node.idle_w) * max(0.0, node.seconds))
        dynamic = energy - idle
        used: dict[str, float] = {}
        saved: dict[str, float] = {}
        booked = 0.0
        for account, idle_share, dynamic_share, idle_saved, dynamic_saved in self.accounts:
            part = idle * idle_share + dynamic * dynamic_share
            used[account] = part
            saved[account] = idle * idle_saved + dynamic * dynamic_saved
            booked += part
        return Attribution(used, saved, energy - booked)


def split_plan(pods: Sequence[PodUse], has_gpus: bool) -> SplitPlan:
    """The split of a node's energy between ``pods`` (see the module docstring)."""
    shares = [resource_share(p, has_gpus) for p in pods]
    total_share = sum(shares)
    if total_share > 1.0:
        # Requests cannot exceed allocatable; a node over-committed by hand still conserves.
        shares = [s / total_share for s in shares]
    weights = [_watts(p.marginal_w) for p in pods]
    explained = math.fsum(weights)
    per_account: dict[str, list[float]] = {}
    for pod, share, weight in zip(pods, shares, weights, strict=True):
        dynamic_share = weight / explained if explained > 0.0 else 0.0
        factor = pod.counterfactual if math.isfinite(pod.counterfactual) else 1.0
        gain = max(0.0, factor) - 1.0
        sums = per_account.setdefault(pod.account, [0.0, 0.0, 0.0, 0.0])
        sums[0] += share
        sums[1] += dynamic_share
        sums[2] += share * gain
        sums[3] += dynamic_share * gain
    return SplitPlan(tuple((account, s[0], s[1], s[2], s[3]) for account, s in per_account.items()))


def attribute(node: NodeInterval, pods: Sequence[PodUse]) -> Attribution:
    """The node's energy over the interval, split between ``pods`` and overhead."""
    return split_plan(pods, node.has_gpus).apply(node)
