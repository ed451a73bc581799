"""The simulator's energy per workload (issue #29): each node's energy split between the
workloads on it and overhead by the core's one split, adding up to the run's IT energy; a class
that never runs gets nothing; a class that is capped shows its saving against A; and the
figures are the same in every process."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from joulie.api.inventory import Inventory, parse_inventory
from joulie.hardware.catalog import Catalog
from joulie.sim.engine import Engine, Scenario
from joulie.sim.results import RunResult, WorkloadEnergy
from joulie.sim.run_spec import RunSpec
from joulie.sim.saving import OVERHEAD, class_savings, compare
from joulie.sim.scenario import DEFAULT_POLICY, run
from joulie.sim.trace import Workload
from tests.support.builders import inventory_group, workload

REPO = Path(__file__).resolve().parents[2]
SMALL = RunSpec(inventory="exp02", hours=6.0)
GPU_NODES = parse_inventory(
    {"nodes": [inventory_group("gpu", replicas=2, gpus=8, product="NVIDIA H100 NVL")]}
)
"""Two H100 NVL nodes: in baseline B one is performance, the other eco (its GPUs capped)."""


def gpu_work(
    id: str, *, performance: bool = False, gpus: int = 1, kind: str = "training"
) -> Workload:
    return workload(
        id,
        gpus=gpus,
        cpu_millis=8000,
        memory_bytes=64 << 30,
        performance=performance,
        cpu_sensitivity=0.1,
        gpu_sensitivity=0.9,
        kind=kind,
    )


def simulate(
    workloads: Sequence[Workload], baseline: str, inventory: Inventory = GPU_NODES
) -> RunResult:
    scenario = Scenario(
        name="gpu",
        baseline=baseline,
        seed=1,
        inventory=inventory,
        workloads=workloads,
        catalog=Catalog.load(),
        policy=None if baseline == "A" else DEFAULT_POLICY,
    )
    return Engine(scenario).simulate()


def assert_adds_up(energy: WorkloadEnergy | None, it_kwh: float) -> None:
    """Every split (class, kind, namespace) and the overhead give the IT energy."""
    assert energy is not None
    for split in (energy.by_class, energy.by_kind, energy.by_namespace):
        assert math.fsum(split.values()) + energy.overhead_kwh == pytest.approx(it_kwh, rel=1e-9)
    assert all(kwh >= 0.0 for kwh in energy.by_class.values())
    assert energy.overhead_kwh >= 0.0


# --- conservation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        SMALL.model_copy(update={"baseline": "A"}),
        SMALL.model_copy(update={"baseline": "B"}),
        SMALL.model_copy(update={"baseline": "C", "lifecycle": True, "warmup_hours": 2.0}),
        SMALL.model_copy(update={"baseline": "B", "limit_hours": 4.0, "warmup_hours": 3.0}),
    ],
    ids=["A", "B", "C+L windowed", "B stopped inside its window"],
)
def test_the_workloads_and_the_overhead_add_up_to_the_it_energy(spec: RunSpec) -> None:
    result = run(spec)
    assert_adds_up(result.energy_by_workload, result.it_energy_kwh)
    if result.window is not None:
        assert_adds_up(result.window.energy_by_workload, result.window.it_energy_kwh)
    energy = result.energy_by_workload
    assert energy is not None
    assert min(energy.by_class.values()) > 0.0  # both classes ran
    assert set(energy.by_namespace) == {"default"}


def test_a_window_past_the_run_s_end_books_the_idling_on_as_overhead() -> None:
    work = [gpu_work(f"j{i}") for i in range(4)]
    plain = simulate(work, "B")
    scenario = Scenario(
        name="gpu",
        baseline="B",
        seed=1,
        inventory=GPU_NODES,
        workloads=work,
        catalog=Catalog.load(),
        policy=DEFAULT_POLICY,
        window=(0.0, plain.simulated_s + 3600.0),
    )
    windowed = Engine(scenario).simulate()
    assert windowed.window is not None
    inside = windowed.window.energy_by_workload
    assert_adds_up(inside, windowed.window.it_energy_kwh)
    assert inside is not None
    assert plain.energy_by_workload is not None
    assert inside.by_class == pytest.approx(plain.energy_by_workload.by_class, rel=1e-12)
    idle_kwh = plain.idle_it_w * 3600.0 / 3.6e6
    assert inside.overhead_kwh == pytest.approx(
        plain.energy_by_workload.overhead_kwh + idle_kwh, rel=1e-9
    )


# --- who gets what ------------------------------------------------------------------------------


def test_a_class_or_kind_that_does_not_run_gets_no_energy() -> None:
    # Sixteen GPUs on one node: fits nowhere, so it never runs (it is counted unplaceable).
    work = [gpu_work(f"s{i}") for i in range(6)]
    work.append(gpu_work("huge", performance=True, gpus=16, kind="huge"))
    result = simulate(work, "B")
    assert result.unplaceable == 1
    energy = result.energy_by_workload
    assert energy is not None
    assert energy.by_class["performance"] == 0.0
    assert energy.by_kind == {"huge": 0.0, "training": pytest.approx(energy.by_class["standard"])}
    assert energy.by_class["standard"] > 0.0


def test_a_capped_class_shows_its_saving_and_the_savings_add_up_to_the_it_saving() -> None:
    # B keeps one node uncapped for the performance work; the standard work runs on both, its
    # boards capped on the eco one. The same work in A runs uncapped everywhere.
    work = [gpu_work(f"s{i}") for i in range(8)]
    work += [gpu_work(f"p{i}", performance=True) for i in range(4)]
    a, b = simulate(work, "A"), simulate(work, "B")
    by_class = class_savings(b, a)
    assert by_class is not None
    assert list(by_class) == ["performance", "standard", OVERHEAD]
    standard = by_class["standard"]
    assert standard.saving_pct is not None
    assert standard.saving_pct > 10.0
    assert standard.saving_kwh == pytest.approx(standard.reference_kwh - standard.kwh)
    assert standard.saving_pct == pytest.approx(100 * standard.saving_kwh / standard.reference_kwh)
    # B finishes later: A's cluster idles on in the window they share, as overhead.
    assert b.simulated_s > a.simulated_s
    assert a.energy_by_workload is not None
    assert by_class[OVERHEAD].reference_kwh > a.energy_by_workload.overhead_kwh
    it = compare(b, a)
    assert math.fsum(c.saving_kwh for c in by_class.values()) == pytest.approx(
        it.reference_it_kwh - it.it_kwh, rel=1e-9
    )
    assert math.fsum(c.kwh for c in by_class.values()) == pytest.approx(it.it_kwh, rel=1e-9)


def test_a_result_without_the_split_compares_without_it() -> None:
    a, b = (simulate([gpu_work("j")], baseline) for baseline in "AB")
    assert class_savings(replace(b, energy_by_workload=None), a) is None


# --- reproducible -------------------------------------------------------------------------------

_PRINT_RESULTS = (
    "from joulie.sim.result_io import results_json; from joulie.sim.run_spec import RunSpec; "
    "from joulie.sim.scenario import run; import sys; "
    "sys.stdout.write(results_json([run(RunSpec(inventory='exp02', hours=3.0, baseline=b)) "
    "for b in 'AC']))"
)


def test_the_split_is_the_same_bit_for_bit_whatever_the_string_hashes() -> None:
    outputs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", _PRINT_RESULTS],
            cwd=REPO,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        assert '"energy_by_workload"' in done.stdout
        outputs.add(done.stdout)
    assert len(outputs) == 1
