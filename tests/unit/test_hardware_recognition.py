"""The one recognition of a node's hardware (manager, simulator and `joulie plan`): NodeHardware
first, labels and annotations as the fallback, physical cores for density."""

from __future__ import annotations

from pathlib import Path

import yaml

from hack.cluster.nodes import node_manifest
from joulie.api import keys
from joulie.api.gpu import node_gpu_count
from joulie.api.inventory import NodeGroup, parse_inventory
from joulie.api.nodehardware import NodeHardware
from joulie.cli.plan import inventory_nodes
from joulie.core.twin import hardware_density
from joulie.hardware.catalog import Catalog
from joulie.hardware.recognition import hardware_view
from joulie.kube.projections import node_projection
from tests.support.builders import inventory_group

CATALOG = Catalog.load()
EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "spec" / "nodehardware.yaml"


def example_status() -> NodeHardware:
    return NodeHardware.model_validate(yaml.safe_load(EXAMPLE.read_text()))


def test_nodehardware_is_preferred_over_labels() -> None:
    status = example_status().status
    labels = {
        keys.HW_CPU_MODEL_LABEL: "AMD-EPYC-9654",
        keys.HW_GPU_COUNT_LABEL: "2",
        keys.HW_GPU_MODEL_LABEL: "NVIDIA-L40S",
    }
    view = hardware_view(status, labels, {}, {}, CATALOG)
    assert view.gpu_count == 8
    assert view.gpu_model == "NVIDIA_H100_NVL"
    assert view.cpu_model == "INTEL_XEON_PLATINUM_8260"
    assert view.family == "gpu:NVIDIA_H100_NVL"
    assert view.catalog_gpu_range == (200, 400)


def test_labels_stand_in_without_nodehardware() -> None:
    labels = {keys.HW_CPU_MODEL_LABEL: "INTEL-R-XEON-R-GOLD-6530", keys.HW_GPU_COUNT_LABEL: "0"}
    view = hardware_view(None, labels, {}, {"cpu": "64"}, CATALOG)
    assert view.family == "cpu:INTEL_XEON_GOLD_6530"
    assert view.catalog_gpu_range is None
    annotated = hardware_view(
        None,
        {keys.HW_GPU_COUNT_LABEL: "4"},
        {
            keys.HW_CPU_MODEL_ANNOTATION: "AMD EPYC 9534 64-Core Processor",
            keys.HW_GPU_MODEL_ANNOTATION: "NVIDIA H100 80GB HBM3",
        },
        {},
        CATALOG,
    )
    assert annotated.family == "gpu:NVIDIA_H100_SXM"
    assert annotated.gpu_count == 4


def test_unrecognised_models_keep_their_raw_name_as_their_own_family() -> None:
    view = hardware_view(
        None, {keys.HW_GPU_COUNT_LABEL: "2", "nvidia.com/gpu.product": "Tesla-X"}, {}, {}, CATALOG
    )
    assert view.family == "gpu:TESLA_X"
    assert view.catalog_gpu_range is None
    bare = hardware_view(None, {}, {}, {}, CATALOG)
    assert bare.family == "cpu:unknown-cpu"


def test_gpu_count_from_labels_or_allocatable() -> None:
    assert node_gpu_count({keys.HW_GPU_COUNT_LABEL: "8"}, {"nvidia.com/gpu": "4"}) == 8
    assert node_gpu_count({}, {"nvidia.com/gpu": "4", "cpu": "64"}) == 4
    assert node_gpu_count({keys.HW_GPU_COUNT_LABEL: "many"}, {"amd.com/gpu": "2"}) == 2
    # Only MIG slices: the node has GPUs, but the slices do not say how many boards.
    assert node_gpu_count({}, {"nvidia.com/mig-1g.10gb": "7"}) == 1
    assert node_gpu_count({}, {"cpu": "8"}) == 0


