"""`joulie simulate` as a user runs it: sweeps, the Indexed Job's pieces, and bad options."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from joulie.cli import main as cli

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
    assert len(list(out.glob("*.csv"))) == 4
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in out.glob("*.png"))
    assert len(list(out.glob("*.png"))) == 3


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
        (["--baselines", "A,D"], "--baselines"),
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
