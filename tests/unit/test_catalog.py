"""The embedded hardware catalog, model-name matching and hardware families."""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from joulie.api.enums import DiscoveryQuality
from joulie.api.inventory import label_safe, load_inventory
from joulie.hardware.catalog import Catalog, CatalogError, CpuSpec, GpuSpec, normalize_model
from joulie.hardware.family import hardware_family
from tests.support.file_edits import drop_at, set_at
from tests.support.file_edits import embedded_catalog_data as embedded_data

INVENTORIES = Path(__file__).resolve().parents[1] / "data" / "inventories"
INVENTORY_FILES = sorted(INVENTORIES.glob("0*.yaml"))


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.load()


def inventory_models() -> list[tuple[str, str, str]]:
    """(file, "cpu"|"gpu", raw name) for every model named in every upstream inventory."""
    seen: list[tuple[str, str, str]] = []
    for path in INVENTORY_FILES:
        for group in load_inventory(path).nodes:
            seen.append((path.name, "cpu", group.cpu))
            if group.gpu_count:
                seen.append((path.name, "gpu", group.product))
    return sorted(set(seen))


# --- matching ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("file", "kind", "raw"), inventory_models())
def test_every_inventory_model_matches_exactly_raw_and_label_safe(
    catalog: Catalog, file: str, kind: str, raw: str
) -> None:
    match = catalog.match_cpu if kind == "cpu" else catalog.match_gpu
    for form in (raw, label_safe(raw)):
        result = match(form)
        assert result.quality is DiscoveryQuality.EXACT, f"{file}: {form!r} not recognised"
        assert result.key is not None
        assert result.raw == form
    assert match(raw).key == match(label_safe(raw)).key


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ("Intel(R) Xeon(R) Platinum 8260 CPU @ 2.40GHz", "INTEL_XEON_PLATINUM_8260"),
        ("Intel-R-Xeon-R-Platinum-8260-CPU-2.40GHz", "INTEL_XEON_PLATINUM_8260"),
        ("AMD EPYC 9654 96-Core Processor", "AMD_EPYC_9654"),
        ("AMD-EPYC-9654-96-Core-Processor", "AMD_EPYC_9654"),
        # Upstream's label path never matched this one (its defect 16).
        ("INTEL(R) XEON(R) GOLD 6530", "INTEL_XEON_GOLD_6530"),
        ("INTEL-R-XEON-R-GOLD-6530", "INTEL_XEON_GOLD_6530"),
        ("Intel® Xeon® Gold 6530", "INTEL_XEON_GOLD_6530"),
        ("  amd epyc 9375f  ", "AMD_EPYC_9375F"),
        ("AMD_EPYC_9965", "AMD_EPYC_9965"),  # a catalog key is its own alias
        ("INTEL(R) XEON(R) PLATINUM 8592+", "INTEL_XEON_PLATINUM_8592_PLUS"),
        ("INTEL-R-XEON-R-PLATINUM-8592", "INTEL_XEON_PLATINUM_8592_PLUS"),
    ],
)
def test_reported_cpu_names_resolve(catalog: Catalog, raw: str, key: str) -> None:
    match = catalog.match_cpu(raw)
    assert (match.key, match.quality, match.raw) == (key, DiscoveryQuality.EXACT, raw)


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA_H100_SXM"),
        ("NVIDIA-H100-80GB-HBM3", "NVIDIA_H100_SXM"),
        ("NVIDIA H100 NVL", "NVIDIA_H100_NVL"),
        ("NVIDIA-H100-NVL", "NVIDIA_H100_NVL"),
        ("NVIDIA L40S", "NVIDIA_L40S"),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA_A100_SXM"),
        ("NVIDIA A100 80GB PCIe", "NVIDIA_A100_PCIE_80GB"),
        ("NVIDIA A100-PCIE-40GB", "NVIDIA_A100_PCIE_40GB"),
        ("AMD Instinct MI300X", "AMD_INSTINCT_MI300X"),
        ("AMD_Instinct_MI300X", "AMD_INSTINCT_MI300X"),
        ("AMD Radeon PRO W7900", "AMD_RADEON_PRO_W7900"),
    ],
)
def test_reported_gpu_names_resolve(catalog: Catalog, raw: str, key: str) -> None:
    assert catalog.match_gpu(raw).key == key
    assert catalog.match_gpu(raw).quality is DiscoveryQuality.EXACT


