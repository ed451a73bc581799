"""`joulie simulate` as a user runs it: sweeps, the Indexed Job's pieces, bad options, and the
steady-state scenario."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

from joulie.cli import main as cli
from joulie.cli.simulate import specs_from_args
from joulie.cli.simulate_args import add_parser
from joulie.sim.run_spec import RunSpec

SWEEP = {
    "scenario": "tiny",
    "inventories": ["exp02"],
    "baselines": ["A", "B"],
    "seeds": [1, 2],
    "hours": 2,
}


@pytest.fixture
def sweep_file(tmp_path: Path) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(SWEEP))
    return path


def test_a_sweep_runs_on_two_workers_and_writes_every_output(
    sweep_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = cli(["simulate", "sweep", str(sweep_file), "--workers", "2", "--output", str(out), "-q"])
    assert code == 0
    table = capsys.readouterr().out
    assert "tiny" in table
    assert "ref" in table  # B's saving is against A
    results = json.loads((out / "results.json").read_text())
    # The sweep's fixed order (seed innermost), whatever order the workers finished in.
    assert [(r["baseline"], r["seed"]) for r in results] == [
        ("A", 1),
        ("A", 2),
        ("B", 1),
        ("B", 2),
    ]
    assert len(list(out.glob("*-seed*.csv"))) == 4  # a series per run
    assert (out / "energy_vs_makespan.csv").exists()  # the energy chart's markers
    assert (out / "energy_by_class.csv").exists()  # the energy-per-class chart's segments
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in out.glob("*.png"))
    assert len(list(out.glob("*.png"))) == 4


def test_the_indexed_job_runs_index_by_index_and_collect_names_what_is_missing(
    sweep_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(["simulate", "job", str(sweep_file), "--image", "joulie:dev"]) == 0
    objs = list(yaml.safe_load_all(capsys.readouterr().out))
    job = next(o for o in objs if o["kind"] == "Job")
    config = next(o for o in objs if o["kind"] == "ConfigMap")
    assert job["spec"]["completions"] == 4
    assert job["spec"]["completionMode"] == "Indexed"
    specs = tmp_path / "specs.json"
    specs.write_text(config["data"]["specs.json"])
    runs = tmp_path / "runs"
    for index in (0, 2):
        assert cli(["simulate", "run-index", "--specs", str(specs), "--index", str(index),
                    "--output", str(runs)]) == 0  # fmt: skip
    capsys.readouterr()
    assert cli(["simulate", "collect", str(runs), "--expected", "4", "--format", "json"]) == 1
    captured = capsys.readouterr()
    assert "1, 3" in captured.err
    assert len(json.loads(captured.out)) == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--baselines", "A,E"], "--baselines"),
        (["--seeds", "x"], "--seeds"),
        (["--param", "static_hp_frac"], "KEY=VALUE"),
        (["--param", "no_such=1"], "unknown params no_such"),
        (["--gen", "no_such=1"], "no_such"),
        (["--inventory", "/nonexistent.yaml"], "nonexistent"),
        (["--hours", "-1"], "hours"),
    ],
)
def test_bad_options_exit_2_naming_the_problem(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(["simulate", "-q", *argv]) == 2
    assert message in capsys.readouterr().err


# --- the steady-state scenario ----------------------------------------------------------------


def specs_of(*argv: str) -> list[RunSpec]:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return specs_from_args(parser.parse_args(["simulate", *argv]))


def test_the_steady_state_scenario_is_a_week_of_diurnal_work_with_a_day_of_warm_up() -> None:
    specs = specs_of("--scenario", "steady-state")
    assert [(s.baseline, s.seed) for s in specs] == [(b, seed) for seed in (1, 2, 3) for b in "ABC"]
    for spec in specs:
        assert spec.scenario == "steady-state"
        assert spec.inventory == "default"
        assert spec.hours == 168.0
        assert spec.warmup_hours == 24.0
        assert spec.generator == {"arrivals": "diurnal", "load": 0.6}
    # Options given still win; a plain label keeps the default settings.
    [spec] = specs_of(
        "--scenario", "steady-state", "--hours", "48", "--seeds", "7", "--baselines", "B",
        "--warmup-hours", "6", "--gen", "load=0.8",
    )  # fmt: skip
    assert (spec.hours, spec.seed, spec.warmup_hours) == (48.0, 7, 6.0)
    assert spec.generator == {"arrivals": "diurnal", "load": 0.8}
    [plain] = specs_of("--scenario", "nightly", "--baselines", "A")
    assert (plain.hours, plain.seed, plain.warmup_hours, plain.generator) == (24.0, 1, None, {})


def test_a_steady_state_run_measures_inside_its_window_and_saves_over_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = ["simulate", "--scenario", "steady-state", "--inventory", "exp02", "--hours", "6",
            "--warmup-hours", "2", "--seeds", "1,2", "--baselines", "A,B", "-q",
            "--format", "json", "--output", str(out), "--no-plots"]  # fmt: skip
    assert cli(argv) == 0
    results = json.loads(capsys.readouterr().out)
    assert results == json.loads((out / "results.json").read_text())
    for r in results:
        window = r["window"]
        assert (window["start_s"], window["end_s"]) == (7200.0, 21600.0)
        assert 0 < window["facility_energy_kwh"] < r["facility_energy_kwh"]
        assert 0 < window["completed_work_h"] < r["completed_work_h"]
        submitted = sum(c["submitted"] for c in window["classes"].values())
        assert 0 < submitted < r["workloads"]  # the warm-up's submissions are left out
    b = next(r for r in results if r["baseline"] == "B")
    assert b["saving"]["window_s"] == [7200.0, 21600.0]
    a = next(r for r in results if r["baseline"] == "A" and r["seed"] == b["seed"])
    assert b["saving"]["facility_kwh"]["reference"] == a["window"]["facility_energy_kwh"]
    per_work = a["window"]["facility_energy_kwh"] / a["window"]["completed_work_h"]
    assert b["saving"]["facility_kwh_per_work_h"]["reference"] == pytest.approx(per_work)
    table = (out / "table.txt").read_text()
    assert " 2-6 " in table  # the window, in hours
    assert "mean ± sd" in table
    assert "--warmup-hours" in table  # the note says what the figures are


def test_a_warm_up_that_outlasts_the_arrivals_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli(["simulate", "-q", "--hours", "6", "--warmup-hours", "6"]) == 2
    assert "warmup_hours 6 must end before the arrivals do" in capsys.readouterr().err
