"""The simulator's baseline D: class_caps with each GPU capped by the class of the pod on it, and
performance work first in the queue, preempting nothing (manifests/priority)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from joulie.api import keys
from joulie.api.inventory import parse_inventory
from joulie.core.policies import PolicyInputs, PolicyType, values_of
from joulie.core.power_model import Controls, board_steady
from joulie.hardware.catalog import Catalog
from joulie.hardware.power_spec import gpu_power_spec, optimal_gpu_cap_w
from joulie.sim.engine import Engine, performance_first
from joulie.sim.run_spec import RunSpec
from joulie.sim.scenario import scenario_of
from joulie.sim.trace import Workload
from tests.support.builders import inventory_group
from tests.support.sim_builders import gpu_job, small_scenario

ONE_GPU_NODE = parse_inventory(
    {"nodes": [inventory_group("gpu", replicas=1, gpus=8, product="NVIDIA H100 NVL")]}
)
CLASS_CAPS = PolicyInputs(policy=PolicyType.CLASS_CAPS.value, params=values_of({}))
REPO = Path(__file__).resolve().parents[2]


def class_caps_engine(workloads: list[Workload], **overrides: object) -> Engine:
    fields: dict[str, object] = {"policy": CLASS_CAPS, "performance_first": True, **overrides}
    return Engine(small_scenario(workloads, "D", **fields))


def _h100_nvl_board() -> tuple[float, float]:
    """(energy-optimal cap, maximum) of the test cluster's boards."""
    engine = class_caps_engine([])
    model = engine.fleet.groups[0]
    assert model.power.gpu is not None
    assert model.gpu_optimal_cap_w is not None
    return model.gpu_optimal_cap_w, model.power.gpu.max_w


def test_a_standard_pod_s_boards_sit_at_the_knee_and_a_performance_pod_s_run_uncapped() -> None:
    # Both on the one node, stopped after ten minutes while both still run.
    standard = gpu_job("std", 0.0, 3)
    performance = gpu_job("perf", 0.0, 3, performance=True)
    engine = class_caps_engine([standard, performance], inventory=ONE_GPU_NODE, limit_s=600.0)
    engine.simulate()
    jobs = {j.workload.id: j for j in engine.run.jobs}
    assert jobs["std"].nodes == jobs["perf"].nodes == [0]
    optimal, max_w = _h100_nvl_board()
    spec = engine.fleet.groups[0].power.gpu
    assert spec is not None
    busy = board_steady(spec, 0.9, Controls())[0]
    idle = board_steady(spec, 0.0, Controls())[0]
    assert optimal < busy <= max_w
    # Boards go to the pods in the order they started: the queue put performance first. The
    # two boards no pod holds sit idle (their knee cap does not bind at idle).
    boards = engine.cluster.steady[0].gpu_board_w
    assert boards == pytest.approx([busy] * 3 + [optimal] * 3 + [idle] * 2)
    # The standard pod runs at its capped boards' clocks; the performance pod at full speed.
    assert jobs["perf"].speed * jobs["perf"].ideal_s == pytest.approx(3600.0, rel=1e-9)
    assert jobs["std"].speed < jobs["perf"].speed


def test_a_board_goes_back_to_the_idle_cap_when_its_pod_leaves_and_a_new_pod_takes_its_class() -> (
    None
):
    # The performance job finishes first (less work); a standard job then takes its boards.
    short_perf = gpu_job("perf", 0.0, 8, performance=True)
    short_perf = replace(short_perf, work_s=600.0)
    later_std = gpu_job("std", 60.0, 8)
    engine = class_caps_engine([short_perf, later_std])
    result = engine.simulate()
    jobs = {j.workload.id: j for j in engine.run.jobs}
    assert result.completed == 2
    # Both on the first node in turn would be a tie; wherever each ran, the standard job's
    # boards were capped (it ran slower than its ideal) and the performance job's were not.
    perf, std = jobs["perf"], jobs["std"]
    assert perf.finished_at is not None
    assert perf.started_at is not None
    assert std.finished_at is not None
    assert std.started_at is not None
    assert perf.finished_at - perf.started_at == pytest.approx(perf.ideal_s)
    assert std.finished_at - std.started_at > std.ideal_s * 1.05
    # With nothing running, every board sits at the idle intent (the knee), drawing idle.
    for node in range(len(engine.fleet)):
        rule = engine.cluster.board_rules[node]
        assert rule is not None
        assert rule.caps((None,) * 8) == pytest.approx((_h100_nvl_board()[0],) * 8)


