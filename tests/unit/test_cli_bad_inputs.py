"""Bad input to `joulie` as a new user types it: each gets one clear line on standard error and
the documented exit status (2 for options, settings and files; 130 for Ctrl-C), never a
traceback, a hang or a silent exit 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from joulie.cli import main as cli
from joulie.manager.settings import ManagerSettings

JOULIE = str(Path(sys.executable).parent / "joulie")


def joulie(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k.lower() not in ManagerSettings.model_fields}
    return subprocess.run(
        [JOULIE, *args], env={**clean, **env}, capture_output=True, text=True, timeout=120
    )


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


# --- the top-level handler ---------------------------------------------------------------


def test_ctrl_c_in_simulate_prints_one_line_and_exits_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(*_args: object) -> None:
        raise KeyboardInterrupt  # what Ctrl-C raises wherever the run happens to be

    monkeypatch.setattr("joulie.sim.scenario.run", interrupted)
    assert cli(["simulate", "-q", "--inventory", "exp02", "--hours", "1"]) == 130
    assert one_line(capsys.readouterr().err) == "joulie: interrupted"


def test_crds_into_a_folder_that_cannot_exist_names_it() -> None:
    result = joulie("crds", "--dir", "/proc/x")
    assert result.returncode == 2
    assert one_line(result.stderr) == "joulie: /proc/x: No such file or directory"


def test_a_missing_sweep_file_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.yaml"
    assert cli(["simulate", "sweep", str(missing)]) == 2
    assert one_line(capsys.readouterr().err) == f"joulie: {missing}: No such file or directory"


def test_an_output_folder_that_cannot_be_made_names_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["simulate", "-q", "--inventory", "exp02", "--hours", "1", "--baselines", "A"]
    assert cli([*argv, "--output", "/proc/nope"]) == 2
    assert one_line(capsys.readouterr().err) == "joulie: /proc/nope: No such file or directory"


# --- roles -----------------------------------------------------------------------------------


def test_role_with_a_subcommand_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["--role=manager", "crds"]) == 2
    line = one_line(capsys.readouterr().err)
    assert "--role runs roles and takes no subcommand (got 'crds')" in line


@pytest.mark.parametrize("argv", [["--role=manager,manager"], ["config", "--role", "agent,agent"]])
def test_a_role_named_twice_is_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(argv) == 2
    assert "named more than once" in one_line(capsys.readouterr().err)


# --- durations -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("10", "'10' has no unit: write 10s for seconds"),
        ("0.0001", "'0.0001' has no unit"),
        ("0.1ms", "'0.1ms' is shorter than a millisecond"),
        ("inf", "not a duration: 'inf'"),
        ("1e400", "not a duration: '1e400'"),
    ],
)
def test_a_reconcile_interval_without_unit_or_out_of_range_is_refused(
    value: str, reason: str
) -> None:
    result = joulie("config", "--role", "manager", RECONCILE_INTERVAL=value)
    assert result.returncode == 2
    assert f"RECONCILE_INTERVAL={value!r}: {reason}" in result.stderr


# --- simulate: params, generator, lists, workers ---------------------------------------------

TINY = ["simulate", "-q", "--inventory", "exp02", "--hours", "1"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # The environment variable's own bounds, read from the manager's settings.
        (
            ["--param", "static_hp_frac=1.5"],
            "--param static_hp_frac=1.5: must be at most 1 "
            "(accepted: a number >= 0 and <= 1, as STATIC_HP_FRAC)",
        ),
        (["--param", "static_hp_frac=-3"], "--param static_hp_frac=-3: must be at least 0"),
        # This one hung for ten minutes (a reconcile every 0 s).
        (
            ["--param", "reconcile_interval_s=0"],
            "--param reconcile_interval_s=0: must be more than 0s "
            "(accepted: seconds >= 1s, as RECONCILE_INTERVAL)",
        ),
        (["--param", "reconcile_interval_s=inf"], "--param reconcile_interval_s=inf: not a finite"),
        (["--param", "queue_hp_min=5", "--param", "queue_hp_max=2"], "is below QUEUE_HP_MIN=5"),
        (["--param", "sample_s=0"], "params.sample_s: 0 is outside 1..86400"),
        (["--gen", "load=7"], "--gen load: must be <= 4, got 7"),
        (["--seeds", "1,1"], "--seeds '1,1': 1 given more than once"),
        (["--baselines", "A,A"], "--baselines 'A,A': A given more than once"),
        (["--baselines", "D,E"], "--baselines 'D,E': 'E' is not one of A, B, C, D"),
        (["--seeds", "x"], "--seeds 'x': 'x' is not one of the integers 0 and up"),
        (["--hours", "inf"], "--hours: Input should be a finite number"),
    ],
)
def test_simulate_refuses_a_bad_option_before_running(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli([*TINY, *argv]) == 2
    assert message in one_line(capsys.readouterr().err)


@pytest.mark.parametrize("value", ["0", "-2"])
def test_simulate_needs_at_least_one_worker(value: str) -> None:
    result = joulie("simulate", f"--workers={value}")
    assert result.returncode == 2
    assert f"argument --workers: {value} is less than 1" in result.stderr


# --- sweeps, the Indexed Job, collect --------------------------------------------------------


@pytest.fixture
def sweep_file(tmp_path: Path) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text("inventories: [exp02]\nbaselines: [A]\nhours: 1\n")
    return path


def test_a_broken_sweep_file_is_one_line_with_its_line_number(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("baselines: [A,\nseeds: 2\n")
    assert cli(["simulate", "sweep", str(broken)]) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"joulie simulate: {broken}: not YAML or JSON: at line 3, column 1:")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--name", "Bad_Name!"], "--name 'Bad_Name!': not a valid Kubernetes name"),
        (["--namespace", "Team A"], "--namespace 'Team A': not a valid Kubernetes name"),
        (["--results-claim=Claim"], "--results-claim 'Claim': not a valid Kubernetes name"),
    ],
)
def test_the_job_refuses_names_the_api_server_would_refuse(
    sweep_file: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(["simulate", "job", str(sweep_file), "--image", "joulie:dev", *argv]) == 2
    captured = capsys.readouterr()
    assert message in one_line(captured.err)
    assert captured.out == ""


def test_the_job_needs_a_parallelism_of_at_least_one(sweep_file: Path) -> None:
    result = joulie("simulate", "job", str(sweep_file), "--image", "x", "--parallelism", "0")
    assert result.returncode == 2
    assert "argument --parallelism: 0 is less than 1" in result.stderr


def test_the_job_manifest_has_no_yaml_anchors(
    sweep_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(["simulate", "job", str(sweep_file), "--image", "joulie:dev"]) == 0
    out = capsys.readouterr().out
    assert "&id" not in out
    assert "*id" not in out


def test_collect_on_an_empty_folder_fails_saying_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(["simulate", "collect", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert one_line(captured.err) == (
        f"joulie simulate collect: {tmp_path}: no run files (run-NNNNN.json) to collect"
    )
    assert captured.out == ""


def test_collect_on_a_missing_folder_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(["simulate", "collect", str(tmp_path / "nope")]) == 2
    assert one_line(capsys.readouterr().err) == f"joulie: {tmp_path / 'nope'}: no such folder"


# --- traces ----------------------------------------------------------------------------------


def upstream_trace(data_dir: Path, tmp_path: Path, old: str, new: str, *, only: bool) -> Path:
    """The upstream example trace with one request changed (``only``: that job alone)."""
    lines = (data_dir / "traces" / "upstream-example.jsonl").read_text().splitlines()
    changed = [line.replace(old, new) for line in lines]
    if only:
        changed = [line for line in changed if new in line]
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(changed) + "\n")
    return path


def run_trace(trace: Path) -> int:
    return cli(
        ["simulate", "-q", "--inventory", "exp02", "--trace", str(trace), "--baselines", "A"]
    )


def test_a_huge_but_valid_cpu_quantity_is_refused_with_file_and_line(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = upstream_trace(data_dir, tmp_path, '"cpu": "4"', '"cpu": "1E"', only=False)
    assert run_trace(trace) == 2
    assert one_line(capsys.readouterr().err) == (
        f"joulie simulate: {trace}:2: podTemplate.requests.cpu: '1E' is more than a pod can "
        "ask (at most 1000000)"
    )


def test_a_workload_no_node_can_hold_is_warned_about(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = upstream_trace(data_dir, tmp_path, '"gpu": "1"', '"gpu": "9999"', only=False)
    assert run_trace(trace) == 0
    err = capsys.readouterr().err
    assert f"joulie simulate: warning: {trace}: 1 of 5 workloads fit no node" in one_line(err)
    assert "9999 nvidia.com/gpu" in err


def test_a_trace_where_nothing_fits_is_refused(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = upstream_trace(data_dir, tmp_path, '"gpu": "1"', '"gpu": "9999"', only=True)
    assert run_trace(trace) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"joulie simulate: {trace}: no workload fits any node of inventory")
    assert line.endswith("so nothing would run")


def test_an_empty_trace_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "empty.jsonl"
    trace.write_text("")
    assert run_trace(trace) == 2
    assert one_line(capsys.readouterr().err) == (
        f"joulie simulate: {trace}: the trace holds no workloads, so nothing would run"
    )


# --- plan ------------------------------------------------------------------------------------


def test_plan_takes_an_embedded_inventory_by_name_and_prints_the_registry_name() -> None:
    result = joulie("plan", "--inventory", "exp02-5k")
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith("policy static_partition (static-partition-v1): ")
    assert "of 5000 nodes in performance" in first


@pytest.mark.parametrize("command", [["plan", "--inventory"], ["simulate", "-q", "--inventory"]])
def test_an_unknown_inventory_name_lists_the_embedded_ones(command: list[str]) -> None:
    result = joulie(*command, "exp99")
    assert result.returncode == 2
    line = one_line(result.stderr)
    assert "exp99: no such inventory file, nor an embedded inventory" in line
    assert "(embedded: default, exp01, exp01-5k, exp02, exp02-5k, exp03, exp03-5k)" in line


def test_plan_json_keys_are_snake_case_like_the_other_commands() -> None:
    result = joulie("plan", "--inventory", "exp02", "-o", "json")
    assert result.returncode == 0, result.stderr
    keys = set(json.loads(result.stdout))
    assert {"policy", "policy_version", "hp_count", "performance_count", "node_count"} <= keys
    assert not any(any(c.isupper() for c in key) for key in keys)


def test_plan_live_takes_a_kubeconfig_like_status(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    result = joulie("plan", "--live", "--kubeconfig", str(missing))
    assert result.returncode == 2
    assert str(missing) in one_line(result.stderr)


def test_plan_refuses_a_kubeconfig_without_live() -> None:
    result = joulie("plan", "--inventory", "exp02", "--kubeconfig", "x")
    assert result.returncode == 2
    assert one_line(result.stderr) == (
        "joulie: --kubeconfig applies only with --live (an --inventory plan reads no cluster)"
    )


# --- config and --help -----------------------------------------------------------------------


def test_config_for_the_agent_off_a_node_says_what_it_needs() -> None:
    clean = {k: v for k, v in os.environ.items() if k != "NODE_NAME"}
    result = subprocess.run(
        [JOULIE, "config", "--role", "agent"], env=clean, capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "NODE_NAME" in result.stdout  # the table is still printed
    assert (
        "joulie: the agent needs NODE_NAME, which its DaemonSet sets from the pod's node; to "
        "check the rest here: NODE_NAME=node-1 joulie config --role agent"
    ) in result.stderr
    suggested = subprocess.run(
        [JOULIE, "config", "--role", "agent"],
        env={**clean, "NODE_NAME": "node-1"},
        capture_output=True,
        text=True,
    )
    assert suggested.returncode == 0, suggested.stderr


def all_help() -> str:
    commands = [
        [], ["crds"], ["config"], ["plan"], ["status"], ["lifecycle", "matrix"], ["simulate"],
        ["simulate", "sweep"], ["simulate", "job"], ["simulate", "run-index"],
        ["simulate", "collect"],
    ]  # fmt: skip
    texts = []
    for command in commands:
        result = joulie(*command, "--help")
        assert result.returncode == 0, result.stderr
        texts.append(result.stdout)
    return "\n".join(texts)


def test_help_shows_real_placeholders_and_defaults() -> None:
    text = " ".join(all_help().split())  # as read, whatever argparse's line wrapping
    for internal in ("SWEEP_WORKERS", "INDEX_OUTPUT", "STATIC_HP_FRAC ", "RESULTS_CLAIM"):
        assert internal not in text
    assert "--workers N runs in parallel on this machine (default: 1)" in text
    assert "(default: joulie-sweep)" in text
    assert "(default: STATIC_HP_FRAC, else 0.5)" in text


# --- simulate's labels -----------------------------------------------------------------------


def test_lifecycle_both_labels_each_run_as_its_row_and_times_it_alone() -> None:
    result = joulie(
        "simulate", "--inventory", "exp02", "--hours", "1", "--baselines", "A",
        "--lifecycle", "both",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert [line.split(":")[0] for line in lines] == ["exp02 A seed 1", "exp02 A+L seed 1"]
    # Each run's own time: a second run of this size is as quick as the first, not their sum.
    times = [float(line.split("done in ")[1].split()[0]) for line in lines]
    assert all(t < 30 for t in times)


def test_the_scenario_label_follows_the_inventory(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli([*TINY, "--baselines", "A", "--format", "json"]) == 0
    (run,) = json.loads(capsys.readouterr().out)
    assert run["scenario"] == "exp02"


def test_the_lifecycle_both_table_fits_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli([*TINY, "--baselines", "A,B", "--lifecycle", "both"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 125  # was 325
    assert sum(line.startswith("SCENARIO  BASELINE") for line in lines) >= 4  # in blocks


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "--timeout", "inf"],
        ["status", "--interval", "0"],
        ["plan", "--live", "--timeout", "-1"],
    ],
)
def test_a_wait_must_be_finite_and_positive(argv: list[str]) -> None:
    result = joulie(*argv)
    assert result.returncode == 2
    assert "is not a number of seconds above 0 and at most 86400" in result.stderr


def test_run_index_names_the_spec_a_bad_specs_file_breaks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    specs = tmp_path / "specs.json"
    specs.write_text('[{"baseline": "Z"}]')
    argv = ["simulate", "run-index", "--specs", str(specs), "--index", "0"]
    assert cli([*argv, "--output", str(tmp_path / "out")]) == 2
    assert one_line(capsys.readouterr().err).startswith(
        f"joulie simulate: {specs}: spec 0: baseline: Input should be"
    )


def test_a_sweep_file_s_params_have_the_same_bounds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("inventories: [exp02]\nbaselines: [B]\nparams: {static_hp_frac: [0.5, 2]}\n")
    assert cli(["simulate", "job", str(sweep), "--image", "joulie:dev"]) == 2
    captured = capsys.readouterr()
    assert one_line(captured.err).startswith(
        f"joulie simulate: {sweep}: params.static_hp_frac=2: must be at most 1"
    )
    assert captured.out == ""


def test_a_sweep_file_s_generator_is_checked_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("inventories: [exp02]\nbaselines: [A]\nhours: 1\ngenerator: {load: 7}\n")
    assert cli(["simulate", "sweep", "-q", str(sweep), "--workers", "2"]) == 2
    assert one_line(capsys.readouterr().err) == (
        f"joulie simulate: {sweep}: generator.load: must be <= 4, got 7"
    )


def test_an_endless_trace_line_is_refused_in_bounded_memory(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run_trace(Path("/dev/zero")) == 2
    assert one_line(capsys.readouterr().err) == (
        "joulie simulate: /dev/zero:1: longer than 1048576 characters"
    )


def test_run_index_refuses_an_endless_specs_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", "run-index", "--specs", "/dev/zero", "--index", "0"]
    assert cli([*argv, "--output", str(tmp_path)]) == 2
    assert "/dev/zero: larger than 16777216 bytes" in one_line(capsys.readouterr().err)