@pytest.mark.parametrize(
    "raw",
    [
        "AMD EPYC 9654P 96-Core Processor",  # a different SKU that contains the name
        "AMD EPYC 96540",
        "AMD EPYC 965",
        "AMD EPYC",
        "Intel(R) Xeon(R) Gold 6530N",
        "Genuine Intel(R) CPU 0000%@",
        "NVIDIA H100 NVL",  # a GPU is not a CPU
    ],
)
def test_names_that_only_resemble_a_cpu_model_are_heuristic(catalog: Catalog, raw: str) -> None:
    match = catalog.match_cpu(raw)
    assert (match.key, match.quality, match.raw) == (None, DiscoveryQuality.HEURISTIC, raw)


@pytest.mark.parametrize(
    "raw", ["NVIDIA H100", "NVIDIA H100 NVL2", "NVIDIA L40", "NVIDIA A2", "Tesla V100S-PCIE-32GB"]
)
def test_unknown_gpu_names_are_heuristic(catalog: Catalog, raw: str) -> None:
    assert catalog.match_gpu(raw).quality is DiscoveryQuality.HEURISTIC
    assert catalog.match_gpu(raw).key is None


@pytest.mark.parametrize("raw", [None, "", "   "])
def test_missing_names_are_unavailable(catalog: Catalog, raw: str | None) -> None:
    for match in (catalog.match_cpu(raw), catalog.match_gpu(raw)):
        assert match.key is None
        assert match.quality is DiscoveryQuality.UNAVAILABLE
        assert match.raw == (raw or "")


def test_every_alias_and_its_label_safe_form_resolve_to_their_own_model(catalog: Catalog) -> None:
    data = embedded_data()
    for section, match in (("cpus", catalog.match_cpu), ("gpus", catalog.match_gpu)):
        for key, entry in data[section].items():
            for name in (key, *entry["aliases"]):
                assert match(name).key == key, name
                assert match(label_safe(name)).key == key, label_safe(name)


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("Intel(R) Xeon(R) Platinum 8260 CPU @ 2.40GHz", "intel xeon platinum 8260"),
        ("AMD EPYC 9654 96-Core Processor", "amd epyc 9654"),
        ("AMD-EPYC-9654-96-Core-Processor", "amd epyc 9654"),
        ("INTEL-R-XEON-R-GOLD-6530", "intel xeon gold 6530"),
        ("Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz", "intel core i7 8700"),
        ("NVIDIA A100-SXM4-80GB", "nvidia a100 sxm4 80gb"),
        ("AMD_Radeon_PRO_W7900", "amd radeon pro w7900"),
        ("", ""),
    ],
)
def test_normalize_model(raw: str, normal: str) -> None:
    assert normalize_model(raw) == normal


# --- the embedded catalog -----------------------------------------------------------------------


def test_embedded_catalog_loads_once_and_holds_the_required_models(catalog: Catalog) -> None:
    assert Catalog.load() is catalog  # parsed once per process
    assert Catalog.load("") is catalog
    for key in (
        "AMD_EPYC_9654",
        "AMD_EPYC_9655",
        "AMD_EPYC_9534",
        "AMD_EPYC_9965",
        "AMD_EPYC_9375F",
        "INTEL_XEON_GOLD_6530",
        "INTEL_XEON_PLATINUM_8260",
    ):
        assert isinstance(catalog.cpu(key), CpuSpec)
    assert len(catalog.cpus) > 7  # plus a few other common data-centre CPUs
    expected = {
        "NVIDIA_H100_NVL": (200, 400),
        "NVIDIA_H100_SXM": (200, 700),
        "NVIDIA_L40S": (100, 350),
        "AMD_INSTINCT_MI300X": (350, 750),
        "AMD_RADEON_PRO_W7900": (200, 295),
    }
    for key, (low, high) in expected.items():
        gpu = catalog.gpu(key)
        assert isinstance(gpu, GpuSpec)
        assert (gpu.min_w, gpu.max_w) == (low, high)
    assert {"NVIDIA_A100_SXM", "NVIDIA_A100_PCIE_80GB"} <= set(catalog.gpus)


def test_loading_the_embedded_file_by_path_gives_the_same_models(
    catalog: Catalog, tmp_path: Path
) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(embedded_data()))
    loaded = Catalog.load(path)
    assert loaded is not catalog
    assert dict(loaded.cpus) == dict(catalog.cpus)
    assert dict(loaded.gpus) == dict(catalog.gpus)


def test_unknown_keys_raise_key_error(catalog: Catalog) -> None:
    with pytest.raises(KeyError):
        catalog.cpu("AMD_EPYC_9654P")
    with pytest.raises(KeyError):
        catalog.gpu("NVIDIA_H100_SXM".lower())


def test_catalog_maps_are_read_only(catalog: Catalog) -> None:
    with pytest.raises(TypeError):
        catalog.cpus["X"] = catalog.cpu("AMD_EPYC_9654")  # type: ignore[index]


