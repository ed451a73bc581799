"""`make demo`'s run, short (what CI runs of the README's main command): a cluster of its own
with every role as a process, the embedded workload, the live view and the summary; performance
pods only on performance nodes, energy measured, controls applied by the agent, the manager's
energy accounts and the saving (also as `joulie status --energy` prints them against the demo's
cluster), and nothing left running afterwards."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hack.cluster.runner import REPO, is_running
from tests.support.interrupts import interruptible

pytestmark = pytest.mark.e2e


def processes_using(path: Path) -> list[str]:
    """Processes whose command line or environment names ``path`` (the cluster's components
    name their data directory; the roles carry a kubeconfig from it in their environment)."""
    needle = str(path).encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if needle in cmdline or needle in environ:
            command = cmdline.replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{proc.name}: {command}")
    return found


def test_a_short_demo_runs_places_and_cleans_up(tmp_path: Path) -> None:
    work = tmp_path / "demo"
    summary = tmp_path / "summary.json"
    env = {
        **os.environ,
        "DEMO_DURATION": "40s",
        "DEMO_DIR": str(work),
        "DEMO_SUMMARY": str(summary),
    }
    done = subprocess.run(
        [sys.executable, "-m", "hack.demo"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "Joulie demo summary" in out
    assert "[########################################] 100%" in out  # the live view's bar
    result = json.loads(summary.read_text())
    assert result["nodes"] == 41
    assert result["pods_submitted"] == 72
    placed = sum(result["performance_placed"].values())
    assert placed >= 10
    assert result["performance_on_kept_off_nodes"] == []
    assert set(result["performance_placed"]) == {"performance"}
    # Standard pods go where they are steered: mostly eco, the nodes kept for them.
    assert result["standard_placed"].get("eco", 0) > result["standard_placed"].get("performance", 0)
    assert result["energy_kwh"] > 0
    assert result["control_results"].get("applied", 0) > 0
    assert "all of them on performance nodes" in out
    # The answer (#29 item 4): the live view shows the running saving, the summary what the
    # manager booked, what the same work would have drawn without Joulie and the saving.
    assert "saved so far: " in out
    booked = result["booked"]
    assert booked is not None, result["booked_problem"]
    assert booked["total"]["used_kwh"] > 0
    assert set(booked["by_class"]) == {"performance", "standard"}
    total = booked["total"]
    assert total["without_kwh"] == pytest.approx(total["used_kwh"] + total["saved_kwh"])
    saving = [line for line in out.splitlines() if line.startswith("  saving: ")]
    assert saving == [
        f"  saving: {total['saved_kwh']:.3f} kWh ({total['saved_pct']:.1f} %) of "
        f"{total['without_kwh']:.3f} kWh the same work would draw without Joulie's controls"
    ], out[-3000:]
    # `joulie status --energy` against the demo's cluster: the per-namespace table.
    status = out.split("`joulie status --energy` against the demo cluster, before it stopped:")
    assert len(status) == 2, out[-3000:]
    table = status[1].splitlines()
    header = next(line.split() for line in table if "NAMESPACE" in line)
    assert header == ["NAMESPACE", "CLASS", "kWh", "SHARE", "SAVED", "kWh", "SAVED"]
    rows = {tuple(line.split()[:2]) for line in table if line.strip().startswith("joulie-demo")}
    assert rows == {("joulie-demo", "performance"), ("joulie-demo", "standard")}
    # The same accounts: the manager's last write, as its term ended on SIGTERM, landed.
    assert booked["source"].endswith("(the manager's write as it stopped)"), booked["source"]
    assert any(line.strip().startswith(f"saved: {total['saved_kwh']:.3f} kWh") for line in table)
    # Nothing left running: every component the cluster recorded, and every role.
    state = json.loads((work / "state.json").read_text())
    for name, comp in state["components"].items():
        assert comp["pid"] is None or not is_running(comp["pid"], comp["argv"][0]), name
    assert processes_using(work) == []


def test_ctrl_c_stops_everything_the_demo_started(tmp_path: Path) -> None:
    work = tmp_path / "demo"
    env = {**os.environ, "DEMO_DURATION": "10m", "DEMO_DIR": str(work)}
    process = subprocess.Popen(
        [sys.executable, "-u", "-m", "hack.demo"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=interruptible,
    )
    assert process.stdout is not None
    seen = []
    for line in process.stdout:  # until the live view is drawn: every role is up by then
        seen.append(line)
        if line.startswith("pods submitted"):
            break
    assert seen[-1].startswith("pods submitted"), "".join(seen[-40:])
    process.send_signal(signal.SIGINT)
    rest = process.communicate(timeout=180)[0]
    assert process.returncode == 130, rest[-3000:]
    assert "interrupted: everything the demo started is stopped" in rest
    assert processes_using(work) == []
