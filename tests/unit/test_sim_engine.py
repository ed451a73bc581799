"""The standalone simulator's engine: reproducible, calling the live roles' decisions, and
sane in what it reports (energy, job time, placement)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from joulie.api.workload import DisruptionMode
from joulie.cli import main as cli
from joulie.core.pod_power import pod_demand
from joulie.core.score_table import ScoreTable
from joulie.core.twin import PowerHistory, display_value
from joulie.extender.cache import hardware_view, twin_view, view_terms
from joulie.hardware.catalog import Catalog
from joulie.hardware.simulated import simulated_hardware
from joulie.sim.engine import Engine
from joulie.sim.pods import pod_manifest
from joulie.sim.result_io import results_json
from joulie.sim.results import RunResult
from joulie.sim.run_spec import BASELINES, RunSpec
from joulie.sim.saving import compare
from joulie.sim.scenario import DEFAULT_POLICY, load_named_inventory, run, scenario_of
from joulie.sim.trace import Workload
from tests.support.sim_builders import gpu_job, small_scenario

INVENTORIES = Path(__file__).resolve().parents[2] / "joulie" / "sim" / "data" / "inventories"
SMALL = RunSpec(inventory="exp02", hours=6.0)


def engine_of(spec: RunSpec) -> Engine:
    return Engine(scenario_of(spec))


# --- reproducible --------------------------------------------------------------------------


def test_same_spec_gives_byte_identical_results_and_another_seed_differs() -> None:
    spec = SMALL.model_copy(update={"baseline": "C"})
    first = results_json([run(spec)])
    assert first == results_json([run(spec)])
    assert first != results_json([run(spec.model_copy(update={"seed": 2}))])


def test_the_cli_prints_the_same_json_twice(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--inventory", "exp02", "--hours", "3", "--format", "json", "-q"]
    assert cli(argv) == 0
    first = capsys.readouterr().out
    assert cli(argv) == 0
    assert capsys.readouterr().out == first
    assert {r["baseline"] for r in json.loads(first)} == {"A", "B", "C"}


# --- the live decisions, not a second implementation ----------------------------------------


@pytest.mark.parametrize(
    ("baseline", "perf_pods", "flags"),
    [
        (
            "B",
            0,
            [
                "--policy",
                "static_partition",
                "--hp-frac",
                str(DEFAULT_POLICY.params["static_hp_frac"]),
            ],
        ),
        ("C", 0, ["--policy", "queue_aware_v1", "--perf-pods", "0"]),
        ("C", 300, ["--policy", "queue_aware_v1", "--perf-pods", "300"]),
    ],
)
def test_the_simulated_manager_splits_the_fleet_as_joulie_plan_does(
    baseline: str, perf_pods: int, flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = INVENTORIES / "02-cluster-nodes-5k.yaml"
    assert cli(["plan", "--inventory", str(inventory), *flags, "--output", "json"]) == 0
    planned = json.loads(capsys.readouterr().out)["nodes"]
    engine = engine_of(RunSpec(inventory="exp02-5k", baseline=baseline, hours=1.0))  # type: ignore[arg-type]
    assert engine.loop is not None
    engine.loop.reconcile(0.0, perf_pods)
    simulated = {name: str(p) for name, p in engine.loop.planned().items()}
    assert simulated == planned
    assert 0 < sum(p == "performance" for p in planned.values()) < len(planned)


def test_the_simulated_extender_scores_as_the_extender_does_on_the_same_twins() -> None:
    engine = engine_of(SMALL.model_copy(update={"baseline": "B", "limit_hours": 4.0}))
    engine.simulate()  # twins with measurements, trends, classes of a working cluster
    loop = engine.loop
    assert loop is not None
    fleet = engine.fleet
    # What the extender builds from the NodeTwin and NodeHardware objects the manager and the
    # pool agent would have written.
    extender = ScoreTable()
    for node, name in enumerate(fleet.names):
        model = fleet.model(node)
        twin = twin_view({"metadata": {"name": name}, "status": loop.twin_status(node)})
        hardware = hardware_view(
            {"metadata": {"name": name}, "status": simulated_hardware(model.summary, _catalog())}
        )
        assert twin.terms is not None
        extender.set(name, view_terms(twin, hardware))
    assert engine.table is not None
    pods = list({j.workload.kind: j.workload for j in engine.run.jobs}.values())
    scores: set[float] = set()
    for workload in pods:
        for performance in (False, True):
            demand = pod_demand(pod_manifest(_as(workload, performance)))
            ours = engine.table.priority_array(demand, fleet.names)
            theirs = extender.priority_array(demand, fleet.names)
            assert ours.tolist() == theirs.tolist()
            assert engine.table.filter_reasons(fleet.names) == extender.filter_reasons(fleet.names)
            scores.update(engine.table.scores(demand, fleet.names).tolist())
    assert len(scores) > 3  # not all neutral


def _catalog() -> Catalog:
    return Catalog.load()


def _as(workload: Workload, performance: bool) -> Workload:
    from dataclasses import replace

    return replace(workload, performance=performance)


# --- what a user reads in the results -------------------------------------------------------


@pytest.fixture(scope="module")
def default_runs() -> dict[str, tuple[Engine, RunResult]]:
    """The default scenario (what a bare `joulie simulate` runs), engines kept for a look
    inside."""
    runs: dict[str, tuple[Engine, RunResult]] = {}
    for baseline in BASELINES:
        engine = engine_of(RunSpec(baseline=baseline))
        runs[baseline] = (engine, engine.simulate())
    return runs


def test_in_the_default_scenario_b_and_c_use_less_energy_than_a(
    default_runs: dict[str, tuple[Engine, RunResult]],
) -> None:
    a = default_runs["A"][1]
    for baseline in ("B", "C"):
        saving = compare(default_runs[baseline][1], a)
        assert saving.facility_saving_pct is not None
        assert saving.facility_saving_pct > 0.0, baseline
        assert saving.it_saving_pct is not None
        assert saving.it_saving_pct > 0.0, baseline


def test_caps_never_make_a_job_run_faster_than_without_joulie(
    default_runs: dict[str, tuple[Engine, RunResult]],
) -> None:
    slowed = 0
    for baseline, (engine, _) in default_runs.items():
        for job in engine.run.jobs:
            assert job.finished_at is not None
            assert job.started_at is not None
            # Against the run time on the parts it ran on, uncontrolled (a faster board is no
            # saving and a slower one no cost of Joulie's).
            stretch = (job.finished_at - job.started_at) / job.ideal_s
            if baseline == "A":
                assert stretch == pytest.approx(1.0), job.workload.id
            else:
                assert stretch >= 1.0 - 1e-9, job.workload.id
                slowed += stretch > 1.0 + 1e-6
    assert slowed > 0  # eco caps did slow some work down


def test_performance_pods_never_run_on_eco_nodes(
    default_runs: dict[str, tuple[Engine, RunResult]],
) -> None:
    for _, result in default_runs.values():
        assert result.misplaced_performance_pods == 0
    b = default_runs["B"][0]
    assert b.loop is not None
    assert b.loop.eco.any()  # there were eco nodes to avoid


# --- small hand-made clusters ---------------------------------------------------------------


def test_a_higher_priority_gang_preempts_a_whole_all_or_nothing_gang_which_restarts() -> None:
    low = gpu_job("low", 0.0, 8, priority=0, pods=2, disruption=DisruptionMode.ALL)
    high = gpu_job("high", 600.0, 8, priority=100)
    engine = Engine(small_scenario([low, high]))
    result = engine.simulate()
    jobs = {j.workload.id: j for j in engine.run.jobs}
    assert result.preemptions == 1
    assert result.preempted_pods == 2
    assert jobs["low"].preempted == 1
    assert jobs["high"].started_at == pytest.approx(600.0)
    # The gang starts over once the urgent job is done, and runs its whole work again (an hour
    # of work on the reference board takes ideal_s on an H100 NVL).
    hour_here = jobs["high"].ideal_s
    assert hour_here < 3600.0
    assert jobs["low"].ideal_s == pytest.approx(hour_here)
    assert jobs["low"].started_at == pytest.approx(600.0 + hour_here)
    assert jobs["low"].finished_at == pytest.approx(600.0 + 2 * hour_here)
    assert result.unfinished == 0


def test_a_workload_that_fits_nowhere_is_reported_not_waited_for() -> None:
    huge = gpu_job("huge", 0.0, 8, pods=3)  # three 8-GPU pods, two nodes
    fine = gpu_job("fine", 0.0, 2)
    engine = Engine(small_scenario([huge, fine]))
    result = engine.simulate()
    assert result.unplaceable == 1
    assert result.completed == 1
    fine_job = next(j for j in engine.run.jobs if j.workload.id == "fine")
    assert result.makespan_s == pytest.approx(fine_job.ideal_s)


def test_an_eco_gpu_node_runs_gpu_work_slower_and_draws_less() -> None:
    # Eight one-GPU jobs fill both nodes; with B one node is eco (GPU caps at 60 %).
    workloads = [gpu_job(f"j{i}", 0.0, 1) for i in range(16)]
    a = Engine(small_scenario(workloads, "A"))
    b = Engine(small_scenario(workloads, "B"))
    ra, rb = a.simulate(), b.simulate()
    assert b.loop is not None
    assert int(b.loop.eco.sum()) == 1
    assert rb.makespan_s is not None
    assert ra.makespan_s is not None
    assert rb.makespan_s > ra.makespan_s
    assert rb.it_energy_kwh < ra.it_energy_kwh
    assert rb.classes["standard"].stretch.p99 > 1.0


def test_energy_is_at_least_the_idle_draw_over_the_run() -> None:
    engine = Engine(small_scenario([gpu_job("j", 0.0, 4)]))
    result = engine.simulate()
    idle_kwh = result.idle_it_w * result.simulated_s / 3.6e6
    assert result.it_energy_kwh > idle_kwh
    assert float(np.sum(engine.cluster.node_energy_j)) / 3.6e6 == pytest.approx(
        result.it_energy_kwh
    )


def test_embedded_inventories_load() -> None:
    assert load_named_inventory("exp02-5k").node_count() == 5000
    assert load_named_inventory("default").node_count() > 0


def test_twin_trends_equal_a_manager_reading_every_node_every_reconcile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The engine reads only the nodes whose power moved; the live manager reads all of them
    each reconcile. The trends the extender sees must be the same."""
    engine = engine_of(SMALL.model_copy(update={"baseline": "C", "limit_hours": 3.0}))
    loop = engine.loop
    assert loop is not None
    assert engine.table is not None
    reference = PowerHistory(window_s=loop.history.window_s)
    names = engine.fleet.names
    original = loop.reconcile
    compared = moving = 0

    def reconcile(t: float, perf_pods: int) -> None:
        nonlocal compared, moving
        original(t, perf_pods)
        for node, name in enumerate(names):
            reference.record(name, t, float(engine.cluster.node_w[node]))
            terms = engine.table.terms(name) if engine.table is not None else None
            assert terms is not None
            expected = display_value(reference.trend(name), "trend")
            assert terms.trend_w_per_min == expected, (name, t)
            compared += 1
            moving += expected != 0.0

    monkeypatch.setattr(loop, "reconcile", reconcile)
    engine.simulate()
    assert compared > 1000
    assert moving > 50  # trends did move, so the comparison meant something