def test_twin_figures_from_nodehardware_then_labels_then_catalog() -> None:
    # The spec's NodeHardware example: sockets as the agent reported them; no physicalCores and
    # no cap range, so cores and the per-socket maximum come from the recognised catalog model.
    status = example_status().status
    view = hardware_view(status, {}, {}, {}, CATALOG)
    assert (view.sockets, view.physical_cores) == (2, 48)
    assert view.cpu_max_w_per_socket == CATALOG.cpu("INTEL_XEON_PLATINUM_8260").tdp_w
    # A cap range the agent read from the hardware wins over the catalog.
    raw = yaml.safe_load(EXAMPLE.read_text())
    raw["status"]["cpu"]["capRange"] = {"maxWattsPerSocket": 205}
    ranged = NodeHardware.model_validate(raw).status
    assert hardware_view(ranged, {}, {}, {}, CATALOG).cpu_max_w_per_socket == 205

    labels = {
        keys.HW_CPU_MODEL_LABEL: "AMD-EPYC-9654",
        keys.HW_CPU_SOCKETS_LABEL: "2",
        keys.HW_CPU_CORES_LABEL: "192",
    }
    view = hardware_view(None, labels, {}, {"cpu": "384"}, CATALOG)
    assert (view.sockets, view.physical_cores, view.cpu_max_w_per_socket) == (2, 192, 360)
    # NFD's socket label when Joulie's is missing; cores from the catalog's cores per socket.
    nfd = {keys.HW_CPU_MODEL_LABEL: "AMD-EPYC-9654", keys.NFD_CPU_SOCKETS_LABEL: "2"}
    assert hardware_view(None, nfd, {}, {}, CATALOG).physical_cores == 192
    # Nothing known: nothing invented (the twin then scores the node neutral).
    bare = hardware_view(None, {keys.HW_CPU_SOCKETS_LABEL: "two"}, {}, {}, CATALOG)
    assert (bare.sockets, bare.physical_cores, bare.cpu_max_w_per_socket) == (None, None, None)


def cpu_only_example(**cpu: object) -> NodeHardware:
    """The spec's example without its GPUs, CPU fields replaced by ``cpu`` (camelCase)."""
    raw = yaml.safe_load(EXAMPLE.read_text())
    raw["status"]["cpu"].update(cpu)
    raw["status"]["gpu"] = {"present": False, "count": 0}
    return NodeHardware.model_validate(raw)


def test_density_counts_physical_cores_never_logical_cpus() -> None:
    # 2 x 24-core Xeon 8260 with SMT: the agent reports 96 logical CPUs. Density is measured in
    # physical cores against the 192-core reference, so this node is a quarter of it, not half.
    status = cpu_only_example(totalCores=96, coresPerSocket=48).status
    view = hardware_view(status, {}, {}, {"cpu": "96"}, CATALOG)
    assert view.physical_cores == 48
    assert hardware_density(view.physical_cores, view.gpu_count) == 25.0
    # A cores label is physical cores too, and wins over the catalog.
    labelled = hardware_view(status, {keys.HW_CPU_CORES_LABEL: "40"}, {}, {}, CATALOG)
    assert labelled.physical_cores == 40
    # What the agent counted itself wins over both.
    counted = cpu_only_example(totalCores=96, physicalCores=44).status
    assert counted is not None
    assert counted.cpu is not None
    assert counted.cpu.physical_cores == 44
    assert (
        hardware_view(counted, {keys.HW_CPU_CORES_LABEL: "40"}, {}, {}, CATALOG).physical_cores
        == 44
    )


def test_physical_cores_round_trip_in_camel_case() -> None:
    hw = cpu_only_example(physicalCores=48)
    assert hw.model_dump(by_alias=True, exclude_none=True)["status"]["cpu"]["physicalCores"] == 48


