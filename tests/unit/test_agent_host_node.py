"""A DaemonSet agent's node, in process: a NodeTwin spec put in force on a fake Intel tree (and a
fake NVML for GPUs), steady passes that write nothing and keep reporting ``applied``, a node out
of the plan restored, SIMULATE_ONLY, and what NodeHardware and controlStatus then say."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from joulie.agent.host_node import (
    CPU_CAP,
    CPU_GOVERNOR,
    GPU_CAP,
    GPU_GOVERNOR,
    cpu_governor_baseline,
)
from joulie.agent.outcomes import ComponentOutcome
from joulie.agent.reports import OWN_SETTING, host_control_status
from joulie.api.enums import ControlResult
from joulie.api.nodetwin import NodeTwinSpec
from tests.support.fake_nvml import normal_node
from tests.support.host_nodes import host_node, host_tree

R = ControlResult
LIMIT0 = "/sys/class/powercap/intel-rapl:0/constraint_0_power_limit_uw"
LIMIT1 = "/sys/class/powercap/intel-rapl:1/constraint_0_power_limit_uw"
EPP0 = "/sys/devices/system/cpu/cpufreq/policy0/energy_performance_preference"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def eco(**gpu: Any) -> NodeTwinSpec:
    return NodeTwinSpec.model_validate(
        {
            "nodeName": "n1",
            "profile": "eco",
            "cpu": {"packagePowerCapWatts": 120, "governor": {"preset": "efficiency"}},
            **({"gpu": gpu} if gpu else {}),
        }
    )


def results(outcomes: dict[str, ComponentOutcome]) -> dict[str, ControlResult | None]:
    return {k: o.result for k, o in outcomes.items()}


def test_an_eco_spec_is_put_in_force_and_later_passes_write_nothing(tmp_path: Path) -> None:
    fake = host_tree(tmp_path)
    original = fake.read(LIMIT0)
    node = host_node(fake, tmp_path / "state")
    first = node.enforce(eco())
    assert results(first) == {
        CPU_CAP: R.APPLIED,
        CPU_GOVERNOR: R.APPLIED,
        GPU_CAP: None,
        GPU_GOVERNOR: None,
    }
    assert fake.read(LIMIT0) == fake.read(LIMIT1) == "120000000"
    assert fake.read(EPP0) in ("balance_power", "power")
    assert node.baseline.get(LIMIT0) == original
    writes = len(fake.writes)
    # The same intent again: nothing written, and still reported applied (not "equivalent"),
    # so controlStatus does not change for nothing.
    again = node.enforce(eco())
    assert len(fake.writes) == writes
    assert results(again)[CPU_CAP] is R.APPLIED
    assert results(again)[CPU_GOVERNOR] is R.APPLIED


def test_a_node_out_of_the_plan_is_restored_once(tmp_path: Path) -> None:
    fake = host_tree(tmp_path)
    before = {p: fake.read(p) for p in (LIMIT0, LIMIT1, EPP0)}
    node = host_node(fake, tmp_path / "state")
    node.enforce(eco())
    restored = node.enforce(None)
    assert results(restored)[CPU_CAP] is R.RESTORED
    assert results(restored)[CPU_GOVERNOR] is R.RESTORED
    assert {p: fake.read(p) for p in before} == before
    assert len(node.baseline) == 0
    # Nothing of the agent's left: the next pass has nothing to do or say.
    writes = len(fake.writes)
    assert set(results(node.enforce(None)).values()) == {None}
    assert len(fake.writes) == writes


def test_governor_writes_off_leaves_the_governor_alone(tmp_path: Path) -> None:
    fake = host_tree(tmp_path)
    epp = fake.read(EPP0)
    node = host_node(fake, tmp_path / "state", governor_writes=False)
    outcome = node.enforce(eco())
    assert results(outcome)[CPU_GOVERNOR] is R.DISABLED
    assert results(outcome)[CPU_CAP] is R.APPLIED
    assert fake.read(EPP0) == epp


def test_simulate_only_computes_and_writes_nothing(tmp_path: Path) -> None:
    fake = host_tree(tmp_path)
    node = host_node(fake, tmp_path / "state", dry_run=True)
    outcome = node.enforce(eco())
    assert results(outcome)[CPU_CAP] is R.NOT_APPLIED
    assert "dry run" in outcome[CPU_CAP].message
    assert fake.writes == []  # not even the BIOS-lock probe
    assert not (tmp_path / "state").exists()


def test_gpu_caps_are_recorded_applied_and_restored(tmp_path: Path) -> None:
    fake = host_tree(tmp_path)
    nvml = normal_node()
    limits = [g.limit_mw for g in nvml.gpus]
    node = host_node(fake, tmp_path / "state", nvml=nvml)
    outcome = node.enforce(eco(powerCap={"scope": "perGpu", "capWattsPerGpu": 200}))
    assert results(outcome)[GPU_CAP] is R.APPLIED, outcome[GPU_CAP].message
    assert [g.limit_mw for g in nvml.gpus] == [200_000] * len(nvml.gpus)
    restored = node.restore_all()
    assert results(restored)[GPU_CAP] is R.RESTORED
    assert [g.limit_mw for g in nvml.gpus] == limits


def test_nodehardware_shows_the_baseline_and_the_preset_result(tmp_path: Path) -> None:
    fake = host_tree(tmp_path)
    node = host_node(fake, tmp_path / "state")
    node.enforce(eco())
    status = node.hardware_status()
    governor = status["cpu"]["governor"]
    assert governor["baseline"]["energy_performance_preference"] == "balance_performance"
    results_by_preset = {p["preset"]: p.get("result") for p in governor["presets"]}
    assert results_by_preset["efficiency"] == "applied"
    assert results_by_preset["performance"] is None
    assert status["quality"]["overall"] == "exact"


def test_the_cpufreq_baseline_is_shown_per_setting_or_per_policy() -> None:
    prefix = "/sys/devices/system/cpu/cpufreq"
    entries: dict[str, str | int] = {
        f"{prefix}/policy0/scaling_governor": "powersave",
        f"{prefix}/policy1/scaling_governor": "powersave",
        f"{prefix}/policy0/scaling_max_freq": 3_900_000,
        f"{prefix}/policy1/scaling_max_freq": 3_500_000,
        "/sys/class/powercap/intel-rapl:0/constraint_0_power_limit_uw": 165_000_000,
    }
    assert cpu_governor_baseline(entries) == {
        "scaling_governor": "powersave",
        "policy0/scaling_max_freq": "3900000",
        "policy1/scaling_max_freq": "3500000",
    }


def test_control_status_says_restored_once_nothing_of_the_agent_is_in_force() -> None:
    stored = {
        "cpu": {"backend": "host", "result": "applied", "message": "", "updatedAt": "old"},
    }
    none = ComponentOutcome(None)
    status = host_control_status({"cpu": none, "gpu": none}, stored, "host", NOW)
    assert status["cpu"]["result"] == "restored"
    assert status["cpu"]["message"] == OWN_SETTING
    assert "gpu" not in status  # never reported, nothing to say
    again = host_control_status({"cpu": none}, status, "host", NOW.replace(hour=13))
    assert again == status  # unchanged, time stamp included: no write