def test_a_run_stopped_at_its_limit_counts_energy_up_to_the_limit() -> None:
    long = [gpu_job("long", 0.0, 8)]
    scenario = small_scenario(long)
    whole = Engine(scenario).simulate()
    half = whole.simulated_s / 2
    result = Engine(replace(scenario, limit_s=half)).simulate()
    assert result.simulated_s == half
    assert result.unfinished == 1
    assert result.makespan_s is None
    assert result.it_energy_kwh == pytest.approx(whole.it_energy_kwh / 2, rel=1e-9)


def test_governors_put_presets_on_eco_nodes_and_change_the_energy() -> None:
    spec = SMALL.model_copy(update={"baseline": "B", "limit_hours": 4.0})
    plain = engine_of(spec)
    governed = engine_of(spec.model_copy(update={"governors": True}))
    plain_result, governed_result = plain.simulate(), governed.simulate()
    assert governed_result.baseline == "B+gov"
    loop = governed.loop
    assert loop is not None
    eco = [n for n in range(len(governed.fleet)) if loop.eco[n]]
    assert eco
    assert all(governed.cluster.controls[n].cpu_preset == "efficiency" for n in eco)
    assert all(plain.cluster.controls[n].cpu_preset is None for n in eco)
    assert governed_result.it_energy_kwh != plain_result.it_energy_kwh