def test_same_model_from_nodehardware_or_labels_forms_one_family() -> None:
    # The agent's report of the spec's example node and the same node before any agent ran,
    # described only by labels (label-safe names) or annotations (exact names).
    reported = hardware_view(example_status().status, {}, {}, {}, CATALOG)
    by_labels = hardware_view(
        None,
        {
            keys.HW_CPU_MODEL_LABEL: "Intel-R-Xeon-R-Platinum-8260-CPU-2.40GHz",
            keys.HW_GPU_COUNT_LABEL: "8",
            "nvidia.com/gpu.product": "NVIDIA-H100-NVL",
        },
        {},
        {},
        CATALOG,
    )
    by_annotations = hardware_view(
        None,
        {},
        {
            keys.HW_CPU_MODEL_ANNOTATION: "Intel(R) Xeon(R) Platinum 8260 CPU @ 2.40GHz",
            keys.HW_GPU_MODEL_ANNOTATION: "NVIDIA H100 NVL",
        },
        {"nvidia.com/gpu": "8"},
        CATALOG,
    )
    for view in (by_labels, by_annotations):
        assert (view.family, view.cpu_model, view.gpu_model) == (
            reported.family,
            reported.cpu_model,
            reported.gpu_model,
        )
        assert view.catalog_gpu_range == reported.catalog_gpu_range
    # A CPU-only node: the agent's raw name alone and the label-safe label agree as well.
    raw_only = cpu_only_example(model=None).status
    labelled = {keys.HW_CPU_MODEL_LABEL: "Intel-R-Xeon-R-Platinum-8260-CPU-2.40GHz"}
    assert (
        hardware_view(raw_only, {}, {}, {}, CATALOG).family
        == hardware_view(None, labelled, {}, {}, CATALOG).family
        == "cpu:INTEL_XEON_PLATINUM_8260"
    )


def test_gpu_product_label_keys_are_honoured_in_order() -> None:
    labels = {
        keys.HW_GPU_COUNT_LABEL: "4",
        "example.com/accelerator": "NVIDIA-L40S",
        "nvidia.com/gpu.product": "NVIDIA-H100-NVL",
    }
    assert hardware_view(None, labels, {}, {}, CATALOG).gpu_model == "NVIDIA_H100_NVL"
    custom = ("example.com/accelerator", "nvidia.com/gpu.product")
    assert hardware_view(None, labels, {}, {}, CATALOG, custom).gpu_model == "NVIDIA_L40S"


EXP_INVENTORY = parse_inventory(
    {
        "nodes": [
            inventory_group("gpu", replicas=2, gpus=8, product="NVIDIA H100 80GB HBM3"),
            inventory_group(
                node_name="odd",
                vendor="amd",
                product="Mystery Accelerator 9",
                cpu="Mystery CPU 1",
                cpu_sockets=1,
                cpu_cores=8,
                memory_gib=64,
                gpus=1,
            ),
            inventory_group("cpu", cpu="INTEL(R) XEON(R) GOLD 6530", cpu_cores=64, memory_gib=512),
        ]
    }
)


def test_joulie_plan_recognises_inventory_nodes_as_the_manager_recognises_kwok_nodes() -> None:
    project = node_projection(
        annotation_keys=[keys.HW_CPU_MODEL_ANNOTATION, keys.HW_GPU_MODEL_ANNOTATION]
    )
    planned = {n.name: n.family for n in inventory_nodes(EXP_INVENTORY, CATALOG)}
    for name, group in EXP_INVENTORY.nodes_by_name():
        node = project(node_manifest(name, group))
        view = hardware_view(None, node.labels, node.annotations, node.allocatable, CATALOG)
        assert planned[name] == view.family
    assert planned == {
        "gpu-0": "gpu:NVIDIA_H100_SXM",
        "gpu-1": "gpu:NVIDIA_H100_SXM",
        "odd": "gpu:MYSTERY_ACCELERATOR_9",  # unrecognised: its name in the catalog's key form
        "cpu-0": "cpu:INTEL_XEON_GOLD_6530",
    }


def test_inventory_group_metadata_is_what_a_kwok_node_carries() -> None:
    group: NodeGroup = EXP_INVENTORY.nodes[0]
    manifest = node_manifest("gpu-0", group)
    assert group.hardware_labels().items() <= manifest["metadata"]["labels"].items()
    assert group.hardware_annotations().items() <= manifest["metadata"]["annotations"].items()
    assert manifest["status"]["allocatable"] == group.capacity()
