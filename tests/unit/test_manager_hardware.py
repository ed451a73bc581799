"""The manager's view of a node's hardware: NodeHardware first, labels as the fallback."""

from __future__ import annotations

from pathlib import Path

import yaml

from joulie.api import keys
from joulie.api.gpu import node_gpu_count
from joulie.api.nodehardware import NodeHardware
from joulie.manager.hardware import hardware_view
from joulie.sim.catalog import Catalog

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
    assert view.family == "gpu:Tesla-X"
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
    # The spec's NodeHardware example: sockets and cores as the agent reported them; no cap range,
    # so the per-socket maximum is the catalog TDP of the recognised model.
    status = example_status().status
    view = hardware_view(status, {}, {}, {}, CATALOG)
    assert (view.sockets, view.total_cores) == (2, 96)
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
    assert (view.sockets, view.total_cores, view.cpu_max_w_per_socket) == (2, 192, 360)
    # NFD's socket label when Joulie's is missing; cores from the catalog's cores per socket.
    nfd = {keys.HW_CPU_MODEL_LABEL: "AMD-EPYC-9654", keys.NFD_CPU_SOCKETS_LABEL: "2"}
    assert hardware_view(None, nfd, {}, {}, CATALOG).total_cores == 192
    # Nothing known: nothing invented (the twin then scores the node neutral).
    bare = hardware_view(None, {keys.HW_CPU_SOCKETS_LABEL: "two"}, {}, {}, CATALOG)
    assert (bare.sockets, bare.total_cores, bare.cpu_max_w_per_socket) == (None, None, None)
