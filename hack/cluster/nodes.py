"""KWOK node objects built from a cluster inventory."""

from __future__ import annotations

from typing import Any

from hack.cluster.stages import FAKE_NODE_ANNOTATION
from joulie.api import keys
from joulie.api.inventory import Inventory, NodeGroup


def node_manifest(name: str, group: NodeGroup, *, managed: bool = True) -> dict[str, Any]:
    """One fake node with the inventory's hardware as labels, annotations and capacity."""
    labels = {
        "type": "kwok",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        **group.hardware_labels(),
    }
    if managed:
        labels[keys.MANAGED_LABEL] = "true"
    annotations = {
        FAKE_NODE_ANNOTATION: keys.KWOK_NODE_VALUE,
        "node.alpha.kubernetes.io/ttl": "0",
        **group.hardware_annotations(),
    }
    capacity = group.capacity()
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"providerID": f"kwok://{name}"},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "kwok",
                "containerRuntimeVersion": "kwok",
            },
        },
    }


def node_manifests(inventory: Inventory, limit: int | None = None) -> list[dict[str, Any]]:
    """Every node of the inventory (or the first ``limit``, taken round-robin over the groups so
    that a small sample still has every hardware family)."""
    per_group = [[(n, g) for n in g.node_names()] for g in inventory.nodes]
    ordered: list[tuple[str, NodeGroup]] = []
    while any(per_group):
        for items in per_group:
            if items:
                ordered.append(items.pop(0))
    if limit is not None:
        ordered = ordered[:limit]
    return [node_manifest(name, group) for name, group in ordered]
