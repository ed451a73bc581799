"""The simulator's node lifecycle (``joulie simulate --lifecycle``): idle nodes go off after their
idle grace and save energy, pending work boots what it needs and waits for the boot, the limits
and the drain's re-check hold, and without the switch nothing changes."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import numpy as np
import pytest

from joulie.api.inventory import parse_inventory
from joulie.cli import main as cli
from joulie.core.lifecycle import LifecycleConfig
from joulie.core.lifecycle_limits import Limits
from joulie.core.policies import PolicyInputs, values_of
from joulie.hardware.catalog import Catalog
from joulie.sim.engine import Engine, Scenario
from joulie.sim.lifecycle import DEFAULT_BOOT_DELAY_S, LifecycleSettings
from joulie.sim.report import LIFECYCLE_COLUMNS, comparison_table
from joulie.sim.result_io import result_from_dict, results_json
from joulie.sim.results import RunResult
from joulie.sim.run_spec import RunSpec
from joulie.sim.scenario import run, scenario_of
from joulie.sim.trace import Workload
from tests.support.builders import inventory_group, workload

FOUR_CPU_NODES = parse_inventory(
    {
        "nodes": [
            inventory_group(
                "cpu",
                replicas=4,
                cpu="AMD EPYC 9375F 32-Core Processor",
                cpu_cores=64,
                memory_gib=770,
            )
        ]
    }
)
HOUR = 3600.0
GRACE = LifecycleConfig().idle_grace_s
SETTLE = LifecycleConfig().drain_settle_s


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.load()


def whole_node(id: str, submit: float, work: float = 4 * HOUR) -> Workload:
    """A job that takes all the CPU of one of the four nodes; no clock moves its run time (it is
    the lifecycle's timing these tests read, not how fast a part works)."""
    return workload(id, submit_s=submit, work_s=work, cpu_millis=64_000, cpu_sensitivity=0.0)


def scenario(
    catalog: Catalog, workloads: list[Workload], lifecycle: LifecycleSettings | None
) -> Scenario:
    return Scenario(
        name="t",
        baseline="A",
        seed=1,
        inventory=FOUR_CPU_NODES,
        workloads=workloads,
        catalog=catalog,
        policy=None,
        lifecycle=lifecycle,
    )


def simulate(
    catalog: Catalog, workloads: list[Workload], lifecycle: LifecycleSettings | None
) -> tuple[Engine, RunResult]:
    engine = Engine(scenario(catalog, workloads, lifecycle))
    return engine, engine.simulate()


def test_the_job_fills_one_node_of_four(catalog: Catalog) -> None:
    engine, result = simulate(catalog, [whole_node("a", 0.0), whole_node("b", 0.0)], None)
    assert int(engine.fleet.cpu_millis[0]) == 64_000
    assert result.makespan_s == pytest.approx(4 * HOUR)  # both ran at once, one node each


# --- idle nodes go off ----------------------------------------------------------------------


def test_idle_nodes_go_off_one_per_pass_after_the_idle_grace_and_the_energy_drops(
    catalog: Catalog,
) -> None:
    work = [whole_node("busy", 0.0)]
    plain_engine, plain = simulate(catalog, work, None)
    engine, result = simulate(catalog, work, LifecycleSettings())
    life = result.lifecycle
    assert life is not None
    assert plain.lifecycle is None
    # Idle from the first pass at 0 s; one drain at a time (max_concurrent_drains=1), one pass
    # a minute, each drain shut down after its settle.
    off_at = [GRACE + k * 60.0 + SETTLE for k in range(3)]
    end = 4 * HOUR
    assert life.shutdowns == 3
    assert life.drains_started == 3
    assert life.drains_cancelled == 0
    assert life.boots == 0
    assert life.off_node_hours == pytest.approx(sum(end - t for t in off_at) / HOUR)
    assert life.mean_nodes_off == pytest.approx(life.off_node_hours * HOUR / end)
    # The work itself is untouched, and the energy saved is exactly the idle draw not drawn.
    assert result.makespan_s == plain.makespan_s
    idle_w = float(plain_engine.cluster.node_w[1])
    saved_kwh = idle_w * sum(end - t for t in off_at) / 3.6e6
    assert plain.it_energy_kwh - result.it_energy_kwh == pytest.approx(saved_kwh, rel=1e-9)
    assert sorted(engine.cluster.node_w.tolist()).count(0.0) == 3


def test_the_min_nodes_floor_keeps_nodes_on(catalog: Catalog) -> None:
    settings = LifecycleSettings(limits=Limits(min_nodes=2))
    engine, result = simulate(catalog, [whole_node("busy", 0.0)], settings)
    assert result.lifecycle is not None
    assert result.lifecycle.shutdowns == 2
    assert sum(1 for w in engine.cluster.node_w if w > 0) == 2


# --- demand returning -----------------------------------------------------------------------


def test_work_arriving_on_a_powered_down_cluster_boots_what_it_needs_and_waits_for_the_boot(
    catalog: Catalog,
) -> None:
    # Nothing to do for three hours: every node goes off. Then two one-node jobs arrive.
    submit = 3 * HOUR + 30.0  # between two passes
    work = [whole_node("x", submit, HOUR), whole_node("y", submit, HOUR)]
    engine, result = simulate(catalog, work, LifecycleSettings())
    life = result.lifecycle
    assert life is not None
    assert life.shutdowns == 4
    assert life.boots == 2  # not the whole fleet
    assert result.completed == 2
    for job in engine.run.jobs:
        assert job.started_at is not None
        wait = job.started_at - job.workload.submit_s
        # The next pass (30 s later) boots, the boot takes its delay, then the pod starts.
        assert wait == pytest.approx(30.0 + DEFAULT_BOOT_DELAY_S)
    assert result.makespan_s == pytest.approx(30.0 + DEFAULT_BOOT_DELAY_S + HOUR)


MIXED = parse_inventory(
    {
        "nodes": [
            FOUR_CPU_NODES.nodes[0].model_dump(exclude_none=True) | {"replicas": 2},
            inventory_group("gpu", replicas=2, gpus=8, product="NVIDIA H100 NVL"),
        ]
    }
)


def test_a_cpu_job_wakes_a_cpu_node_and_a_gpu_job_a_gpu_node(catalog: Catalog) -> None:
    small = workload("cpu", submit_s=3 * HOUR, work_s=HOUR, cpu_millis=8000)
    gpu = workload(
        "gpu",
        submit_s=5 * HOUR,
        work_s=HOUR,
        cpu_millis=8000,
        gpus=4,
        cpu_sensitivity=0.1,
        gpu_sensitivity=0.8,
    )
    engine = Engine(replace(scenario(catalog, [small, gpu], LifecycleSettings()), inventory=MIXED))
    result = engine.simulate()
    assert result.lifecycle is not None
    assert result.lifecycle.boots == 2
    life = engine.lifecycle
    assert life is not None
    booted = sorted(
        engine.fleet.names[int(n)].rstrip("0123456789") for n in np.flatnonzero(life.launched_at)
    )
    # The CPU job fits either kind; the CPU node idles on less power.
    assert booted == ["cpu-", "gpu-"]
    assert result.completed == 2


def test_a_drain_is_cancelled_when_a_pod_that_fits_arrives_during_its_settle(
    catalog: Catalog,
) -> None:
    # Three nodes busy for 4 h; the fourth is idle, and its drain starts at the pass at the
    # idle grace. A one-node job arrives 2 s into the settle: only the draining node could
    # take it, so the re-check cancels the drain and the job starts there.
    work = [whole_node(f"b{i}", 0.0) for i in range(3)]
    work.append(whole_node("late", GRACE + 2.0, HOUR))
    engine, result = simulate(catalog, work, LifecycleSettings())
    life = result.lifecycle
    assert life is not None
    late = next(j for j in engine.run.jobs if j.workload.id == "late")
    assert late.started_at == pytest.approx(GRACE + SETTLE)
    assert life.drains_cancelled == 1
    # Once the late job is done, the node is idle again and goes off the normal way.
    assert (life.drains_started, life.shutdowns) == (2, 1)
    assert late.finished_at is not None
    assert life.off_node_hours < (4 * HOUR - late.finished_at - GRACE) / HOUR


def test_without_the_pod_the_same_drain_ends_in_a_shutdown(catalog: Catalog) -> None:
    work = [whole_node(f"b{i}", 0.0) for i in range(3)]
    _, result = simulate(catalog, work, LifecycleSettings())
    assert result.lifecycle is not None
    assert (result.lifecycle.drains_cancelled, result.lifecycle.shutdowns) == (0, 1)


# --- the switch -----------------------------------------------------------------------------

SMALL = RunSpec(inventory="exp02", hours=3.0, baseline="B")


def test_results_are_deterministic_and_read_back() -> None:
    spec = SMALL.model_copy(update={"lifecycle": True})
    first = results_json([run(spec)])
    assert first == results_json([run(spec)])
    loaded = json.loads(first)[0]
    assert loaded["baseline"] == "B+L"
    result = result_from_dict(loaded)
    assert result.lifecycle is not None
    assert result.lifecycle.shutdowns > 0


def test_a_lifecycle_that_never_acts_changes_nothing_and_off_leaves_no_trace() -> None:
    never = SMALL.model_copy(update={"lifecycle": True, "params": {"lifecycle_idle_grace_s": 1e9}})
    on, off = run(never), run(SMALL)
    assert "lifecycle" not in off.to_dict()
    assert on.lifecycle is not None
    assert on.lifecycle.drains_started == 0
    assert replace(on, baseline="B", lifecycle=None).to_dict() == off.to_dict()


def test_the_pass_shows_admit_only_the_longest_idle_and_decides_as_with_every_node() -> None:
    """The pass derives and hands ``admit`` only the nodes it could act on; deriving every
    node and handing over every candidate must give the same run."""
    spec = RunSpec(inventory="exp02", hours=4.0, baseline="A", lifecycle=True)
    lazy = Engine(scenario_of(spec))
    eager = Engine(scenario_of(spec))
    assert lazy.lifecycle is not None
    assert eager.lifecycle is not None
    eager.lifecycle.lazy = False
    first, second = lazy.simulate(), eager.simulate()
    assert first.lifecycle is not None
    assert first.lifecycle.shutdowns > 10
    assert first.lifecycle.boots > 0
    assert results_json([first]) == results_json([second])


def test_the_cli_switch_labels_the_baselines_and_the_table_shows_the_lifecycle(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["simulate", "--inventory", "exp02", "--hours", "2", "--baselines", "A", "-q"]
    assert cli(argv) == 0
    plain = capsys.readouterr().out
    assert "NODES OFF" not in plain
    assert cli([*argv, "--lifecycle", "both", "--param", "lifecycle_min_nodes=5"]) == 0
    table = capsys.readouterr().out
    rows = _row_cells(table)
    assert set(rows) == {"A", "A+L"}
    # The run without it is the run of the plain command, and shows - in the new columns.
    assert rows["A"] == [*_row_cells(plain)["A"], *["-"] * len(LIFECYCLE_COLUMNS)]
    assert "NODES OFF" in table
    assert "SHUTDOWNS" in table


def _row_cells(table: str) -> dict[str, list[str]]:
    """Each baseline's cells (after scenario and baseline) across the table's blocks."""
    cells: dict[str, list[str]] = {}
    lines = table.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("SCENARIO  BASELINE") or "PERFORMANCE kWh" in line:
            continue
        for row in itertools.takewhile(str.strip, lines[i + 1 :]):
            cells.setdefault(row.split()[1], []).extend(row.split()[2:])
    return cells


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--param", "lifecycle_min_nodes=2"], "--lifecycle"),
        (["--lifecycle", "--param", "lifecycle_boot_delay_s=1200"], "lifecycle_boot_delay_s"),
    ],
)
def test_bad_lifecycle_options_exit_2_naming_the_problem(
    extra: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", "--inventory", "exp02", "--hours", "1", "--baselines", "A", "-q"]
    assert cli([*argv, *extra]) == 2
    assert named in capsys.readouterr().err


def test_tables_fold_lifecycle_figures_and_mark_runs_without_it() -> None:
    spec = SMALL.model_copy(update={"baseline": "A"})
    results = [run(spec), run(spec.model_copy(update={"lifecycle": True}))]
    lines = comparison_table(results).splitlines()
    block = lines[next(i for i, line in enumerate(lines) if "NODES OFF" in line) :]
    plain_row = next(line for line in block if line.split()[1:2] == ["A"])
    assert plain_row.rstrip().endswith("-")


# --- the class-aware hold ---------------------------------------------------------------------


def test_a_pending_performance_pod_holds_no_eco_node(catalog: Catalog) -> None:
    # static_partition at 0.5: two performance nodes, two eco ones. Both performance nodes are
    # busy for 4 h and a third performance job waits for one of them. It may not run on an eco
    # node, so the idle eco nodes are drained and powered off after their idle grace instead of
    # being held for it; the waiting job starts when a performance node frees up.
    work = [replace(whole_node(f"p{i}", 0.0), performance=True) for i in range(3)]
    policy = PolicyInputs("static_partition", values_of({"static_hp_frac": 0.5}))
    engine = Engine(replace(scenario(catalog, work, LifecycleSettings()), policy=policy))
    result = engine.simulate()
    life = result.lifecycle
    assert life is not None
    # Both eco nodes off from within half an hour of the start to the end of the 8 h run (held
    # for the waiting job, they went off only once it had started: 11.8 node-hours in all).
    assert result.makespan_s == pytest.approx(8 * HOUR)
    assert life.off_node_hours >= 2 * (8 - 0.5)
    waiting = next(j for j in engine.run.jobs if j.workload.id == "p2")
    assert waiting.started_at == pytest.approx(4 * HOUR, abs=120.0)
    assert result.completed == 3
