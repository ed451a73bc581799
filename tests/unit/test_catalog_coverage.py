"""The hardware catalog's GPU coverage and its per-model facts: tensor throughput, memory
bandwidth, the GPU power-cap law and the CPU all-core clock."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from joulie.api.enums import DiscoveryQuality
from joulie.api.inventory import label_safe
from joulie.hardware import catalog as catalog_module
from joulie.hardware.catalog import (
    DEFAULT_CAP_EXPONENT,
    DEFAULT_FLOOR_SHARE,
    DEFAULT_KNEE_SHARE,
    Catalog,
    CatalogError,
)
from tests.support.file_edits import drop_at, set_at
from tests.support.file_edits import embedded_catalog_data as embedded_data

UPSTREAM_CATALOG = (
    Path(__file__).resolve().parents[1] / "data" / "inventories" / "hardware-catalog.yaml"
)

DEFAULT_LAW_TEXT = (
    "law: modelling assumption: the mean of the two boards fitted to Zeus (NSDI '23) "
    "measurements (V100 PCIe, A40)"
)
NOMINAL_ALL_CORE_TEXT = "all_core: nominal (base) clock, no all-core figure published"


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.load()


def load_edited(tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Catalog:
    data = copy.deepcopy(embedded_data())
    edit(data)
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(data))
    return Catalog.load(path)


# --- coverage: the named boards, matched as nvidia-smi / rocm-smi report them ----------------


@pytest.mark.parametrize(
    ("reported", "key"),
    [
        ("Tesla V100-SXM2-16GB", "NVIDIA_V100_SXM2_16GB"),
        ("Tesla V100-SXM2-32GB", "NVIDIA_V100_SXM2_32GB"),
        ("Tesla V100-PCIE-16GB", "NVIDIA_V100_PCIE"),
        ("Tesla V100-PCIE-32GB", "NVIDIA_V100_PCIE"),
        ("Tesla T4", "NVIDIA_T4"),
        ("NVIDIA A10", "NVIDIA_A10"),
        ("NVIDIA A10G", "NVIDIA_A10G"),
        ("NVIDIA A30", "NVIDIA_A30"),
        ("NVIDIA A40", "NVIDIA_A40"),
        ("NVIDIA H200", "NVIDIA_H200_SXM"),
        ("NVIDIA B200", "NVIDIA_B200"),
        ("NVIDIA L4", "NVIDIA_L4"),
        ("Tesla P100-PCIE-16GB", "NVIDIA_P100_PCIE_16GB"),
        ("AMD Instinct MI250X", "AMD_INSTINCT_MI250X"),
        ("AMD Instinct MI325X", "AMD_INSTINCT_MI325X"),
        ("AMD Instinct MI300X", "AMD_INSTINCT_MI300X"),
    ],
)
def test_named_boards_match_from_their_reported_names(
    catalog: Catalog, reported: str, key: str
) -> None:
    for form in (reported, label_safe(reported)):
        match = catalog.match_gpu(form)
        assert (match.key, match.quality) == (key, DiscoveryQuality.EXACT), form


@pytest.mark.parametrize(
    "reported",
    [
        "NVIDIA A100",  # which A100? not guessed
        "Tesla V100S-PCIE-32GB",  # V100S: faster memory, not a V100
        "NVIDIA H200 NVL",  # the 600 W PCIe card, not the SXM board
        "AMD Instinct MI250",  # MI250 is not MI250X
        "Tesla P100-SXM2-16GB",  # the 300 W board
    ],
)
def test_near_miss_board_names_are_not_matched(catalog: Catalog, reported: str) -> None:
    match = catalog.match_gpu(reported)
    assert (match.key, match.quality) == (None, DiscoveryQuality.HEURISTIC)


def test_every_model_spelled_in_the_upstream_catalog_matches(catalog: Catalog) -> None:
    upstream = yaml.safe_load(UPSTREAM_CATALOG.read_text())
    for section, match in (("gpuModels", catalog.match_gpu), ("cpuModels", catalog.match_cpu)):
        assert upstream[section], section
        for key, entry in upstream[section].items():
            for name in (key, *entry.get("aliases", [])):
                assert match(name).quality is DiscoveryQuality.EXACT, f"{section}: {name!r}"
                assert match(name).key == key, f"{section}: {name!r} -> {match(name).key}"


def test_the_catalog_covers_the_named_generations(catalog: Catalog) -> None:
    assert {
        "NVIDIA_V100_SXM2_16GB",
        "NVIDIA_V100_SXM2_32GB",
        "NVIDIA_V100_PCIE",
        "NVIDIA_P100_PCIE_16GB",
        "NVIDIA_T4",
        "NVIDIA_A10",
        "NVIDIA_A10G",
        "NVIDIA_A30",
        "NVIDIA_A40",
        "NVIDIA_H200_SXM",
        "NVIDIA_B200",
        "NVIDIA_L4",
        "AMD_INSTINCT_MI250X",
        "AMD_INSTINCT_MI325X",
    } <= set(catalog.gpus)
    assert (catalog.gpu("NVIDIA_H200_SXM").max_w, catalog.gpu("NVIDIA_P100_PCIE_16GB").max_w) == (
        700,
        250,
    )


# --- the new facts --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "tflops", "gbs"),
    [
        ("NVIDIA_H100_SXM", 989.5, 3350),  # datasheet 1,979 with sparsity, halved
        ("NVIDIA_H200_SXM", 989.5, 4800),
        ("NVIDIA_A100_SXM", 312, 2039),
        ("NVIDIA_A40", 149.7, 696),
        ("NVIDIA_V100_PCIE", 112, 900),
        ("NVIDIA_T4", 65, 320),
        ("AMD_INSTINCT_MI300X", 1307.4, 5300),
    ],
)
def test_compute_and_memory_facts_load(
    catalog: Catalog, key: str, tflops: float, gbs: float
) -> None:
    gpu = catalog.gpu(key)
    assert (gpu.dense_tensor_tflops, gpu.memory_bandwidth_gbs) == (tflops, gbs)
    assert "compute: " in gpu.source
    assert "memory: " in gpu.source


def test_every_gpu_entry_states_both_facts_and_cites_them() -> None:
    for key, entry in embedded_data()["gpus"].items():
        assert entry["dense_tensor_tflops"] > 0, key
        assert entry["memory_bandwidth_gbs"] > 0, key
        assert {"compute", "memory"} <= set(entry["source"]), key
        assert "speed_exponent" not in entry, key


def test_newer_boards_are_faster_than_older_ones(catalog: Catalog) -> None:
    # A units slip (TB/s typed as GB/s, sparse typed as dense) would break this ordering.
    order = ["NVIDIA_P100_PCIE_16GB", "NVIDIA_V100_PCIE", "NVIDIA_A100_SXM", "NVIDIA_H100_SXM"]
    tflops = [catalog.gpu(key).dense_tensor_tflops for key in order]
    assert tflops == sorted(tflops)
    assert (
        catalog.gpu("NVIDIA_B200").memory_bandwidth_gbs
        > catalog.gpu("NVIDIA_H200_SXM").memory_bandwidth_gbs
        > catalog.gpu("NVIDIA_H100_SXM").memory_bandwidth_gbs
    )


# --- the power-cap law ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "idle", "knee", "floor", "exponent"),
    [
        ("NVIDIA_V100_PCIE", 35, 143, 35, 0.31),
        ("NVIDIA_A40", 30, 190, 71, 0.27),
    ],
)
def test_fitted_laws_are_the_zeus_fits(
    catalog: Catalog, key: str, idle: float, knee: float, floor: float, exponent: float
) -> None:
    gpu = catalog.gpu(key)
    assert (gpu.idle_w, gpu.cap_knee_w, gpu.cap_floor_w, gpu.cap_exponent) == (
        idle,
        knee,
        floor,
        exponent,
    )
    assert "law: fitted by this project" in gpu.source
    assert "NSDI 2023" in gpu.source
    assert DEFAULT_LAW_TEXT not in gpu.source


def test_the_default_law_is_derived_from_idle_and_max_where_none_is_fitted(
    catalog: Catalog,
) -> None:
    fitted = {key for key, e in embedded_data()["gpus"].items() if "cap_law" in e}
    assert fitted == {"NVIDIA_V100_PCIE", "NVIDIA_A40"}
    for key, gpu in catalog.gpus.items():
        if key in fitted:
            continue
        span = gpu.max_w - gpu.idle_w
        assert gpu.cap_knee_w == pytest.approx(gpu.idle_w + DEFAULT_KNEE_SHARE * span), key
        assert gpu.cap_floor_w == pytest.approx(gpu.idle_w + DEFAULT_FLOOR_SHARE * span), key
        assert gpu.cap_exponent == DEFAULT_CAP_EXPONENT, key
        assert gpu.source.endswith(DEFAULT_LAW_TEXT), key
    t4 = catalog.gpu("NVIDIA_T4")  # idle 10, max 70
    assert (t4.cap_knee_w, t4.cap_floor_w) == pytest.approx((43.0, 14.8))


def test_default_law_constants_are_the_mean_of_the_fitted_boards(catalog: Catalog) -> None:
    boards = [catalog.gpu("NVIDIA_V100_PCIE"), catalog.gpu("NVIDIA_A40")]
    knee = [(g.cap_knee_w - g.idle_w) / (g.max_w - g.idle_w) for g in boards]
    floor = [(g.cap_floor_w - g.idle_w) / (g.max_w - g.idle_w) for g in boards]
    assert pytest.approx(sum(knee) / 2, abs=0.005) == DEFAULT_KNEE_SHARE
    assert pytest.approx(sum(floor) / 2, abs=0.005) == DEFAULT_FLOOR_SHARE
    assert pytest.approx(sum(g.cap_exponent for g in boards) / 2) == DEFAULT_CAP_EXPONENT


def test_a_file_without_the_default_law_source_still_cites_it(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(
        "catalog_version: 1\n"
        "sources: {s: 'a datasheet'}\n"
        "gpus:\n"
        "  ACME_X1: {vendor: acme, min_w: 50, max_w: 100, default_w: 100, idle_w: 10,\n"
        "            dense_tensor_tflops: 20, memory_bandwidth_gbs: 300,\n"
        "            source: {power: s, min: s, idle: s, compute: s, memory: s}}\n"
    )
    gpu = Catalog.load(path).gpu("ACME_X1")
    assert (gpu.cap_knee_w, gpu.cap_floor_w) == pytest.approx((59.5, 17.2))
    assert gpu.source.endswith(DEFAULT_LAW_TEXT)


def test_the_default_law_follows_the_module_constants(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(catalog_module, "DEFAULT_KNEE_SHARE", 0.5)
    gpu = load_edited(tmp_path, lambda data: None).gpu("NVIDIA_T4")
    assert gpu.cap_knee_w == pytest.approx(40.0)


# --- the CPU all-core clock -----------------------------------------------------------------


def test_published_all_core_clocks_load(catalog: Catalog) -> None:
    for key in ("AMD_EPYC_9654", "AMD_EPYC_9534"):
        cpu = catalog.cpu(key)
        assert cpu.all_core_ghz == 3.55
        assert "all_core: AMD EPYC 9004" in cpu.source
        assert NOMINAL_ALL_CORE_TEXT not in cpu.source


def test_unpublished_all_core_clocks_fall_back_to_base(catalog: Catalog) -> None:
    published = {key for key, e in embedded_data()["cpus"].items() if "all_core_ghz" in e}
    assert published == {"AMD_EPYC_9654", "AMD_EPYC_9534"}
    for key, cpu in catalog.cpus.items():
        assert cpu.base_ghz <= cpu.all_core_ghz <= cpu.boost_ghz, key
        if key not in published:
            assert cpu.all_core_ghz == cpu.base_ghz, key
            assert cpu.source.endswith(NOMINAL_ALL_CORE_TEXT), key
    # Intel ARK publishes no all-core turbo: never a guessed figure for a Xeon.
    assert all(
        cpu.all_core_ghz == cpu.base_ghz for cpu in catalog.cpus.values() if cpu.vendor == "intel"
    )


# --- refused files ----------------------------------------------------------------------------


A40 = ("gpus", "NVIDIA_A40")
V100 = ("gpus", "NVIDIA_V100_PCIE")
L4 = ("gpus", "NVIDIA_L4")
EPYC = ("cpus", "AMD_EPYC_9654")
XEON = ("cpus", "INTEL_XEON_GOLD_6530")


@pytest.mark.parametrize(
    ("edit", "model", "field", "words"),
    [
        # the facts
        (drop_at((*A40, "dense_tensor_tflops")), "NVIDIA_A40", "dense_tensor_tflops", "required"),
        (set_at((*A40, "dense_tensor_tflops"), 0), "NVIDIA_A40", "dense_tensor_tflops", "greater"),
        (drop_at((*L4, "memory_bandwidth_gbs")), "NVIDIA_L4", "memory_bandwidth_gbs", "required"),
        (set_at((*L4, "memory_bandwidth_gbs"), -1), "NVIDIA_L4", "memory_bandwidth_gbs", "greater"),
        (drop_at((*L4, "source", "compute")), "NVIDIA_L4", "source.compute", "required"),
        (drop_at((*L4, "source", "memory")), "NVIDIA_L4", "source.memory", "required"),
        (set_at((*L4, "source", "memory"), "nope"), "NVIDIA_L4", "source.memory", "not listed"),
        # a fitted law
        (set_at((*A40, "cap_law", "floor_w"), 29), "NVIDIA_A40", "cap_law.floor_w", "idle_w"),
        (set_at((*A40, "cap_law", "floor_w"), 100), "NVIDIA_A40", "cap_law.floor_w", "min_w"),
        (set_at((*A40, "cap_law", "knee_w"), 71), "NVIDIA_A40", "cap_law.knee_w", "floor_w"),
        (set_at((*A40, "cap_law", "knee_w"), 300), "NVIDIA_A40", "cap_law.knee_w", "max_w"),
        (
            set_at((*V100, "cap_law", "exponent"), 0),
            "NVIDIA_V100_PCIE",
            "cap_law.exponent",
            "(0, 1)",
        ),
        (
            set_at((*V100, "cap_law", "exponent"), 1),
            "NVIDIA_V100_PCIE",
            "cap_law.exponent",
            "(0, 1)",
        ),
        (
            set_at((*V100, "cap_law", "exponent"), -0.3),
            "NVIDIA_V100_PCIE",
            "cap_law.exponent",
            "(0, 1)",
        ),
        (drop_at((*V100, "cap_law", "knee_w")), "NVIDIA_V100_PCIE", "cap_law.knee_w", "required"),
        (
            set_at((*V100, "cap_law", "slope"), 1),
            "NVIDIA_V100_PCIE",
            "cap_law.slope",
            "not permitted",
        ),
        (drop_at((*V100, "source", "law")), "NVIDIA_V100_PCIE", "source.law", "needs a source"),
        (set_at((*L4, "source", "law"), "zeus-fit"), "NVIDIA_L4", "source.law", "no cap_law"),
        # the default law: min_w 20 puts the computed floor (20.48 W) at or above min_w
        (set_at((*L4, "min_w"), 20), "NVIDIA_L4", "cap_law.floor_w", "class default"),
        # the old field is gone
        (set_at((*L4, "speed_exponent"), 0.6), "NVIDIA_L4", "speed_exponent", "not permitted"),
        # the CPU all-core clock
        (set_at((*EPYC, "all_core_ghz"), 2.0), "AMD_EPYC_9654", "all_core_ghz", "base_ghz"),
        (set_at((*EPYC, "all_core_ghz"), 3.9), "AMD_EPYC_9654", "all_core_ghz", "boost_ghz"),
        (set_at((*EPYC, "all_core_ghz"), 0), "AMD_EPYC_9654", "all_core_ghz", "greater"),
        (set_at((*XEON, "all_core_ghz"), 3.0), "INTEL_XEON_GOLD_6530", "source.all_core", "needs"),
        (
            set_at((*XEON, "source", "all_core"), "intel-ark"),
            "INTEL_XEON_GOLD_6530",
            "source.all_core",
            "no all_core_ghz",
        ),
    ],
)
def test_a_broken_fact_or_law_is_refused_naming_model_and_field(
    tmp_path: Path, edit: Callable[[dict[str, Any]], None], model: str, field: str, words: str
) -> None:
    with pytest.raises(CatalogError) as caught:
        load_edited(tmp_path, edit)
    message = str(caught.value)
    assert f"{model}.{field}" in message
    assert words in message


def test_the_floor_may_equal_idle(tmp_path: Path) -> None:
    loaded = load_edited(tmp_path, set_at((*A40, "cap_law", "floor_w"), 30))
    assert loaded.gpu("NVIDIA_A40").cap_floor_w == loaded.gpu("NVIDIA_A40").idle_w == 30
