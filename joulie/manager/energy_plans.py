"""One node's split plan from the manager's caches: its workload pods' uses of the node (request
shares, modelled marginal power, the saving factor of their work under the node's controls),
reduced by ``core.energy_accounting.split_plan`` to a few figures per account.

A plan depends on the node (its allocatable resources), its NodeHardware's status (the power
profile), the planner's power model and controls of the node, and the node's workload pods.
:class:`PlanInputs` keeps those; the accountant rebuilds a plan only for a node one of them may
have changed for (a dirty set fed by the informers and the planner), and not even then when
they are the same objects or equal ones (an agent's heartbeat replaces its NodeHardware with an
equal status).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Final

from joulie.api import keys
from joulie.api.enums import WorkloadClass
from joulie.api.nodehardware import NodeHardwareStatus
from joulie.core.energy_accounting import (
    PodUse,
    SplitPlan,
    account_key,
    pod_use,
    resource_share,
    split_plan,
)
from joulie.core.energy_counterfactual import PodWork, counterfactuals, idle_power
from joulie.core.pod_power import (
    CPU_FALLBACK_CORES_PERFORMANCE,
    CPU_FALLBACK_CORES_STANDARD,
    DEFAULT_COEFFICIENTS,
    NodePowerProfile,
    PodDemand,
    gpu_coefficient,
    marginal_watts,
    node_power_profile,
)
from joulie.core.power_model import Controls, NodePowerSpec
from joulie.kube.projections import SlimNode, SlimPod
from joulie.manager.hardware_facts import HardwareFacts
from joulie.manager.lifecycle.facts import room

__all__ = [
    "GROUP_SEPARATOR",
    "NodeModel",
    "NodePlan",
    "PlanInputs",
    "account_of",
    "node_plan",
    "pod_uses",
]

GROUP_SEPARATOR: Final = "\t"
"""Between a pod's class account and its PodGroup in the attribution's account key (a tab is in
no Kubernetes name)."""
FACTORS_CACHED: Final = 4_096
"""Distinct (hardware, controls) whose modelled idle draw is kept (a bounded cache)."""
FACTORS_SHARED: Final = 1_024
"""Distinct (hardware, controls, pods' work) whose saving factors are kept (a bounded cache;
each node keeps its own split plan anyway)."""
_GIB: Final = float(2**30)

NodeModel = tuple[NodePowerSpec, Controls]
"""A node's power model and the controls in force on it."""


def account_of(pod: SlimPod) -> str:
    """ "<namespace>/<class>": the pod's workload class when it names one, else standard."""
    return account_key(pod.namespace, pod.annotations.get(keys.WORKLOAD_CLASS_ANNOTATION))


@functools.lru_cache(maxsize=FACTORS_CACHED)
def _modelled_idle_w(spec: NodePowerSpec, controls: Controls) -> float:
    return idle_power(spec, controls)


@functools.lru_cache(maxsize=FACTORS_SHARED)
def _factors(
    spec: NodePowerSpec, controls: Controls, works: tuple[PodWork, ...], cores: float
) -> tuple[float, ...]:
    # Nodes of one hardware group running the same kind of work share their factors: the first
    # pass over a large cluster computes each configuration once.
    return tuple(counterfactuals(spec, controls, works, cores))


def pod_uses(
    node: SlimNode | None,
    pods: Iterable[SlimPod],
    profile: NodePowerProfile | None,
    model: NodeModel | None = None,
) -> tuple[list[PodUse], bool]:
    """The pods' uses of ``node`` (their requests' shares of its allocatable resources, their
    modelled marginal power and, given the node's power ``model``, what the same work would have
    drawn uncontrolled) and whether it has GPUs. A node not in the cache offers nothing: its
    energy is overhead."""
    offered = room(node.allocatable) if node is not None else None
    cpu = offered.cpu_millis if offered is not None else 0
    memory = offered.memory_bytes if offered is not None else 0
    gpus = sum(offered.gpus.values()) if offered is not None else 0
    uses = []
    works = []
    for pod in pods:
        account = account_of(pod)
        performance = account.endswith("/" + WorkloadClass.PERFORMANCE.value)
        if pod.pod_group:
            account += GROUP_SEPARATOR + pod.pod_group
        cores = pod.cpu_millis / 1000
        if cores <= 0:
            # The extender's estimate assumes a pod asking for no CPU uses some; so does this.
            cores = CPU_FALLBACK_CORES_PERFORMANCE if performance else CPU_FALLBACK_CORES_STANDARD
        demand = PodDemand(cores, pod.memory_bytes / _GIB, pod.gpus, performance)
        use = pod_use(
            account,
            (pod.cpu_millis, pod.memory_bytes, pod.gpus),
            (cpu, memory, gpus),
            marginal_watts(demand, profile),
        )
        uses.append(use)
        works.append(
            PodWork(
                idle_share=resource_share(use, gpus > 0),
                cpu_cores=cores * DEFAULT_COEFFICIENTS.cpu_util,
                gpus=pod.gpus,
                gpu_util=gpu_coefficient(performance, DEFAULT_COEFFICIENTS) if pod.gpus else 0.0,
            )
        )
    if model is not None and uses:
        factors = _factors(model[0], model[1], tuple(works), cpu / 1000)
        uses = [replace(u, counterfactual=f) for u, f in zip(uses, factors, strict=True)]
    return uses, gpus > 0


def _same(kept: object, now: object) -> bool:
    return kept is now or kept == now


@dataclass(slots=True)
class PlanInputs:
    """What one node's plan was made from. The node and the pods are compared by identity (the
    informers replace an object whenever it changes); the hardware status and the model by
    equality too, and then the newer objects are kept, so the next comparison is by identity."""

    node: SlimNode | None
    status: NodeHardwareStatus | None
    spec: NodePowerSpec | None
    controls: Controls | None
    pods: tuple[SlimPod, ...]

    def same(
        self,
        node: SlimNode | None,
        status: NodeHardwareStatus | None,
        model: NodeModel | None,
        pods: list[SlimPod],
    ) -> bool:
        spec, controls = model if model is not None else (None, None)
        if not (
            self.node is node
            and len(self.pods) == len(pods)
            and all(map(operator.is_, self.pods, pods))
            and _same(self.status, status)
            and _same(self.spec, spec)
            and _same(self.controls, controls)
        ):
            return False
        self.status, self.spec, self.controls = status, spec, controls
        return True


@dataclass(frozen=True, slots=True)
class NodePlan:
    inputs: PlanInputs
    plan: SplitPlan
    modelled_idle_w: float | None
    """The power model's idle draw of the node under its controls (None without a model)."""


def node_plan(
    name: str,
    node: SlimNode | None,
    facts: HardwareFacts | None,
    model: NodeModel | None,
    pods: list[SlimPod],
) -> NodePlan:
    """The split plan of node ``name`` from its workload ``pods`` (bound or nominated to it: a
    nominated pod draws nothing yet and is left out)."""
    status = facts.status if facts is not None else None
    cores = room(node.allocatable).cpu_millis // 1000 if node is not None else 0
    profile = node_power_profile(status, cores)
    bound = [p for p in pods if p.node_name == name]
    uses, has_gpus = pod_uses(node, bound, profile, model)
    spec, controls = model if model is not None else (None, None)
    return NodePlan(
        PlanInputs(node, status, spec, controls, tuple(pods)),
        split_plan(uses, has_gpus),
        _modelled_idle_w(*model) if model is not None else None,
    )
