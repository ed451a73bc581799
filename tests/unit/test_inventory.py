"""Cluster inventories in the upstream format, and the KWOK nodes built from them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hack.cluster.nodes import node_manifests
from joulie.api import keys
from joulie.api.inventory import (
    InventoryError,
    NodeGroup,
    label_safe,
    load_inventory,
    parse_inventory,
)

INVENTORIES = Path(__file__).resolve().parents[1] / "data" / "inventories"
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def family(group: NodeGroup) -> str:
    return f"gpu:{group.product}" if group.gpu_count else f"cpu:{group.cpu}"


@pytest.mark.parametrize(
    ("name", "nodes", "families"),
    [
        ("01-cluster-nodes.yaml", 40, 3),
        ("01-cluster-nodes-5k.yaml", 5000, 3),
        ("02-cluster-nodes.yaml", 41, 8),
        ("02-cluster-nodes-5k.yaml", 5000, 8),
        ("03-cluster-nodes.yaml", 41, 4),
        ("03-cluster-nodes-5k.yaml", 5000, 4),
    ],
)
def test_upstream_inventories_load_as_they_are(name: str, nodes: int, families: int) -> None:
    inventory = load_inventory(INVENTORIES / name)
    assert inventory.node_count() == nodes
    assert len({family(g) for _, g in inventory.nodes_by_name()}) == families
    names = [n for n, _ in inventory.nodes_by_name()]
    assert len(names) == len(set(names)) == nodes


def test_group_fields_are_read() -> None:
    inventory = load_inventory(INVENTORIES / "02-cluster-nodes.yaml")
    h100 = next(g for g in inventory.nodes if g.node_name_prefix == "kwok-h100-nvl")
    assert (h100.replicas, h100.vendor, h100.product) == (12, "nvidia", "NVIDIA H100 NVL")
    assert (h100.cpu, h100.cpu_sockets, h100.cpu_cores) == (
        "AMD EPYC 9654 96-Core Processor",
        2,
        192,
    )
    assert (h100.gpu_count, h100.gpu_min_cap_watts, h100.gpu_max_cap_watts) == (8, 200, 400)
    assert h100.gpu_resource == "nvidia.com/gpu"
    assert h100.node_names()[:2] == ["kwok-h100-nvl-0", "kwok-h100-nvl-1"]


GOOD = {
    "node_name_prefix": "gpu",
    "replicas": 2,
    "vendor": "amd",
    "product": "AMD Instinct MI300X",
    "cpu": "AMD EPYC 9534",
    "cpu_sockets": 2,
    "cpu_cores": 128,
    "memory_gib": 512,
    "gpu_count": 8,
}


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"cpu_cores": 0}, "group 1 (gpu): cpu_cores: Input should be greater than or equal to 1"),
        ({"vendor": "acme"}, "group 1 (gpu): vendor: Input should be"),
        ({"replicas": "many"}, "group 1 (gpu): replicas: Input should be a valid integer"),
        ({"cpu": None}, "group 1 (gpu): cpu: Input should be a valid string"),
        ({"colour": "red"}, "group 1 (gpu): colour: Extra inputs are not permitted"),
        ({"vendor": "none"}, "group 1 (gpu): a group with gpu_count > 0 needs a GPU vendor"),
        ({"gpu_min_cap_watts": 500, "gpu_max_cap_watts": 300}, "gpu_min_cap_watts is above"),
        ({"node_name": "x"}, "exactly one of node_name_prefix and node_name"),
    ],
)
def test_broken_groups_are_named_with_the_field(change: dict[str, object], needle: str) -> None:
    broken = {**GOOD, **change}
    data = {"nodes": [dict(GOOD, node_name_prefix="ok"), broken]}
    with pytest.raises(InventoryError) as excinfo:
        parse_inventory(data, "cluster.yaml")
    assert needle in str(excinfo.value)
    assert str(excinfo.value).startswith("cluster.yaml: ")


def test_broken_files_are_reported(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="expected a mapping with a 'nodes' list"):
        parse_inventory({"groups": []}, "x.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: [\n")
    with pytest.raises(InventoryError, match="inventory is not valid YAML at line 2"):
        load_inventory(bad)
    with pytest.raises(InventoryError, match="node names repeat"):
        parse_inventory({"nodes": [GOOD, GOOD]})


@pytest.mark.parametrize(
    ("raw", "safe"),
    [
        ("INTEL(R) XEON(R) GOLD 6530", "INTEL-R-XEON-R-GOLD-6530"),
        ("AMD EPYC 9654 96-Core Processor", "AMD-EPYC-9654-96-Core-Processor"),
        ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
        (
            "Intel(R) Xeon(R) Platinum 8260 CPU @ 2.40GHz",
            "Intel-R-Xeon-R-Platinum-8260-CPU-2.40GHz",
        ),
        ("x" * 80, "x" * 63),
    ],
)
def test_label_safe_values(raw: str, safe: str) -> None:
    assert label_safe(raw) == safe
    assert LABEL_VALUE.match(label_safe(raw))


def test_kwok_nodes_carry_the_inventory_hardware() -> None:
    inventory = load_inventory(INVENTORIES / "02-cluster-nodes-5k.yaml")
    nodes = node_manifests(inventory)
    assert len(nodes) == 5000
    by_name = {n["metadata"]["name"]: n for n in nodes}
    mi300 = by_name["kwok-mi300x-0"]
    labels, status = mi300["metadata"]["labels"], mi300["status"]
    assert labels[keys.MANAGED_LABEL] == "true"
    assert labels[keys.HW_GPU_COUNT_LABEL] == "8"
    assert labels["amd.com/gpu.product"] == "AMD-Instinct-MI300X"
    assert mi300["metadata"]["annotations"][keys.HW_GPU_MODEL_ANNOTATION] == "AMD Instinct MI300X"
    assert status["capacity"]["amd.com/gpu"] == "8"
    assert status["capacity"]["cpu"] == "128"
    assert status["capacity"]["memory"] == f"{1536 * 1024}Mi"
    for node in nodes:
        assert all(LABEL_VALUE.match(v) for v in node["metadata"]["labels"].values())
    cpu_only = next(n for n in nodes if n["metadata"]["labels"][keys.HW_GPU_COUNT_LABEL] == "0")
    assert not any(k.endswith("/gpu") for k in cpu_only["status"]["capacity"])


def test_a_small_sample_still_has_every_family() -> None:
    inventory = load_inventory(INVENTORIES / "02-cluster-nodes-5k.yaml")
    sample = node_manifests(inventory, limit=8)
    models = {
        n["metadata"]["annotations"].get(keys.HW_GPU_MODEL_ANNOTATION)
        or n["metadata"]["annotations"][keys.HW_CPU_MODEL_ANNOTATION]
        for n in sample
    }
    assert len(models) == 8
