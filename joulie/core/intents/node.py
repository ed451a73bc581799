"""NodeTwin.spec and the schedulable class of one node, after the downgrade guard."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, NamedTuple, TypeVar

from joulie.api.enums import (
    GpuCapScope,
    Profile,
    SchedulableClass,
)
from joulie.api.nodehardware import NodeHardwareStatus
from joulie.api.nodetwin import (
    CpuClassCaps,
    CpuCoreCeiling,
    CpuSpec,
    GpuClassCaps,
    GpuPowerCap,
    GpuSpec,
    NodeTwinSpec,
    PolicySpec,
)
from joulie.core.intents.caps import cpu_power_cap, gpu_power_cap, gpu_product_label
from joulie.core.intents.config import (
    CapRange,
    IntentConfig,
)
from joulie.core.intents.governors import cpu_governor, gpu_governor
from joulie.core.intents.guard import downgrade_guard
from joulie.core.policies.base import ClassCaps


class NodeIntent(NamedTuple):
    spec: NodeTwinSpec
    """The NodeTwin.spec to write."""
    schedulable_class: SchedulableClass
    """The NodeTwin.status.schedulableClass to write."""

    @property
    def deferred(self) -> bool:
        """Whether the node's move to eco is deferred (it drains)."""
        return self.schedulable_class is SchedulableClass.DRAINING


def named(intent: NodeIntent, node_name: str) -> NodeIntent:
    """``intent`` (a :func:`node_intent`, shared by alike nodes) with its spec named for the node
    ``node_name``: NodeTwin.spec as an object, where :func:`spec_wire` writes it."""
    spec = intent.spec
    spec = NodeTwinSpec(
        node_name=node_name, profile=spec.profile, cpu=spec.cpu, gpu=spec.gpu, policy=spec.policy
    )
    return NodeIntent(spec, intent.schedulable_class)


UNNAMED: Final = "-"
"""The nodeName of the spec of a :func:`node_intent`: the spec is shared by every node with the
same inputs, and :func:`spec_wire` names it for the node it is written to."""


def spec_wire(intent: NodeIntent, node_name: str) -> dict[str, Any]:
    """``intent``'s NodeTwin.spec in wire form, for the node ``node_name``."""
    return {**intent.spec.to_wire(), "nodeName": node_name}