def test_cpu_numbers_are_sane(catalog: Catalog) -> None:
    for key, cpu in catalog.cpus.items():
        assert cpu.key == key
        assert cpu.vendor in {"amd", "intel"}
        assert cpu.cores >= 1
        assert 0 < cpu.base_ghz <= cpu.boost_ghz < 6
        assert 0 < cpu.ctdp_min_w <= cpu.tdp_w <= cpu.ctdp_max_w
        assert 0 < cpu.idle_w < cpu.tdp_w
        assert cpu.source.startswith("spec: ")
        if cpu.curve:
            assert "curve: " in cpu.source
            loads = [load for load, _ in cpu.curve]
            watts = [w for _, w in cpu.curve]
            assert all(0 <= load <= 100 for load in loads)
            assert loads == sorted(set(loads))
            assert watts == sorted(watts), f"{key}: curve falls with load"
            assert (loads[0], loads[-1]) == (0, 100)
            assert cpu.idle_w == watts[0]


def test_published_node_curves_are_split_per_socket(catalog: Catalog) -> None:
    published = embedded_data()["cpus"]["AMD_EPYC_9654"]["curve"]
    assert published["sockets"] == 2
    assert published["points"][0] == [0, 128]
    assert published["points"][-1] == [100, 817]
    curve = catalog.cpu("AMD_EPYC_9654").curve
    assert curve[0] == (0, 64)
    assert curve[-1] == (100, 408.5)
    assert len(curve) == 11
    # Proxies (another model's curve rescaled) are not measurements and are not carried.
    assert catalog.cpu("AMD_EPYC_9534").curve == ()


def test_gpu_numbers_are_sane(catalog: Catalog) -> None:
    for key, gpu in catalog.gpus.items():
        assert gpu.key == key
        assert gpu.vendor in {"nvidia", "amd"}
        assert 0 < gpu.min_w <= gpu.default_w <= gpu.max_w
        assert 0 < gpu.idle_w < gpu.min_w
        assert gpu.idle_w <= gpu.cap_floor_w < gpu.min_w
        assert gpu.cap_floor_w < gpu.cap_knee_w < gpu.max_w
        assert 0 < gpu.cap_exponent < 1
        assert gpu.dense_tensor_tflops > 0
        assert gpu.memory_bandwidth_gbs > 0
        for part in ("power: ", "min: ", "idle: ", "compute: ", "memory: ", "law: "):
            assert part in gpu.source, f"{key}: no {part!r} in its source"


# --- broken catalog files -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "model", "field"),
    [
        (set_at(("cpus", "AMD_EPYC_9654", "tdp_w"), -5), "AMD_EPYC_9654", "tdp_w"),
        (set_at(("cpus", "AMD_EPYC_9654", "tdp_w"), "hot"), "AMD_EPYC_9654", "tdp_w"),
        (drop_at(("cpus", "AMD_EPYC_9534", "cores")), "AMD_EPYC_9534", "cores"),
        (set_at(("cpus", "AMD_EPYC_9534", "cores_total"), 128), "AMD_EPYC_9534", "cores_total"),
        (set_at(("cpus", "AMD_EPYC_9534", "idle_w"), 400), "AMD_EPYC_9534", "idle_w"),
        (set_at(("cpus", "AMD_EPYC_9534", "boost_ghz"), 1.0), "AMD_EPYC_9534", "boost_ghz"),
        (set_at(("cpus", "AMD_EPYC_9534", "ctdp_w"), [300, 320]), "AMD_EPYC_9534", "ctdp_w"),
        (
            set_at(("cpus", "AMD_EPYC_9655", "curve", "points", 3), [30, 100]),
            "AMD_EPYC_9655",
            "curve.points[3]",
        ),
        (
            set_at(("cpus", "AMD_EPYC_9655", "curve", "points", 10), [120, 900]),
            "AMD_EPYC_9655",
            "curve.points[10]",
        ),
        (
            set_at(("cpus", "AMD_EPYC_9965", "source", "curve"), "no-such-source"),
            "AMD_EPYC_9965",
            "source.curve",
        ),
        (drop_at(("cpus", "AMD_EPYC_9965", "curve")), "AMD_EPYC_9965", "source.curve"),
        (
            set_at(("cpus", "AMD_EPYC_9534", "aliases"), ["AMD EPYC 9654 96-Core Processor"]),
            "AMD_EPYC_9534",
            "aliases",
        ),
        (set_at(("gpus", "NVIDIA_L40S", "default_w"), 400), "NVIDIA_L40S", "default_w"),
        (set_at(("gpus", "NVIDIA_L40S", "min_w"), 500), "NVIDIA_L40S", "min_w"),
        (set_at(("gpus", "NVIDIA_L40S", "idle_w"), 350), "NVIDIA_L40S", "idle_w"),
        (drop_at(("gpus", "AMD_INSTINCT_MI300X", "max_w")), "AMD_INSTINCT_MI300X", "max_w"),
        (
            set_at(("gpus", "AMD_INSTINCT_MI300X", "speed_exponent"), 0.5),  # no longer a field
            "AMD_INSTINCT_MI300X",
            "speed_exponent",
        ),
        (drop_at(("gpus", "NVIDIA_L4", "source")), "NVIDIA_L4", "source"),
    ],
)
def test_a_broken_catalog_names_model_and_field(
    tmp_path: Path, edit: Callable[[dict[str, Any]], None], model: str, field: str
) -> None:
    data = copy.deepcopy(embedded_data())
    edit(data)
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(CatalogError) as caught:
        Catalog.load(path)
    message = str(caught.value)
    assert str(path) in message
    assert model in message
    assert field in message


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("cpus: [\n", "not valid YAML"),
        ("- a list\n", "expected a mapping"),
        ("catalog_version: 2\nsources: {}\n", "catalog_version"),
        ("sources: {}\n", "catalog_version"),
    ],
)
def test_a_catalog_file_that_is_not_a_catalog_is_refused(
    tmp_path: Path, text: str, words: str
) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(text)
    with pytest.raises(CatalogError, match=words):
        Catalog.load(path)