# --- the measurement window -----------------------------------------------------------------


def test_a_window_counts_the_energy_and_the_work_inside_it_only() -> None:
    # j1 runs from 0; j2 and j3 arrive at 2 h, after j1 finished, and the window ends while
    # they run.
    jobs = [gpu_job("j1", 0.0, 4), gpu_job("j2", 7200.0, 4), gpu_job("j3", 7260.0, 2)]
    scenario = small_scenario(jobs)
    plain = Engine(scenario)
    plain.simulate()
    finished = {j.workload.id: j.finished_at for j in plain.run.jobs}
    assert finished["j1"] is not None
    assert finished["j2"] is not None
    start, end = finished["j1"] / 2, (7260.0 + finished["j2"]) / 2
    assert finished["j1"] < end < min(finished["j2"], finished["j3"] or math.inf)
    windowed = Engine(replace(scenario, window=(start, end))).simulate()
    to_start = Engine(replace(scenario, limit_s=start)).simulate()
    to_end = Engine(replace(scenario, limit_s=end)).simulate()
    window = windowed.window
    assert window is not None
    assert (window.start_s, window.end_s) == (start, end)
    for kind in ("it_energy_kwh", "facility_energy_kwh"):
        inside = getattr(to_end, kind) - getattr(to_start, kind)
        assert getattr(window, kind) == pytest.approx(inside, rel=1e-12), kind
    assert window.completed_work_h == 1.0  # j1 (one pod, an hour of work) finished inside
    assert windowed.completed_work_h == 3.0
    # The slowdown is read of the work submitted inside the window: j2 and j3.
    assert window.classes["standard"].submitted == 2
    assert window.classes["standard"].completed == 2
    assert windowed.classes["standard"].submitted == 3


