"""Sweeps: the grid a sweep file expands to, running it over processes in spec order, one
Indexed Job index at a time, gathering the indexes back, and the Job's manifests."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from joulie.sim import sweep
from joulie.sim.result_io import result_json
from joulie.sim.results import RunResult
from joulie.sim.run_spec import RunSpec
from joulie.sim.sweep import (
    MissingRuns,
    RunFailed,
    SweepError,
    collect,
    expand,
    load_sweep,
    run_all,
    run_file,
    run_index,
)
from joulie.sim.sweep_job import indexed_job, manifests_yaml, specs_json
from tests.unit.test_sim_report import make_result


def fake_runner(spec: RunSpec) -> RunResult:
    """A stand-in engine (module level, so a process pool can pickle it): the result tells
    which spec it came from."""
    energy = 100.0 + float(spec.params.get("static_hp_frac", 0.0))
    return make_result(spec.scenario, spec.baseline, spec.seed, energy)


def failing_runner(spec: RunSpec) -> RunResult:
    if spec.seed == 2:
        raise RuntimeError("engine exploded")
    return fake_runner(spec)


GRID = {
    "scenario": "night",
    "inventories": ["exp01", "exp02"],
    "baselines": ["A", "B"],
    "seeds": [1, 2, 3],
    "hours": 6,
    "generator": {"rate_per_h": 40},
    "params": {"static_hp_frac": [0.3, 0.5], "guard_max_step": 2},
    "governors": [False, True],
}


# --- the grid --------------------------------------------------------------------------------


def test_grid_expands_to_the_cartesian_product_in_a_fixed_order() -> None:
    specs = expand(GRID)
    assert len(specs) == 2 * 2 * 2 * 2 * 3
    first, second, fourth = specs[0], specs[1], specs[3]
    assert (first.inventory, first.baseline, first.seed) == ("exp01", "A", 1)
    assert first.governors is False
    assert (second.baseline, second.seed) == ("A", 2)  # seeds innermost
    assert (fourth.baseline, fourth.seed) == ("B", 1)
    assert first.params == {"guard_max_step": 2, "static_hp_frac": 0.3}
    assert first.hours == 6
    assert first.generator == {"rate_per_h": 40}
    assert specs[-1].inventory == "exp02"
    assert specs[-1].params["static_hp_frac"] == 0.5
    assert expand(GRID) == specs  # index i always means the same run


def test_the_lifecycle_dimension_doubles_each_baseline_without_moving_the_old_indexes() -> None:
    specs = expand({**GRID, "lifecycle": [False, True]})
    assert len(specs) == 2 * len(expand(GRID))
    assert [s.lifecycle for s in specs[:6]] == [False] * 3 + [False] * 3  # A then B, seeds 1-3
    assert [s.lifecycle for s in specs[6:12]] == [True] * 6
    assert [s for s in specs if not s.lifecycle] == expand(GRID)


def test_scenario_label_names_only_the_dimensions_that_vary() -> None:
    labels = sorted({s.scenario for s in expand(GRID)})
    assert labels[0] == "night-exp01-static_hp_frac=0.3-governors"
    assert len(labels) == 8
    plain = expand({"scenario": "night", "params": {"guard_max_step": 2}})
    assert {s.scenario for s in plain} == {"night"}
    assert [s.baseline for s in plain] == ["A", "B", "C"]


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"baselines": ["A", "D"]}, "baselines: 'D'"),
        ({"seeds": []}, "seeds: an empty list"),
        ({"seeds": [1, 1]}, "seeds: .* repeats"),
        ({"seeds": ["one"]}, "seeds: 'one' is not an integer"),
        ({"hours": -1}, "hours: Input should be greater than 0"),
        ({"params": {"static_hp_frac": [[0.3]]}}, "params.static_hp_frac"),
        ({"inventory": "exp01"}, "unknown key inventory"),
    ],
)
def test_a_bad_sweep_is_refused_naming_the_key(change: dict[str, object], needle: str) -> None:
    with pytest.raises(SweepError, match=needle):
        expand({**GRID, **change})


def test_load_sweep_reads_yaml_and_json_and_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(GRID))
    (tmp_path / "s.json").write_text(json.dumps(GRID))
    assert load_sweep(tmp_path / "s.yaml") == load_sweep(tmp_path / "s.json") == expand(GRID)
    (tmp_path / "bad.yaml").write_text("- just a list\n")
    with pytest.raises(SweepError, match=r"bad\.yaml: a sweep is a mapping"):
        load_sweep(tmp_path / "bad.yaml")


# --- running ---------------------------------------------------------------------------------


def test_run_all_over_two_processes_returns_results_in_spec_order() -> None:
    specs = expand({**GRID, "inventories": ["exp01"], "governors": [False]})
    seen: list[float] = []
    results = run_all(specs, workers=2, runner=fake_runner, progress=seen.append)
    assert [(r.scenario, r.baseline, r.seed) for r in results] == [
        (s.scenario, s.baseline, s.seed) for s in specs
    ]
    assert results == [fake_runner(s) for s in specs]
    assert seen[-1] == 1.0
    assert seen == sorted(seen)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_failing_run_raises_naming_its_spec(workers: int) -> None:
    specs = expand({"scenario": "x", "baselines": ["B"], "seeds": [1, 2, 3]})
    with pytest.raises(RunFailed, match=r"run 1 \(scenario=x .*baseline=B seed=2\).*exploded"):
        run_all(specs, workers=workers, runner=failing_runner)


# --- one index of an Indexed Job, and collecting them ----------------------------------------


def test_run_index_writes_its_result_atomically_and_collect_reads_them(tmp_path: Path) -> None:
    specs = expand({"scenario": "x", "seeds": [1, 2]})
    specs_path = tmp_path / "specs.json"
    specs_path.write_text(specs_json(specs))
    out = tmp_path / "results"
    for i in range(len(specs)):
        path = run_index(specs_path, i, out, runner=fake_runner)
        assert path == out / f"run-{i:05d}.json"
    assert sorted(p.name for p in out.iterdir()) == [f"run-{i:05d}.json" for i in range(6)]
    assert collect(out, expected=6) == [fake_runner(s) for s in specs]


def test_collect_names_the_missing_indexes_and_keeps_what_it_found(tmp_path: Path) -> None:
    for i in (0, 2, 3, 6):
        run_file(tmp_path, i).write_text(result_json(replace(make_result(), seed=i)))
    (tmp_path / ".run-00001.json.abc.tmp").write_text("{half")  # an interrupted write
    with pytest.raises(MissingRuns, match="missing run indexes: 1, 4-5, 7-9") as caught:
        collect(tmp_path, expected=10)
    assert caught.value.missing == [1, 4, 5, 7, 8, 9]
    assert [r.seed for r in caught.value.results] == [0, 2, 3, 6]


def test_run_index_refuses_an_index_outside_the_file(tmp_path: Path) -> None:
    (tmp_path / "specs.json").write_text(specs_json([RunSpec()]))
    with pytest.raises(SweepError, match=r"index 1 is outside 0\.\.0"):
        run_index(tmp_path / "specs.json", 1, tmp_path, runner=fake_runner)


# --- the Indexed Job -------------------------------------------------------------------------


def test_indexed_job_runs_one_spec_per_completion_index() -> None:
    specs = expand(GRID)
    config_map, job = indexed_job(
        specs, image="joulie:dev", namespace="sims", name="night", results_claim="sim-results"
    )
    assert json.loads(config_map["data"]["specs.json"])[5] == specs[5].model_dump(mode="json")
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert (spec["completions"], spec["parallelism"]) == (48, 16)
    assert spec["backoffLimitPerIndex"] == 1
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    index_then_output = ["--index", "$(JOB_COMPLETION_INDEX)", "--output", "/results"]
    assert container["command"][-4:] == index_then_output
    assert container["env"][0]["name"] == "JOB_COMPLETION_INDEX"
    assert container["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["specs"]["configMap"]["name"] == "night-specs"
    assert volumes["results"]["persistentVolumeClaim"]["claimName"] == "sim-results"


def test_without_a_claim_results_go_to_an_empty_dir_and_parallelism_follows_size() -> None:
    _, job = indexed_job(
        [RunSpec(seed=s) for s in (1, 2, 3)],
        image="i",
        namespace="n",
        name="j",
        results_claim=None,
    )
    assert job["spec"]["parallelism"] == 3
    volumes = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}
    assert volumes["results"] == {"name": "results", "emptyDir": {}}


def test_specs_over_a_config_maps_limit_are_refused() -> None:
    specs = [RunSpec(seed=s, generator={"pad": "x" * 2000}) for s in range(600)]
    with pytest.raises(SweepError, match="over a ConfigMap"):
        indexed_job(specs, image="i", namespace="n", name="j", results_claim=None)


def test_manifests_yaml_is_a_stream_kubectl_reads_back() -> None:
    objs = indexed_job([RunSpec()], image="i", namespace="n", name="j", results_claim=None)
    text = manifests_yaml(objs)
    assert text.startswith("---\napiVersion: v1\n")
    assert list(yaml.safe_load_all(text)) == objs


def test_the_sweep_module_re_exports_the_job_builder() -> None:
    assert sweep.indexed_job is indexed_job
    assert sweep.manifests_yaml is manifests_yaml
    assert sweep.specs_json is specs_json