def test_a_missing_catalog_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="cannot read"):
        Catalog.load(tmp_path / "absent.yaml")


def test_a_minimal_catalog_loads(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(
        "catalog_version: 1\n"
        "sources: {s: 'a datasheet'}\n"
        "gpus:\n"
        "  ACME_X1: {vendor: acme, aliases: ['Acme X1 Accelerator'], min_w: 50, max_w: 100,\n"
        "            default_w: 90, idle_w: 10, dense_tensor_tflops: 20,\n"
        "            memory_bandwidth_gbs: 300,\n"
        "            cap_law: {knee_w: 60, floor_w: 20, exponent: 0.3},\n"
        "            source: {power: s, min: s, idle: s, compute: s, memory: s, law: s}}\n"
    )
    loaded = Catalog.load(path)
    assert loaded.cpus == {}
    assert loaded.match_gpu("ACME-X1-Accelerator").key == "ACME_X1"
    gpu = loaded.gpu("ACME_X1")
    assert (gpu.cap_knee_w, gpu.cap_floor_w, gpu.cap_exponent) == (60, 20, 0.3)
    assert gpu.source == (
        "power: a datasheet; min: a datasheet; idle: a datasheet; compute: a datasheet; "
        "memory: a datasheet; law: a datasheet"
    )


# --- hardware families ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cpu", "gpu", "count", "family"),
    [
        ("AMD_EPYC_9654", "NVIDIA_H100_NVL", 8, "gpu:NVIDIA_H100_NVL"),
        ("AMD_EPYC_9654", None, 8, "gpu:unknown-gpu"),
        ("AMD_EPYC_9654", "", 1, "gpu:unknown-gpu"),
        ("AMD_EPYC_9654", "NVIDIA_H100_NVL", 0, "cpu:AMD_EPYC_9654"),
        ("Some New CPU", None, 0, "cpu:SOME_NEW"),  # "CPU" is noise, as in matching
        (None, None, 0, "cpu:unknown-cpu"),
        ("  ", None, 0, "cpu:unknown-cpu"),
    ],
)
def test_hardware_family(cpu: str | None, gpu: str | None, count: int, family: str) -> None:
    assert hardware_family(cpu, gpu, count) == family


def test_exp02_5k_inventory_has_eight_families(catalog: Catalog) -> None:
    inventory = load_inventory(INVENTORIES / "02-cluster-nodes-5k.yaml")
    families: Counter[str] = Counter()
    for group in inventory.nodes:
        cpu = catalog.match_cpu(group.cpu).key or group.cpu
        gpu = catalog.match_gpu(group.product or None)
        families[hardware_family(cpu, gpu.key or gpu.raw, group.gpu_count)] += group.replicas
    assert families == {
        "gpu:NVIDIA_H100_NVL": 1450,
        "gpu:NVIDIA_H100_SXM": 730,
        "gpu:NVIDIA_L40S": 850,
        "gpu:AMD_INSTINCT_MI300X": 240,
        "gpu:AMD_RADEON_PRO_W7900": 730,
        "cpu:AMD_EPYC_9965": 250,
        "cpu:AMD_EPYC_9375F": 250,
        "cpu:AMD_EPYC_9655": 500,
    }
    assert len(families) == 8
    assert sum(families.values()) == 5000
