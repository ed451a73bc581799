"""`joulie plan` refuses a flag that the chosen policy (or mode) would ignore, instead of
printing a plan that silently did not use it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

JOULIE = str(Path(sys.executable).parent / "joulie")
INVENTORY = str(
    Path(__file__).resolve().parents[1] / "data" / "inventories" / "01-cluster-nodes.yaml"
)


def plan(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != "POLICY_TYPE"}
    return subprocess.run(
        [JOULIE, "plan", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, **env},
    )


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (
            ["--policy", "queue_aware_v1", "--hp-frac", "0.3"],
            {},
            "--hp-frac applies only to the static_partition policy, not to queue_aware_v1 "
            "(chosen by --policy)",
        ),
        (
            ["--hp-frac", "0.3"],
            {"POLICY_TYPE": "rule_swap_v1"},
            "--hp-frac applies only to the static_partition policy, not to rule_swap_v1 "
            "(set by POLICY_TYPE)",
        ),
        (
            ["--perf-pods", "5"],
            {},
            "--perf-pods applies only to the queue_aware_v1 policy, not to static_partition "
            "(the default; choose one with --policy)",
        ),
        (
            ["--policy", "rule_swap_v1", "--perf-pods", "5"],
            {},
            "--perf-pods applies only to the queue_aware_v1 policy, not to rule_swap_v1",
        ),
        (
            ["--timeout", "3"],
            {},
            "--timeout applies only with --live",
        ),
    ],
)
def test_a_flag_the_policy_does_not_read_is_refused(
    args: list[str], env: dict[str, str], expected: str
) -> None:
    result = plan("--inventory", INVENTORY, *args, **env)
    assert result.returncode == 2
    assert expected in result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr


def test_perf_pods_is_refused_with_live_which_counts_pods() -> None:
    result = plan("--live", "--policy", "queue_aware_v1", "--perf-pods", "5")
    assert result.returncode == 2
    assert "--perf-pods does not apply with --live" in result.stderr


def test_flags_that_apply_are_accepted() -> None:
    assert plan("--inventory", INVENTORY, "--hp-frac", "0.3").returncode == 0
    queue = plan("--inventory", INVENTORY, "--policy", "queue_aware_v1", "--perf-pods", "5")
    assert queue.returncode == 0, queue.stderr
    assert "FAMILY" in queue.stdout
