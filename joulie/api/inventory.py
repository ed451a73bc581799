"""Cluster inventories: node groups with their hardware, in the upstream Joulie file format.

An inventory lists node groups (a name prefix and a replica count, or one named node) with the CPU
model, sockets, cores, memory and GPUs of each node. It drives KWOK clusters, the simulator and
`joulie plan`. The format is the one upstream's experiments use, so their files load as they are:

    nodes:
      - node_name_prefix: kwok-h100-nvl   # or node_name: for a single node
        replicas: 12
        vendor: nvidia                    # nvidia | amd | intel | none
        product: NVIDIA H100 NVL          # GPU product, "" without GPUs
        cpu: AMD EPYC 9654 96-Core Processor
        cpu_sockets: 2
        cpu_cores: 192                    # CPUs the node offers (its cpu capacity)
        memory_gib: 1536
        gpu_count: 8
        gpu_min_cap_watts: 200            # optional per-GPU power-limit range
        gpu_max_cap_watts: 400
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from joulie.api import keys
from joulie.api.yaml_file import YamlFileError, read_yaml_file

GpuVendor = Literal["nvidia", "amd", "intel", "none"]

_GPU_RESOURCE = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu", "intel": "gpu.intel.com/i915"}
# The GPU product label each vendor's feature discovery sets.
_GPU_PRODUCT_LABEL = {"nvidia": "nvidia.com/gpu.product", "amd": "amd.com/gpu.product"}


class InventoryError(ValueError):
    """An inventory file that cannot be used; the message names the group and the field."""


class NodeGroup(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    node_name_prefix: str | None = None
    node_name: str | None = None
    replicas: Annotated[int, Field(ge=1)] = 1
    vendor: GpuVendor = "none"
    product: str = ""
    cpu: Annotated[str, Field(min_length=1)]
    cpu_sockets: Annotated[int, Field(ge=1)] = 1
    cpu_cores: Annotated[int, Field(ge=1)]
    memory_gib: Annotated[float, Field(gt=0)]
    gpu_count: Annotated[int, Field(ge=0)] = 0
    gpu_min_cap_watts: Annotated[float, Field(gt=0)] | None = None
    gpu_max_cap_watts: Annotated[float, Field(gt=0)] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> NodeGroup:
        if (self.node_name_prefix is None) == (self.node_name is None):
            raise ValueError("give exactly one of node_name_prefix and node_name")
        if self.node_name is not None and self.replicas != 1:
            raise ValueError("node_name names one node; use node_name_prefix with replicas")
        if self.gpu_count > 0 and (self.vendor == "none" or not self.product):
            raise ValueError("a group with gpu_count > 0 needs a GPU vendor and product")
        if self.gpu_count == 0 and self.vendor != "none":
            raise ValueError(f"vendor is {self.vendor!r} but gpu_count is 0")
        low, high = self.gpu_min_cap_watts, self.gpu_max_cap_watts
        if low is not None and high is not None and low > high:
            raise ValueError("gpu_min_cap_watts is above gpu_max_cap_watts")
        return self

    @property
    def label(self) -> str:
        return self.node_name_prefix or self.node_name or "?"

    def node_names(self) -> list[str]:
        if self.node_name is not None:
            return [self.node_name]
        return [f"{self.node_name_prefix}-{i}" for i in range(self.replicas)]

    @property
    def gpu_resource(self) -> str | None:
        return _GPU_RESOURCE.get(self.vendor) if self.gpu_count else None

    def hardware_labels(self) -> dict[str, str]:
        """The hardware labels of a node of this group: what a KWOK node built from the group
        carries, and what `joulie plan` recognises its models from."""
        labels = {
            keys.HW_CPU_MODEL_LABEL: label_safe(self.cpu),
            keys.HW_CPU_SOCKETS_LABEL: str(self.cpu_sockets),
            keys.HW_CPU_CORES_LABEL: str(self.cpu_cores),
            keys.HW_GPU_COUNT_LABEL: str(self.gpu_count),
        }
        if self.gpu_resource is not None:
            product = label_safe(self.product)
            labels[keys.HW_GPU_MODEL_LABEL] = product
            labels[keys.GPU_PRODUCT_LABEL] = product
            if self.vendor in _GPU_PRODUCT_LABEL:
                labels[_GPU_PRODUCT_LABEL[self.vendor]] = product
        return labels

    def hardware_annotations(self) -> dict[str, str]:
        """The exact model names, which label values cannot always hold."""
        annotations = {keys.HW_CPU_MODEL_ANNOTATION: self.cpu}
        if self.gpu_resource is not None:
            annotations[keys.HW_GPU_MODEL_ANNOTATION] = self.product
        return annotations

    def capacity(self) -> dict[str, str]:
        """Node capacity (and allocatable): CPUs, memory, pods and the GPUs as whole devices."""
        capacity = {
            "cpu": str(self.cpu_cores),
            "memory": f"{round(self.memory_gib * 1024)}Mi",
            "pods": "250",
            "ephemeral-storage": "1Ti",
        }
        if self.gpu_resource is not None:
            capacity[self.gpu_resource] = str(self.gpu_count)
        return capacity


class Inventory(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    nodes: list[NodeGroup]

    def node_count(self) -> int:
        return sum(g.replicas for g in self.nodes)

    def nodes_by_name(self) -> Iterator[tuple[str, NodeGroup]]:
        for group in self.nodes:
            for name in group.node_names():
                yield name, group


def parse_inventory(data: Any, source: str = "inventory") -> Inventory:
    """Validate inventory data; errors name the group (index and prefix) and the field."""
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise InventoryError(f"{source}: expected a mapping with a 'nodes' list of node groups")
    try:
        inventory = Inventory.model_validate(data)
    except ValidationError as exc:
        raise InventoryError(_describe(exc, data, source)) from None
    names = [name for name, _ in inventory.nodes_by_name()]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})[:3]
        raise InventoryError(f"{source}: node names repeat across groups: {', '.join(dup)}")
    return inventory


def load_inventory(path: str | Path) -> Inventory:
    path = Path(path)
    try:
        data = read_yaml_file(path, "inventory")
    except YamlFileError as exc:
        raise InventoryError(str(exc)) from None
    return parse_inventory(data, str(path))


def _describe(exc: ValidationError, data: dict[str, Any], source: str) -> str:
    lines = []
    for err in exc.errors(include_url=False):
        loc = list(err["loc"])
        where = source
        if len(loc) >= 2 and loc[0] == "nodes" and isinstance(loc[1], int):
            raw = data["nodes"][loc[1]]
            name = (
                (raw.get("node_name_prefix") or raw.get("node_name"))
                if isinstance(raw, dict)
                else None
            )
            where += f": group {loc[1]}" + (f" ({name})" if name else "")
            loc = loc[2:]
        field = ".".join(str(p) for p in loc)
        msg = str(err["msg"]).removeprefix("Value error, ")
        lines.append(f"{where}: {field + ': ' if field else ''}{msg}")
    return "\n".join(lines)


_LABEL_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def label_safe(text: str) -> str:
    """A free-form string as a valid label value: runs of other characters become one ``-``."""
    value = _LABEL_UNSAFE.sub("-", text).strip("-._")[:63]
    return value.rstrip("-._")