def test_performance_work_submitted_last_starts_first_and_preempts_nothing() -> None:
    # Twenty standard jobs queue for the two nodes' 16 boards; a performance job arrives last.
    blockers = [gpu_job(f"run{i}", 0.0, 8) for i in range(2)]
    queued = [gpu_job(f"std{i}", 10.0 + i, 8) for i in range(20)]
    perf = gpu_job("perf", 100.0, 8, performance=True)
    engine = class_caps_engine([*blockers, *queued, perf])
    result = engine.simulate()
    jobs = {j.workload.id: j for j in engine.run.jobs}
    first_freed = min(jobs[f"run{i}"].finished_at or 0.0 for i in range(2))
    assert jobs["perf"].started_at == pytest.approx(first_freed)
    assert all((jobs[f"std{i}"].started_at or 0.0) >= first_freed for i in range(20))
    assert result.preemptions == 0
    # Without the priority class the same performance job waits its turn behind the twenty.
    fifo = class_caps_engine([*blockers, *queued, perf], performance_first=False)
    fifo.simulate()
    late = {j.workload.id: j for j in fifo.run.jobs}["perf"]
    assert (late.started_at or 0.0) > (jobs["perf"].started_at or 0.0) + 3600.0


def test_performance_first_raises_only_performance_work_below_the_class() -> None:
    work = [
        gpu_job("batch", 0.0, 1, priority=0, performance=True),
        gpu_job("gpu", 0.0, 1, priority=100, performance=True),
        gpu_job("std", 0.0, 1, priority=100),
        gpu_job("critical", 0.0, 1, priority=5000, performance=True),
    ]
    admitted, never = performance_first(work)
    assert [w.priority for w in admitted] == [1000, 1000, 100, 5000]
    assert never == {0, 1}


def test_the_simulator_s_priority_is_the_shipped_priority_class_s() -> None:
    shipped = yaml.safe_load((REPO / "manifests/priority/priorityclass.yaml").read_text())
    assert shipped["metadata"]["name"] == keys.PERFORMANCE_PRIORITY_CLASS
    assert shipped["value"] == keys.PERFORMANCE_PRIORITY
    assert shipped["preemptionPolicy"] == "Never"


def test_baseline_d_runs_class_caps_with_performance_first_unless_told_otherwise() -> None:
    d = scenario_of(RunSpec(baseline="D", hours=1.0))
    assert d.policy is not None
    assert d.policy.policy == "class_caps"
    assert d.performance_first
    assert not scenario_of(RunSpec(baseline="B", hours=1.0)).performance_first
    off = scenario_of(RunSpec(baseline="D", hours=1.0, params={"performance_first": "false"}))
    assert not off.performance_first
    with pytest.raises(ValueError, match=r"performance_first.*not a bool"):
        scenario_of(RunSpec(baseline="D", hours=1.0, params={"performance_first": "maybe"}))


def test_the_simulator_caps_standard_boards_where_the_planner_does() -> None:
    catalog = Catalog.load()
    engine = class_caps_engine([])
    model = engine.fleet.groups[0]
    optimal = model.gpu_optimal_cap_w
    assert optimal is not None
    assert optimal == optimal_gpu_cap_w(model.view, catalog)
    assert model.view.gpu_model is not None
    board = gpu_power_spec(catalog.gpu(model.view.gpu_model), 1)
    assert board.min_cap_w < optimal < board.max_w