def node_intent(
    planned_profile: Profile,
    *,
    active_perf_pods: int,
    gpu_count: int,
    hardware: NodeHardwareStatus | None,
    labels: Mapping[str, str],
    catalog_gpu_range: CapRange | None,
    running_pod_max_gpus: int,
    policy_name: str | None,
    config: IntentConfig,
    class_caps: ClassCaps | None = None,
    gpu_optimal_cap_w: float | None = None,
) -> NodeIntent:
    """NodeTwin.spec and the schedulable class of one node, after the downgrade guard, without
    the node's name: one instance, spec included, for every node whose inputs are the same (the
    spec's nodeName is :data:`UNNAMED`; :func:`spec_wire` writes it named, and
    :func:`named` names it).

    ``gpu_count`` is the node's GPU count from the manager's hardware view (NodeHardware, else
    labels or allocatable GPUs); a node with GPUs gets the GPU rules. ``hardware`` is the node's
    NodeHardware status (None without one), ``labels`` its labels, ``catalog_gpu_range`` the
    ``(min_w, max_w)`` of its recognised GPU model in the catalog, ``running_pod_max_gpus`` the
    value of :func:`max_running_pod_gpus` over its pods. ``class_caps`` is the policy's rule for
    per-device caps by class, ``gpu_optimal_cap_w`` the energy-optimal cap of the node's boards
    (None where the node's GPU has no model): a standard board and an idle one take it, and
    without it they follow the node-level cap. Under ``class_caps`` the cores a standard pod
    holds exclusively get a ceiling at nominal (``spec.cpu.classCaps``), and with
    ``cpu_eco_when_standard`` the node-level CPU intent (caps and preset) is the eco one while
    no performance pod is on the node.
    """
    guard = downgrade_guard(planned_profile, active_perf_pods)
    profile = guard.control_profile
    gpu_node = gpu_count > 0
    product_label = gpu_product_label(labels, config.gpu_product_label_keys) if gpu_node else None

    cpu_profile = profile
    if class_caps is not None and class_caps.cpu_eco_when_standard and active_perf_pods == 0:
        # No partition to protect performance work here: the node-level CPU caps (every core
        # no pod holds exclusively) may apply while every pod on the node is standard.
        cpu_profile = Profile.ECO
    nominal = class_caps is not None and class_caps.cpu_standard_at_nominal

    def cpu_part() -> CpuSpec:
        cpu = cpu_power_cap(cpu_profile, gpu_node, hardware, config)
        cpu_gov = cpu_governor(cpu_profile, hardware, config)
        if cpu_gov is not None:
            cpu = cpu.model_copy(update={"governor": cpu_gov})
        if nominal:
            cpu = cpu.model_copy(update={"class_caps": _CPU_CLASS_CAPS})
        return cpu

    def gpu_part() -> GpuSpec:
        return GpuSpec(
            power_cap=gpu_power_cap(profile, hardware, product_label, catalog_gpu_range, config),
            governor=gpu_governor(profile, hardware, product_label, running_pod_max_gpus, config),
            class_caps=_class_caps(class_caps, gpu_optimal_cap_w),
        )

    held = (hardware, config)
    cpu = _shared_part(
        ("cpu", cpu_profile, gpu_node, id(hardware), id(config), nominal), cpu_part, held
    )
    gpu = None
    if gpu_node:
        key = (
            "gpu",
            profile,
            id(hardware),
            product_label,
            catalog_gpu_range,
            running_pod_max_gpus,
            id(config),
            class_caps,
            gpu_optimal_cap_w,
        )
        gpu = _shared_part(key, gpu_part, held)
    policy = None
    if policy_name:
        policy = _shared_part(("policy", policy_name), lambda: PolicySpec(name=policy_name), ())

    whole = ("intent", guard.profile, guard.schedulable_class, id(cpu), id(gpu), id(policy))
    return _shared_part(
        whole,
        lambda: NodeIntent(
            NodeTwinSpec(node_name=UNNAMED, profile=guard.profile, cpu=cpu, gpu=gpu, policy=policy),
            guard.schedulable_class,
        ),
        (cpu, gpu, policy),
    )


_T = TypeVar("_T")
_PARTS_MAX = 4096
_parts: dict[tuple[Any, ...], tuple[Any, tuple[object, ...]]] = {}


def _shared_part(key: tuple[Any, ...], build: Callable[[], _T], held: tuple[object, ...]) -> _T:
    """The spec part (or whole intent) for ``key``, built once and shared by every node whose
    inputs are the same.

    Why: nodes of one model under one policy have equal CPU, GPU and policy parts, and each
    node's own copies were about 2 KiB of pydantic objects: 5,000 intents of 8-GPU nodes took
    16.2 MiB with them, 5.7 MiB shared (tracemalloc). The rest was each node's own spec, which
    carried its name: 4.5 MiB at 5,000 nodes with the intents holding them (bench.manager,
    tracemalloc), now one per distinct intent. The parts are never changed after they
    are built. The key names the hardware and the configuration by identity (the manager shares
    a status between alike nodes); the entry holds them (``held``) so an identity is not reused
    while it is there.
    Bounded: a full table starts over."""
    found = _parts.get(key)
    if found is not None:
        value: _T = found[0]
        return value
    built = build()
    if len(_parts) >= _PARTS_MAX:
        _parts.clear()
    _parts[key] = (built, held)
    return built


_CPU_CLASS_CAPS = CpuClassCaps(standard=CpuCoreCeiling(at_nominal=True))
"""Cores a standard pod holds exclusively run no faster than nominal: above it, boost buys
each step of frequency with a higher voltage, so energy per unit of work grows (an assumption
the agent's ``efficient`` preset makes too). Performance pods' cores follow the node."""


def _class_caps(rule: ClassCaps | None, optimal_w: float | None) -> GpuClassCaps | None:
    if rule is None:
        return None
    at_optimum = None
    if rule.standard_at_energy_optimum and optimal_w is not None:
        at_optimum = GpuPowerCap(scope=GpuCapScope.PER_GPU, cap_watts_per_gpu=optimal_w)
    return GpuClassCaps(
        performance=GpuPowerCap(
            scope=GpuCapScope.PER_GPU, cap_pct_of_max=rule.performance_pct_of_max
        ),
        standard=at_optimum,
        idle=at_optimum,
    )
