"""The workload generator: deterministic, sized to the inventory, every pod placeable."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import fields
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joulie.api.inventory import Inventory, NodeGroup, load_inventory, parse_inventory
from joulie.api.workload import DisruptionMode
from joulie.core.power_model import Throughput
from joulie.sim.generator import GeneratorOptions, diurnal_rate, generate
from joulie.sim.trace import Workload, dump_trace, parse_trace
from tests.support.builders import inventory_group

INVENTORIES = Path(__file__).resolve().parents[2] / "joulie" / "sim" / "data" / "inventories"
GIB = 1 << 30


@cache
def inventory(name: str) -> Inventory:
    return load_inventory(INVENTORIES / f"{name}.yaml")


@cache
def generated(name: str, hours: float, arrivals: str = "poisson") -> list[Workload]:
    return generate(inventory(name), GeneratorOptions(arrivals=arrivals), seed=7, hours=hours)


def _group(prefix: str, cores: int, memory: float, gpus: int = 0, vendor: str = "none") -> Any:
    """Three one-socket nodes of a CPU no catalog knows, with ``gpus`` boards of ``vendor``."""
    product = f"{vendor} accelerator" if gpus else ""
    return inventory_group(
        prefix, replicas=3, cpu="Some CPU", cpu_sockets=1, cpu_cores=cores, memory_gib=memory,
        gpus=gpus, product=product, vendor=vendor,
    )  # fmt: skip


CPU_ONLY = parse_inventory({"nodes": [_group("c", 32, 128)]})
GPU_ONLY = parse_inventory({"nodes": [_group("g", 48, 256, gpus=4, vendor="nvidia")]})


def cpu_core_hours(workloads: list[Workload]) -> float:
    """Core-hours the CPU-only workloads request (cores x pods x run time)."""
    return sum(w.cpu_millis / 1000 * w.pods * w.work_s for w in workloads if not w.gpus) / 3600


def gpu_hours(workloads: list[Workload]) -> dict[str, float]:
    """GPU-hours the workloads request, by GPU resource."""
    hours: dict[str, float] = {}
    for w in workloads:
        if w.gpu_resource is not None:
            hours[w.gpu_resource] = (
                hours.get(w.gpu_resource, 0.0) + w.gpus * w.pods * w.work_s / 3600
            )
    return hours


def fits_somewhere(w: Workload, inv: Inventory) -> bool:
    return any(fits_group(w, g) for g in inv.nodes)


def test_the_same_seed_gives_the_same_workloads_and_another_seed_others() -> None:
    inv = inventory("02-cluster-nodes")
    first = generate(inv, GeneratorOptions(), seed=3, hours=6)
    assert generate(inv, GeneratorOptions(), seed=3, hours=6) == first
    other = generate(inv, GeneratorOptions(), seed=4, hours=6)
    assert other != first
    assert [w.submit_s for w in other] != [w.submit_s for w in first]


@pytest.mark.parametrize(("name", "hours"), [("02-cluster-nodes", 24), ("02-cluster-nodes-5k", 60)])
def test_offered_load_matches_the_option_for_cpu_and_each_gpu_kind(name: str, hours: float) -> None:
    inv, workloads = inventory(name), generated(name, hours)
    load = GeneratorOptions().load
    cpu_capacity = sum(g.replicas * g.cpu_cores for g in inv.nodes if not g.gpu_count) * hours
    assert cpu_core_hours(workloads) == pytest.approx(load * cpu_capacity, rel=0.15)
    gpus: Counter[str] = Counter()
    for g in inv.nodes:
        if g.gpu_resource is not None:
            gpus[g.gpu_resource] += g.replicas * g.gpu_count
    per_kind = gpu_hours(workloads)
    assert set(per_kind) == set(gpus) == {"nvidia.com/gpu", "amd.com/gpu"}
    for resource, count in gpus.items():
        assert per_kind[resource] == pytest.approx(load * count * hours, rel=0.15), resource


def test_offered_load_is_reference_work_sized_to_what_the_parts_can_do() -> None:
    # Parts twice as fast as the reference do twice the reference work in an hour, so the same
    # load offers them twice the work; memory-bound inference counts at the memory speed.
    inv = inventory("02-cluster-nodes")
    groups = len(inv.nodes)
    plain = generate(inv, GeneratorOptions(), seed=5, hours=24)
    fast = generate(
        inv, GeneratorOptions(), seed=5, hours=24, speeds=[Throughput(2.0, 2.0, 2.0)] * groups
    )
    assert cpu_core_hours(fast) == pytest.approx(2 * cpu_core_hours(plain), rel=0.1)
    for resource, hours in gpu_hours(plain).items():
        assert gpu_hours(fast)[resource] == pytest.approx(2 * hours, rel=0.1), resource
    memory_only = generate(
        inv, GeneratorOptions(), seed=5, hours=24, speeds=[Throughput(1.0, 1.0, 3.0)] * groups
    )
    share = GeneratorOptions().gpu_inference_share
    for resource, hours in gpu_hours(plain).items():
        expected = hours * (1 + 2 * share)
        assert gpu_hours(memory_only)[resource] == pytest.approx(expected, rel=0.1), resource
    with pytest.raises(ValueError, match="inventory groups"):
        generate(inv, GeneratorOptions(), seed=5, hours=24, speeds=[Throughput()])


def test_a_lower_load_submits_less_work() -> None:
    inv = inventory("02-cluster-nodes")
    light = generate(inv, GeneratorOptions(load=0.2), seed=1, hours=24)
    heavy = generate(inv, GeneratorOptions(load=0.9), seed=1, hours=24)
    assert cpu_core_hours(light) < 0.5 * cpu_core_hours(heavy)
    assert sum(gpu_hours(light).values()) < 0.5 * sum(gpu_hours(heavy).values())


@pytest.mark.parametrize(("name", "hours"), [("02-cluster-nodes", 24), ("02-cluster-nodes-5k", 60)])
def test_every_pod_fits_some_node_group_and_gpus_are_of_the_inventory(
    name: str, hours: float
) -> None:
    inv, workloads = inventory(name), generated(name, hours)
    misfits = [w for w in workloads if not fits_somewhere(w, inv)]
    assert misfits == []
    kinds = {g.gpu_resource for g in inv.nodes if g.gpu_resource is not None}
    assert {w.gpu_resource for w in workloads if w.gpus} <= kinds


def test_the_job_mix_has_every_kind_with_its_shape() -> None:
    workloads = generated("02-cluster-nodes-5k", 60)
    by_kind: dict[str, list[Workload]] = {}
    for w in workloads:
        by_kind.setdefault(w.kind, []).append(w)
    assert set(by_kind) == {
        "cpu-small",
        "cpu-medium",
        "cpu-large",
        "gpu-inference",
        "gpu-training",
        "gpu-distributed",
    }
    assert all(w.gpus == 0 and 4000 <= w.cpu_millis <= 32000 for w in by_kind["cpu-small"])
    assert all(1800 <= w.work_s <= 7200 for w in by_kind["cpu-small"])
    assert all(96000 <= w.cpu_millis <= 192000 for w in by_kind["cpu-large"])
    assert all(1800 <= w.work_s <= 7200 for w in by_kind["gpu-inference"])
    assert all(1 <= w.gpus <= 4 for w in by_kind["gpu-inference"])
    gangs = by_kind["gpu-distributed"]
    assert all(2 <= w.pods <= 4 and w.min_count == w.pods for w in gangs)
    assert all(w.pods == 1 for w in workloads if w.kind != "gpu-distributed")
    share_all = sum(w.disruption is DisruptionMode.ALL for w in gangs) / len(gangs)
    assert share_all == pytest.approx(0.8, abs=0.05)
    # Training leans on the GPU clock, batch on the CPU clock.
    assert all(w.gpu_sensitivity >= 0.6 for w in by_kind["gpu-training"])
    assert all(w.cpu_sensitivity >= 0.6 for w in by_kind["cpu-medium"])


def fitting_nodes(w: Workload, inv: Inventory) -> int:
    """Nodes of the inventory that can hold one pod of ``w``."""
    return sum(g.replicas for g in inv.nodes if fits_group(w, g))


def fits_group(w: Workload, g: NodeGroup) -> bool:
    return (
        w.cpu_millis <= g.cpu_cores * 1000
        and w.memory_bytes <= g.memory_gib * GIB
        and (w.gpus == 0 or (g.gpu_resource == w.gpu_resource and w.gpus <= g.gpu_count))
    )


@pytest.mark.parametrize(("name", "hours"), [("02-cluster-nodes", 24), ("02-cluster-nodes-5k", 60)])
def test_a_gang_has_at_most_a_quarter_of_the_nodes_that_fit_its_pods(
    name: str, hours: float
) -> None:
    inv, workloads = inventory(name), generated(name, hours)
    gangs = [w for w in workloads if w.gang]
    assert gangs
    assert all(2 <= w.pods <= fitting_nodes(w, inv) // 4 for w in gangs)
    assert all(w.pods <= fitting_nodes(w, inv) for w in workloads)
    # A gang capped to one pod is a lone workload, disruption and all.
    lone = [w for w in workloads if w.kind == "gpu-distributed" and not w.gang]
    assert all(w.min_count == 1 and w.disruption is DisruptionMode.SINGLE for w in lone)


def test_a_gang_too_wide_for_its_gpu_kind_runs_as_one_pod() -> None:
    # 02's two MI300X nodes are the only AMD nodes with more than 4 GPUs: a gang of 5-8 GPU
    # pods there could never be placed, so it comes as a lone pod.
    inv = inventory("02-cluster-nodes")
    workloads = generate(
        inv,
        GeneratorOptions(gpu_distributed_share=1.0, gpu_inference_share=0, gpu_training_share=0),
        seed=2,
        hours=48,
    )
    amd = [w for w in workloads if w.gpu_resource == "amd.com/gpu"]
    assert any(w.gpus > 4 for w in amd)
    assert all(w.pods == 1 for w in amd if w.gpus > 4)
    assert all(w.pods <= 2 for w in amd)


def test_performance_share_and_priorities() -> None:
    workloads = generated("02-cluster-nodes-5k", 60)
    assert sum(w.performance for w in workloads) / len(workloads) == pytest.approx(0.3, abs=0.02)

    def perf_share(kind: str) -> float:
        chosen = [w for w in workloads if w.kind == kind]
        return sum(w.performance for w in chosen) / len(chosen)

    assert perf_share("gpu-training") > 2 * perf_share("cpu-small")
    priorities = Counter(w.priority for w in workloads)
    assert set(priorities) == {0, 100, 1000}
    assert priorities[1000] / len(workloads) == pytest.approx(0.02, abs=0.01)
    assert {w.priority for w in workloads if w.gpus == 0} == {0, 1000}


def test_ids_follow_submit_order_and_arrivals_stay_in_the_window() -> None:
    workloads = generated("02-cluster-nodes", 24)
    assert [w.id for w in workloads[:3]] == ["w000001", "w000002", "w000003"]
    assert [w.id for w in workloads] == sorted(w.id for w in workloads)
    submits = [w.submit_s for w in workloads]
    assert submits == sorted(submits)
    assert submits[0] >= 0
    assert submits[-1] < 24 * 3600


def _per_hour(workloads: list[Workload]) -> np.ndarray:
    return np.bincount([int(w.submit_s // 3600) % 24 for w in workloads], minlength=24)


def test_diurnal_arrivals_peak_in_the_afternoon_and_dip_at_night() -> None:
    per_hour = _per_hour(generated("02-cluster-nodes-5k", 60, "diurnal"))
    assert per_hour[14:18].sum() > 3 * per_hour[2:6].sum()
    flat = _per_hour(generated("02-cluster-nodes-5k", 60))
    assert flat[14:18].sum() < 1.2 * flat[2:6].sum()


def test_diurnal_rate_has_its_trough_twelve_hours_from_the_peak() -> None:
    rate = diurnal_rate(np.array([16.0, 4.0, 10.0]), peak_hour=16.0, trough_ratio=0.2)
    assert rate.tolist() == pytest.approx([1.0, 0.2, 0.6])


def test_bursts_bring_many_arrivals_within_minutes() -> None:
    def busiest_five_minutes(arrivals: str) -> int:
        workloads = generated("02-cluster-nodes-5k", 60, arrivals)
        return int(np.bincount([int(w.submit_s // 300) for w in workloads]).max())

    assert busiest_five_minutes("bursts") > 2 * busiest_five_minutes("poisson")


def test_a_cpu_only_inventory_gets_no_gpu_work() -> None:
    workloads = generate(CPU_ONLY, GeneratorOptions(), seed=1, hours=48)
    assert workloads
    assert all(w.gpus == 0 and w.gpu_resource is None for w in workloads)
    assert all(fits_somewhere(w, CPU_ONLY) for w in workloads)
    assert cpu_core_hours(workloads) == pytest.approx(0.6 * 3 * 32 * 48, rel=0.15)


def test_a_gpu_only_inventory_still_gets_cpu_work_sized_to_its_cores() -> None:
    options = GeneratorOptions(cpu_load_on_gpu_nodes=0.2)
    workloads = generate(GPU_ONLY, options, seed=1, hours=96)
    assert all(fits_somewhere(w, GPU_ONLY) for w in workloads)
    assert cpu_core_hours(workloads) == pytest.approx(0.6 * 0.2 * 3 * 48 * 96, rel=0.15)
    assert gpu_hours(workloads).get("nvidia.com/gpu") == pytest.approx(0.6 * 12 * 96, rel=0.25)


def test_generated_traces_round_trip_through_the_file_format() -> None:
    workloads = generated("02-cluster-nodes", 24, "bursts")
    assert parse_trace(dump_trace(workloads).splitlines(), "gen") == workloads


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"arrivals": "weekly"}, "arrivals: 'weekly' is not one of poisson, diurnal, bursts"),
        ({"load": 0}, "load: must be > 0"),
        ({"load": float("inf")}, "load: expected a finite number"),
        ({"load": "0.5"}, "load: expected a finite number, got '0.5'"),
        ({"perf_ratio": 1.5}, "perf_ratio: must be <= 1"),
        ({"cpu_small_share": 0.9}, "cpu_small_share + cpu_medium_share + cpu_large_share must"),
        ({"gpu_training_share": -0.1}, "gpu_training_share: must be >= 0"),
        ({"urgent_priority": 1.5}, "urgent_priority: expected an integer"),
        ({"bursts_per_day": 0}, "bursts_per_day: must be > 0"),
        ({"diurnal_peak_hour": 25}, "diurnal_peak_hour: must be <= 24"),
    ],
)
def test_options_are_checked_with_clear_messages(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        GeneratorOptions.from_mapping(options)


def test_unknown_option_keys_are_named_with_the_accepted_ones() -> None:
    with pytest.raises(ValueError, match="unknown generator option") as caught:
        GeneratorOptions.from_mapping({"lod": 0.5, "load": 0.5, "jobs": 3})
    text = str(caught.value)
    assert "unknown generator option(s): jobs, lod" in text
    assert "accepted: arrivals, load," in text
    assert GeneratorOptions.from_mapping({"load": 0.5}) == GeneratorOptions(load=0.5)


@pytest.mark.parametrize(("seed", "hours"), [(-1, 1.0), (1, 0.0), (1, float("nan"))])
def test_bad_seed_or_hours_are_refused(seed: int, hours: float) -> None:
    with pytest.raises(ValueError, match=r"^(seed|hours): "):
        generate(CPU_ONLY, GeneratorOptions(), seed=seed, hours=hours)


@st.composite
def inventories(draw: st.DrawFn) -> Inventory:
    groups = []
    for index in range(draw(st.integers(1, 3))):
        vendor = draw(st.sampled_from(["none", "nvidia", "amd"]))
        gpus = 0 if vendor == "none" else draw(st.integers(1, 8))
        group = _group(
            f"g{index}", draw(st.integers(1, 256)), draw(st.floats(0.5, 2048)), gpus, vendor
        )
        group["replicas"] = draw(st.integers(1, 20))
        groups.append(group)
    return parse_inventory({"nodes": groups})


@settings(max_examples=40, deadline=None)
@given(
    inventories(),
    st.integers(0, 2**32),
    st.floats(0.5, 48),
    st.sampled_from(["poisson", "diurnal", "bursts"]),
    st.floats(0.05, 1.5),
)
def test_any_generated_list_is_a_valid_placeable_trace(
    inv: Inventory, seed: int, hours: float, arrivals: str, load: float
) -> None:
    workloads = generate(inv, GeneratorOptions(arrivals=arrivals, load=load), seed, hours)
    assert all(fits_somewhere(w, inv) for w in workloads)
    assert all(w.pods <= max(1, fitting_nodes(w, inv) // 4) for w in workloads)
    assert all(0 <= w.submit_s < hours * 3600 for w in workloads)
    assert parse_trace(dump_trace(workloads).splitlines(), "p") == workloads


def test_the_doc_lists_every_option_with_its_default(repo_root: Path) -> None:
    text = (repo_root / "docs" / "simulator-trace.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| `([^`]*)` \|", text.split("### Options", 1)[1], re.M))
    assert rows == {f.name: str(f.default) for f in fields(GeneratorOptions)}
