"""The standalone simulator's nodes: an inventory turned into what every decision reads.

A node group of the inventory becomes exactly what a KWOK cluster built from it shows the live
roles: the Node's labels, annotations and allocatable resources, the NodeHardware status the
pool agent publishes for a simulated node, and from those the hardware view, the twin's hardware
figures and the power model. All of it is computed once per group (the nodes of a group are
alike) with the functions the live roles use, so the engine never recognises hardware itself.

Per node the engine only needs a few numbers, kept in numpy arrays so that a placement looks at
5,000 nodes in a handful of vector operations.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from joulie.api import keys
from joulie.api.inventory import Inventory, NodeGroup
from joulie.api.nodehardware import NodeHardwareStatus
from joulie.api.quantity import parse_quantity
from joulie.api.telemetry import HardwareSummary
from joulie.core.intents import IntentConfig
from joulie.core.pod_power import NodePowerProfile, node_power_profile
from joulie.core.power_model import NodePowerSpec, Throughput
from joulie.core.twin import TwinHardware, twin_hardware
from joulie.hardware.catalog import Catalog
from joulie.hardware.power_spec import optimal_gpu_cap_w
from joulie.hardware.recognition import HardwareView, hardware_view
from joulie.hardware.simulated import simulated_hardware
from joulie.hardware.unknown_models import Kind, UnknownModel, unknown_models, unknown_parts
from joulie.kube.projections import SlimNode
from joulie.sim.kwok_hardware import node_spec

__all__ = ["Fleet", "GroupModel", "build_fleet", "group_throughputs", "inventory_unknown_models"]

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class GroupModel:
    """What every node of one inventory group shares."""

    group: NodeGroup
    labels: dict[str, str]
    annotations: dict[str, str]
    power: NodePowerSpec
    summary: HardwareSummary
    """The hardware as the simulator's telemetry describes it (what control requests are
    resolved against)."""
    hardware: NodeHardwareStatus
    """The NodeHardware status the pool agent would publish."""
    view: HardwareView
    twin_hardware: TwinHardware
    power_profile: NodePowerProfile | None
    """What the extender's marginal-power estimate reads of the node."""
    cpu_millis: int
    memory_bytes: int
    gpus: int
    gpu_resource: str | None
    gpu_optimal_cap_w: float | None = None
    """Its boards' energy-optimal cap, as the manager's planner works it out from the catalog
    (what ``class_caps`` gives standard work); None without GPUs the catalog knows."""


@dataclass(frozen=True)
class Fleet:
    names: tuple[str, ...]
    """Every node, in inventory order (the order placement breaks ties in)."""
    groups: tuple[GroupModel, ...]
    group_of: IntArray
    """Node index -> index into ``groups``."""
    cpu_millis: IntArray
    memory_bytes: IntArray
    gpus: IntArray
    gpu_resource: tuple[str | None, ...]
    """Per node: the GPU resource its GPUs are offered as."""

    def __len__(self) -> int:
        return len(self.names)

    def model(self, node: int) -> GroupModel:
        return self.groups[int(self.group_of[node])]

    def family(self, node: int) -> str:
        return self.model(node).view.family


def _first_node(group: NodeGroup) -> SlimNode:
    """The group's first node as the live roles' cache would hold it."""
    labels = {**group.hardware_labels(), keys.MANAGED_LABEL: "true"}
    first = group.node_names()[0]
    return SlimNode(
        first, labels, group.hardware_annotations(), group.capacity(), False, True, False, first
    )


def group_throughputs(
    inventory: Inventory,
    catalog: Catalog,
    gpu_product_label_keys: Iterable[str] = keys.DEFAULT_GPU_PRODUCT_LABEL_KEYS,
) -> list[Throughput]:
    """How fast each inventory group's parts work against the reference parts, in group order
    (what the generator sizes its offered load by)."""
    product_keys = tuple(gpu_product_label_keys)
    return [node_spec(_first_node(g), catalog, product_keys)[0].throughput for g in inventory.nodes]


def _group_model(group: NodeGroup, catalog: Catalog, config: IntentConfig) -> GroupModel:
    slim = _first_node(group)
    labels, annotations, capacity = (
        dict(slim.labels),
        dict(slim.annotations),
        dict(slim.allocatable),
    )
    power, summary = node_spec(slim, catalog, config.gpu_product_label_keys)
    hardware = NodeHardwareStatus.model_validate(simulated_hardware(summary, catalog))
    view = hardware_view(
        hardware, labels, annotations, capacity, catalog, config.gpu_product_label_keys
    )
    twin_hw = twin_hardware(view, hardware, labels, config)
    return GroupModel(
        group=group,
        labels=labels,
        annotations=annotations,
        power=power,
        summary=summary,
        hardware=hardware,
        view=view,
        twin_hardware=twin_hw,
        power_profile=node_power_profile(hardware),
        cpu_millis=int(parse_quantity(capacity["cpu"]) * 1000),
        memory_bytes=int(parse_quantity(capacity["memory"])),
        gpus=group.gpu_count if group.gpu_resource else 0,
        gpu_resource=group.gpu_resource,
        gpu_optimal_cap_w=optimal_gpu_cap_w(view, catalog),
    )


def build_fleet(inventory: Inventory, catalog: Catalog, config: IntentConfig) -> Fleet:
    """Every node of ``inventory``; a duplicate node name is an error (two KWOK nodes cannot
    share one)."""
    models: list[GroupModel] = []
    names: list[str] = []
    group_of: list[int] = []
    for index, group in enumerate(inventory.nodes):
        models.append(_group_model(group, catalog, config))
        batch = group.node_names()
        names += batch
        group_of += [index] * len(batch)
    if len(set(names)) != len(names):
        seen: set[str] = set()
        dup = next(n for n in names if n in seen or seen.add(n))  # type: ignore[func-returns-value]
        raise ValueError(f"the inventory names node {dup!r} twice")
    index_of = np.asarray(group_of, dtype=np.int64)

    def column(values: Sequence[int]) -> IntArray:
        return np.asarray(values, dtype=np.int64)[index_of]

    return Fleet(
        names=tuple(names),
        groups=tuple(models),
        group_of=index_of,
        cpu_millis=column([m.cpu_millis for m in models]),
        memory_bytes=column([m.memory_bytes for m in models]),
        gpus=column([m.gpus for m in models]),
        gpu_resource=tuple(models[g].gpu_resource for g in group_of),
    )


def inventory_unknown_models(
    inventory: Inventory,
    catalog: Catalog,
    gpu_product_label_keys: Iterable[str] = keys.DEFAULT_GPU_PRODUCT_LABEL_KEYS,
) -> list[UnknownModel]:
    """The models of ``inventory`` that the simulator gives generic parts, once each with its
    node count and named as the inventory names it. Recognised as ``node_spec`` recognises a
    group (from its labels), without building the fleet: a command warns about them once,
    before its runs start (a worker process would only repeat it)."""
    product_keys = tuple(gpu_product_label_keys)
    seen: list[tuple[Kind, str | None, int]] = []
    for group in inventory.nodes:
        labels = group.hardware_labels()
        view = hardware_view(
            None, labels, group.hardware_annotations(), group.capacity(), catalog, product_keys
        )
        for kind, _ in unknown_parts(view, catalog):
            seen.append((kind, group.cpu if kind == "CPU" else group.product, group.replicas))
    return unknown_models(seen)