def test_a_window_changes_nothing_else_in_the_result() -> None:
    jobs = [gpu_job(f"j{i}", 600.0 * i, 1 + i % 4) for i in range(12)]
    scenario = small_scenario(jobs, "B")
    plain = Engine(scenario).simulate()
    assert "window" not in plain.to_dict()
    whole = Engine(replace(scenario, window=(0.0, plain.simulated_s))).simulate()
    assert whole.window is not None
    assert replace(whole, window=None) == plain  # bit for bit
    assert whole.window.it_energy_kwh == plain.it_energy_kwh
    assert whole.window.facility_energy_kwh == plain.facility_energy_kwh
    assert whole.window.completed_work_h == plain.completed_work_h


def test_a_window_past_the_run_s_end_counts_the_cluster_idling_on() -> None:
    scenario = small_scenario([gpu_job("j", 0.0, 4)])
    end = Engine(scenario).simulate().simulated_s
    result = Engine(replace(scenario, window=(0.0, end + 3600.0))).simulate()
    assert result.simulated_s == end
    assert result.window is not None
    idle_kwh = result.idle_it_w * 3600.0 / 3.6e6
    assert result.window.it_energy_kwh == pytest.approx(result.it_energy_kwh + idle_kwh)


def test_a_window_must_start_before_it_ends() -> None:
    with pytest.raises(ValueError, match="start < end"):
        replace(small_scenario([]), window=(3600.0, 3600.0))


def test_a_run_with_a_warm_up_gives_byte_identical_results_twice() -> None:
    spec = SMALL.model_copy(update={"baseline": "B", "warmup_hours": 2.0})
    first = results_json([run(spec)])
    assert first == results_json([run(spec)])
    assert json.loads(first)[0]["window"]["start_s"] == 7200.0
