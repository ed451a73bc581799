"""`make demo`'s run, short (what CI runs of the README's main command): a cluster of its own
with every role as a process, the embedded workload, the live view and the summary; performance
pods only on performance nodes, energy measured, controls applied by the agent, and nothing left
running afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hack.cluster.runner import REPO, is_running

pytestmark = pytest.mark.e2e


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
    assert result["standard_placed"].get("eco", 0) > result["standard_placed"].get(
        "performance", 0
    )
    assert result["energy_kwh"] > 0
    assert result["control_results"].get("applied", 0) > 0
    assert "all of them on performance nodes" in out
    # Nothing left running: every component the cluster recorded, and every role.
    state = json.loads((work / "state.json").read_text())
    for name, comp in state["components"].items():
        assert comp["pid"] is None or not is_running(comp["pid"], comp["argv"][0]), name
    leftover = subprocess.run(
        ["pgrep", "-f", str(work)], capture_output=True, text=True, check=False
    ).stdout
    assert leftover == "", leftover
