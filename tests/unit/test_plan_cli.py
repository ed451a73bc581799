"""`joulie plan` on inventory files, as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

JOULIE = str(Path(sys.executable).parent / "joulie")
INVENTORIES = Path(__file__).resolve().parents[1] / "data" / "inventories"


def plan(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [JOULIE, "plan", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )


def test_exp02_5k_static_partition_keeps_a_fifth_of_every_family() -> None:
    result = plan(
        "--inventory",
        str(INVENTORIES / "02-cluster-nodes-5k.yaml"),
        "--policy",
        "static_partition",
        "--hp-frac",
        "0.2",
        "--output",
        "json",
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert (out["policy"], out["policy_version"]) == ("static_partition", "static-partition-v1")
    assert out["node_count"] == 5000
    assert out["hp_count"] == out["performance_count"] == 1000
    assert len(out["families"]) == 8
    assert sum(f["nodes"] for f in out["families"].values()) == 5000
    for family, counts in out["families"].items():
        assert counts["performance"] >= 1, family
        # Sainte-Laguë keeps every family within one seat of its exact share.
        assert abs(counts["performance"] - counts["nodes"] / 5) <= 1, family
    profiles = out["nodes"]
    assert len(profiles) == 5000
    assert sum(p == "performance" for p in profiles.values()) == 1000


def test_queue_aware_follows_performance_pods() -> None:
    args = (
        "--inventory",
        str(INVENTORIES / "02-cluster-nodes.yaml"),
        "--policy",
        "queue_aware_v1",
        "--output",
        "json",
    )
    quiet = json.loads(plan(*args, "--perf-pods", "0", QUEUE_HP_BASE_FRAC="0").stdout)
    busy = json.loads(plan(*args, "--perf-pods", "150", QUEUE_HP_BASE_FRAC="0").stdout)
    # Without demand only the one-per-family floor stays in performance; 150 pods at 10 per
    # node ask for 15.
    assert quiet["performance_count"] == 8
    assert busy["performance_count"] == 15


def test_table_output_and_errors(tmp_path: Path) -> None:
    table = plan("--inventory", str(INVENTORIES / "01-cluster-nodes.yaml"), "--hp-frac", "0.5")
    assert table.returncode == 0
    assert "FAMILY" in table.stdout
    assert "20 of 40 nodes in performance" in table.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes:\n  - node_name_prefix: x\n    cpu_cores: -1\n")
    broken = plan("--inventory", str(bad))
    assert broken.returncode == 2
    assert "group 0 (x)" in broken.stderr
    assert plan("--inventory", str(bad), "--hp-frac", "2").returncode == 2


def test_class_caps_keeps_every_node_in_performance_and_shows_each_boards_cap() -> None:
    result = plan(
        "--inventory",
        str(INVENTORIES / "02-cluster-nodes.yaml"),
        "--policy",
        "class_caps",
        "--output",
        "json",
        CLASS_CAPS_PERFORMANCE_PCT="90",
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert (out["policy"], out["policy_version"]) == ("class_caps", "class-caps-v1")
    assert out["performance_count"] == out["node_count"]
    caps = out["class_caps"]
    assert caps["performance_pct_of_max"] == 90.0
    watts = caps["standard_and_idle_watts_per_gpu"]
    # Every GPU family, each at its board's energy-optimal cap, within the board's range: an
    # H100 SXM (200-700 W) well above an L40S (100-350 W).
    assert set(watts) == {f for f in out["families"] if f.startswith("gpu:")}
    assert 200 <= watts["gpu:NVIDIA_L40S"] <= 350
    assert watts["gpu:NVIDIA_H100_SXM"] > watts["gpu:NVIDIA_L40S"]
    table = plan(
        "--inventory", str(INVENTORIES / "02-cluster-nodes.yaml"), "--policy", "class_caps"
    )
    assert "gpu:NVIDIA_L40S" in table.stdout
    assert "energy-optimal cap" in table.stdout
    # Cores a standard pod holds exclusively run at nominal; the node CPU stays at performance.
    assert caps["standard_exclusive_cores_at_nominal"] is True
    assert caps["cpu_eco_when_standard"] is False
    assert "cores a standard pod holds exclusively at their nominal frequency" in table.stdout
