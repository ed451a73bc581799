"""GPU caps and governor presets through GpuControl on a fake NVML and fake amdgpu trees: the
limit in force recorded before the first write and put back exactly, presets turned into locked
clock pairs or amdgpu levels, refusals told apart, and a dry run that touches nothing."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from joulie.agent.baseline import BOOT_ID_PATH, Baseline, BaselineValue
from joulie.agent.gpu.backends import GpuBackends
from joulie.agent.gpu.control import GpuControl
from joulie.agent.gpu.device import GpuDiscovery
from joulie.agent.gpu.discovery import discover_gpus, gpu_hardware_status
from joulie.agent.gpu.errors import GpuInvalidArgument, GpuNotSupported, GpuUnavailable
from joulie.agent.gpu.nvml import NvmlAdapter
from joulie.api.enums import ControlResult, GpuGovernorPreset
from joulie.api.nodehardware import GpuBaseline
from joulie.core.caps import EffectiveCap
from joulie.hardware.catalog import Catalog
from tests.support.fake_nvml import (
    FakeNvml,
    limits_not_supported_node,
    no_permission_node,
    normal_node,
)
from tests.support.fake_sysfs import FakeSysfs
from tests.support.sysfs_trees import amd_board, drm_card, mi300x_node, pci_device

R = ControlResult
P = GpuGovernorPreset
CATALOG = Catalog.load()
SLOTS = ("0000:c1:00.0", "0000:c2:00.0")
CARDS = ("card1", "card2")
LEVEL = "/sys/class/drm/{}/device/power_dpm_force_performance_level"


@pytest.fixture
def tree(tmp_path: Path) -> FakeSysfs:
    fake = FakeSysfs(tmp_path / "root")
    fake.put(BOOT_ID_PATH, "6b1c9a52-0000-4000-8000-000000000001")
    return fake


def control(
    nvml: NvmlAdapter | None, tree: FakeSysfs, state: Path, *, dry_run: bool = False
) -> GpuControl:
    return GpuControl(GpuBackends.of(tree, nvml), Baseline.load(state, tree), dry_run=dry_run)


def found(nvml: NvmlAdapter | None, tree: FakeSysfs, ctl: GpuControl | None = None) -> GpuDiscovery:
    return discover_gpus(GpuBackends.of(tree, nvml), refused=ctl.refused() if ctl else ())


def limits(nvml: FakeNvml) -> list[int | None]:
    return [g.limit_mw for g in nvml.gpus]


def key(nvml: FakeNvml, index: int, setting: str) -> str:
    return f"gpu/{nvml.gpus[index].uuid}/{setting}"


# --- caps: baseline, write, restore ------------------------------------------------------------


def test_a_cap_is_recorded_before_the_write_and_restored_exactly(
    tree: FakeSysfs, tmp_path: Path
) -> None:
    nvml = normal_node(4)
    nvml.gpus[1].limit_mw = 650_500  # an operator's own limit on one board
    ctl = control(nvml, tree, tmp_path / "state")
    gpus = found(nvml, tree)

    applied = ctl.apply_cap(gpus, 300, None)
    assert applied.result is R.APPLIED
    assert nvml.set_calls() == [(i, (300_000,)) for i in range(4)]
    assert ctl.baseline.entries() == {
        key(nvml, 0, "power-limit-mw"): 700_000,
        key(nvml, 1, "power-limit-mw"): 650_500,
        key(nvml, 2, "power-limit-mw"): 700_000,
        key(nvml, 3, "power-limit-mw"): 700_000,
    }
    assert [(s.observed, s.target, s.read_back) for s in applied.settings][:2] == [
        ("700000", "300000", "300000"),
        ("650500", "300000", "300000"),
    ]

    restored = ctl.restore_cap(gpus)
    assert restored.result is R.RESTORED
    assert limits(nvml) == [700_000, 650_500, 700_000, 700_000]
    assert len(ctl.baseline) == 0
    assert not ctl.baseline.path.exists()


def test_the_same_cap_again_writes_nothing_and_the_baseline_stays_the_first(
    tree: FakeSysfs, tmp_path: Path
) -> None:
    nvml = normal_node(2)
    ctl = control(nvml, tree, tmp_path / "state")
    gpus = found(nvml, tree)
    ctl.apply_cap(gpus, 300, None)

    again = ctl.apply_cap(gpus, 300, None)
    assert again.result is R.EQUIVALENT
    assert len(nvml.set_calls()) == 2

    # A new cap, and a restarted agent in the same boot: the record is still the board's own.
    restarted = control(nvml, tree, tmp_path / "state")
    assert restarted.apply_cap(gpus, None, 50).result is R.APPLIED
    assert limits(nvml) == [350_000, 350_000]
    assert set(restarted.baseline.entries().values()) == {700_000}
    assert restarted.restore_cap(gpus).result is R.RESTORED
    assert limits(nvml) == [700_000, 700_000]


def test_no_cap_restores_and_says_nothing_when_nothing_was_changed(
    tree: FakeSysfs, tmp_path: Path
) -> None:
    nvml = normal_node(2)
    ctl = control(nvml, tree, tmp_path / "state")
    gpus = found(nvml, tree)
    assert ctl.apply_cap(gpus, None, None).result is None
    ctl.apply_cap(gpus, 400, None)
    assert ctl.apply_cap(gpus, None, None).result is R.RESTORED
    assert limits(nvml) == [700_000, 700_000]


def test_caps_per_board_go_through_the_same_guarded_write(tree: FakeSysfs, tmp_path: Path) -> None:
    nvml = normal_node(4)
    ctl = control(nvml, tree, tmp_path / "state")
    gpus = found(nvml, tree)
    ctl.apply_cap(gpus, 400, None)  # every board capped node-wide first
    caps = [EffectiveCap(300, None), None, EffectiveCap(9_999, None), EffectiveCap(100, None)]
    notes = ["standard work", "idle", "performance work", "node-level cap: shared by several pods"]
    outcome = ctl.apply_caps(gpus, caps, notes=notes)
    # Each board its own cap, clamped to the board's range (200-700 W); the board without one
    # is back at its own limit, recorded before the first write.
    assert limits(nvml) == [300_000, 700_000, 700_000, 200_000]
    assert [s.result for s in outcome.settings] == [R.APPLIED, R.RESTORED, R.APPLIED, R.APPLIED]
    assert outcome.settings[3].detail == "node-level cap: shared by several pods"
    assert set(ctl.baseline.entries()) == {key(nvml, i, "power-limit-mw") for i in (0, 2, 3)}
    # The same caps again: nothing written, the unchanged board says it is at its own limit.
    writes = len(nvml.set_calls())
    again = ctl.apply_caps(gpus, caps, notes=notes)
    assert len(nvml.set_calls()) == writes
    assert again.result is R.EQUIVALENT
    assert again.settings[1].detail == "its own limit; idle"
    assert ctl.restore_cap(gpus).result is R.RESTORED
    assert limits(nvml) == [700_000] * 4
    with pytest.raises(ValueError, match="3 caps for 4 boards"):
        ctl.apply_caps(gpus, caps[:3])


def test_a_limit_that_cannot_be_read_is_not_written(tree: FakeSysfs, tmp_path: Path) -> None:
    nvml = normal_node(2)
    gpus = found(nvml, tree)
    nvml.gpus[0].limit_readable = False
    ctl = control(nvml, tree, tmp_path / "state")
    outcome = ctl.apply_cap(gpus, 300, None)
    assert [s.result for s in outcome.settings] == [R.NOT_APPLIED, R.APPLIED]
    assert outcome.result is R.NOT_APPLIED
    assert "cannot be read" in outcome.message
    assert nvml.set_calls() == [(1, (300_000,))]
    assert list(ctl.baseline.entries()) == [key(nvml, 1, "power-limit-mw")]


def test_no_permission_is_refused_and_not_attempted_again(tree: FakeSysfs, tmp_path: Path) -> None:
    nvml = no_permission_node(2)
    ctl = control(nvml, tree, tmp_path / "state")
    outcome = ctl.apply_cap(found(nvml, tree), 300, None)
    assert outcome.result is R.REFUSED
    assert limits(nvml) == [700_000, 700_000]
    assert len(ctl.baseline) == 0  # nothing of the agent's is in force
    assert ctl.refused() == {0, 1}

    assert ctl.apply_cap(found(nvml, tree, ctl), 300, None).result is R.REFUSED
    assert len(nvml.set_calls()) == 2  # the first pass only


def test_limits_the_board_does_not_support_are_unsupported(tree: FakeSysfs, tmp_path: Path) -> None:
    nvml = limits_not_supported_node(2)
    ctl = control(nvml, tree, tmp_path / "state")
    assert ctl.apply_cap(found(nvml, tree), 200, None).result is R.UNSUPPORTED
    assert nvml.calls == []
    assert len(ctl.baseline) == 0


def test_a_lost_board_is_an_error_while_the_others_are_capped(
    tree: FakeSysfs, tmp_path: Path
) -> None:
    nvml = normal_node(4)
    gpus = found(nvml, tree)
    nvml.lose(2)
    ctl = control(nvml, tree, tmp_path / "state")
    outcome = ctl.apply_cap(gpus, 350, None)
    assert outcome.result is R.ERROR
    assert [s.result for s in outcome.settings] == [R.APPLIED, R.APPLIED, R.ERROR, R.APPLIED]
    assert nvml.gpus[2].uuid in outcome.message
    assert "lost" in outcome.message
    assert limits(nvml) == [350_000, 350_000, 700_000, 350_000]


def test_another_limiter_is_drift_then_contended_until_reasserted(
    tree: FakeSysfs, tmp_path: Path
) -> None:
    nvml = normal_node(2)
    nvml.gpus[1].held_limit_mw = 500_000  # a BMC puts its own limit back
    ctl = control(nvml, tree, tmp_path / "state")
    gpus = found(nvml, tree)
    assert [s.result for s in ctl.apply_cap(gpus, 300, None).settings] == [R.APPLIED, R.DRIFT]
    # The next pass reads what the write left: the same drift (the rule every setting follows,
    # CPU files included), not another writer, and no write.
    second = ctl.apply_cap(gpus, 300, None)
    assert [s.result for s in second.settings] == [R.EQUIVALENT, R.DRIFT]
    assert "wrote 300 W, reads 500 W" in second.message
    # The limiter then moves to yet another value: that is another writer, left alone.
    nvml.gpus[1].limit_mw = 450_000
    third = ctl.apply_cap(gpus, 300, None)
    assert [s.result for s in third.settings] == [R.EQUIVALENT, R.CONTENDED]
    assert len(nvml.set_calls()) == 2
    ctl.apply_cap(gpus, 300, None, reassert=True)
    assert nvml.set_calls()[-1] == (1, (300_000,))


def test_a_baseline_that_cannot_be_stored_stops_the_write(tree: FakeSysfs, tmp_path: Path) -> None:
    blocked = tmp_path / "state"
    blocked.write_text("a file where the state directory should be")
    nvml = normal_node(2)
    ctl = GpuControl(GpuBackends.of(tree, nvml), Baseline(blocked, "boot"))
    outcome = ctl.apply_cap(found(nvml, tree), 300, None)
    assert outcome.result is R.ERROR
    assert "not written" in outcome.message
    assert nvml.calls == []


def test_a_baseline_is_never_restored_onto_another_board(tree: FakeSysfs, tmp_path: Path) -> None:
    nvml = normal_node(2)
    ctl = control(nvml, tree, tmp_path / "state")
    ctl.apply_cap(found(nvml, tree), 300, None)
    recorded = key(nvml, 0, "power-limit-mw")
    nvml.gpus[0].uuid = "GPU-ffffffff-0000-4000-8000-0000000000ff"  # another board in slot 0

    outcome = ctl.restore_cap(found(nvml, tree))
    assert [s.result for s in outcome.settings] == [R.ERROR, R.RESTORED]
    assert "not on this node" in outcome.message
    assert limits(nvml) == [300_000, 700_000]
    assert list(ctl.baseline.entries()) == [recorded]


def test_amd_caps_are_recorded_in_microwatts_and_restored(tree: FakeSysfs, tmp_path: Path) -> None:
    hwmons = mi300x_node(tree)
    ctl = control(None, tree, tmp_path / "state")
    gpus = found(None, tree)
    assert ctl.apply_cap(gpus, 500, None).result is R.APPLIED
    assert [tree.read_int(f"{h}/power1_cap") for h in hwmons] == [500_000_000] * 2
    assert ctl.baseline.entries() == {f"gpu/{s}/power1_cap-uw": 750_000_000 for s in SLOTS}
    assert ctl.restore_cap(gpus).result is R.RESTORED
    assert [tree.read_int(f"{h}/power1_cap") for h in hwmons] == [750_000_000] * 2


# --- presets on NVML ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("preset", "ceiling", "pair"),
    [
        (P.EFFICIENT, None, (345, 1575)),  # 80 % of 1980 MHz, down to a listed clock
        (P.EFFICIENT, 60, (345, 1185)),
        (P.LOW, None, (345, 345)),
        (P.PEAK, None, (1980, 1980)),
    ],
)
def test_presets_lock_the_graphics_clocks_of_every_board(
    tree: FakeSysfs, tmp_path: Path, preset: P, ceiling: float | None, pair: tuple[int, int]
) -> None:
    nvml = normal_node(2)
    ctl = control(nvml, tree, tmp_path / "state")
    outcome = ctl.apply_preset(found(nvml, tree), preset, ceiling, enabled=True)
    assert nvml.set_calls("set_locked_gpu_clocks") == [(0, pair), (1, pair)]
    assert [g.locked_clocks for g in nvml.gpus] == [pair, pair]
    # NVML cannot read a lock back, and the board was unlocked before (every boot starts so).
    assert outcome.result is R.APPLIED_UNVERIFIED
    assert ctl.baseline.entries() == {key(nvml, i, "locked-clocks-mhz"): "unlocked" for i in (0, 1)}


def test_the_same_preset_again_is_not_written_and_auto_resets(
    tree: FakeSysfs, tmp_path: Path
) -> None:
    nvml = normal_node(2)
    ctl = control(nvml, tree, tmp_path / "state")
    gpus = found(nvml, tree)
    assert ctl.apply_preset(gpus, P.AUTO, None, enabled=True).result is R.EQUIVALENT
    assert nvml.calls == []

    ctl.apply_preset(gpus, P.EFFICIENT, None, enabled=True)
    ctl.apply_preset(gpus, P.EFFICIENT, None, enabled=True)
    assert len(nvml.set_calls("set_locked_gpu_clocks")) == 2

    ctl.apply_preset(gpus, P.AUTO, None, enabled=True)
    assert nvml.set_calls("reset_locked_gpu_clocks") == [(0, ()), (1, ())]
    assert [g.locked_clocks for g in nvml.gpus] == [None, None]


def test_restore_resets_the_locks_and_empties_the_baseline(tree: FakeSysfs, tmp_path: Path) -> None:
    nvml = normal_node(2)
    ctl = control(nvml, tree, tmp_path / "state")
    gpus = found(nvml, tree)
    ctl.apply_cap(gpus, 400, None)
    ctl.apply_preset(gpus, P.LOW, None, enabled=True)

    cap, clocks = ctl.restore_all(gpus)
    assert (cap.result, clocks.result) == (R.RESTORED, R.RESTORED)
    assert nvml.set_calls("reset_locked_gpu_clocks") == [(0, ()), (1, ())]
    assert [g.locked_clocks for g in nvml.gpus] == [None, None]
    assert limits(nvml) == [700_000, 700_000]
    assert len(ctl.baseline) == 0


def test_a_readable_lock_is_verified_and_an_operators_lock_comes_back(
    tree: FakeSysfs, tmp_path: Path
) -> None:
    nvml = normal_node(1)
    nvml.locks_readable = True
    nvml.gpus[0].locked_clocks = (600, 1500)  # set by an operator before the agent
    ctl = control(nvml, tree, tmp_path / "state")
    gpus = found(nvml, tree)
    assert ctl.apply_preset(gpus, P.PEAK, None, enabled=True).result is R.APPLIED
    assert ctl.baseline.entries() == {key(nvml, 0, "locked-clocks-mhz"): "600-1500"}
    assert ctl.restore_preset(gpus).result is R.RESTORED
    assert nvml.gpus[0].locked_clocks == (600, 1500)


def test_governor_writes_off_restores_then_reports_disabled(
    tree: FakeSysfs, tmp_path: Path
) -> None:
    nvml = normal_node(2)
    ctl = control(nvml, tree, tmp_path / "state")
    gpus = found(nvml, tree)
    assert ctl.apply_preset(gpus, P.EFFICIENT, None, enabled=False).result is R.DISABLED
    assert nvml.calls == []

    ctl.apply_preset(gpus, P.EFFICIENT, None, enabled=True)
    assert ctl.apply_preset(gpus, P.EFFICIENT, None, enabled=False).result is R.RESTORED
    assert [g.locked_clocks for g in nvml.gpus] == [None, None]
    assert ctl.apply_preset(gpus, P.EFFICIENT, None, enabled=False).result is R.DISABLED
    assert ctl.apply_preset(gpus, None, None, enabled=True).result is None


def test_sustained_is_unsupported_and_says_so(tree: FakeSysfs, tmp_path: Path) -> None:
    nvml = normal_node(2)
    ctl = control(nvml, tree, tmp_path / "state")
    outcome = ctl.apply_preset(found(nvml, tree), P.SUSTAINED, None, enabled=True)
    assert outcome.result is R.UNSUPPORTED
    assert "not implemented" in outcome.message
    assert nvml.calls == []


def test_clock_refusals_are_told_apart_and_leave_no_baseline(
    tree: FakeSysfs, tmp_path: Path
) -> None:
    nvml = normal_node(2)
    nvml.fail["set_locked_gpu_clocks", 1] = GpuNotSupported("Not Supported", code=3)
    ctl = control(nvml, tree, tmp_path / "state")
    outcome = ctl.apply_preset(found(nvml, tree), P.LOW, None, enabled=True)
    assert [s.result for s in outcome.settings] == [R.APPLIED_UNVERIFIED, R.UNSUPPORTED]
    assert list(ctl.baseline.entries()) == [key(nvml, 0, "locked-clocks-mhz")]

    denied = no_permission_node(2)
    ctl = control(denied, tree, tmp_path / "other-state")
    assert ctl.apply_preset(found(denied, tree), P.LOW, None, enabled=True).result is R.REFUSED
    assert len(ctl.baseline) == 0


# --- presets on amdgpu -------------------------------------------------------------------------


def levels(tree: FakeSysfs) -> list[str]:
    return [tree.read(LEVEL.format(c)) for c in CARDS]


def test_amd_presets_write_the_performance_level_and_restore_it(
    tree: FakeSysfs, tmp_path: Path
) -> None:
    mi300x_node(tree)
    ctl = control(None, tree, tmp_path / "state")
    gpus = found(None, tree)
    assert ctl.apply_preset(gpus, P.LOW, None, enabled=True).result is R.APPLIED
    assert levels(tree) == ["low", "low"]
    assert ctl.apply_preset(gpus, P.PEAK, None, enabled=True).result is R.APPLIED
    assert levels(tree) == ["profile_peak", "profile_peak"]
    assert ctl.baseline.entries() == {
        f"gpu/{s}/power_dpm_force_performance_level": "auto" for s in SLOTS
    }
    assert ctl.apply_preset(gpus, P.AUTO, None, enabled=True).result is R.APPLIED

    ctl.apply_preset(gpus, P.LOW, None, enabled=True)
    assert ctl.restore_preset(gpus).result is R.RESTORED
    assert levels(tree) == ["auto", "auto"]
    assert len(ctl.baseline) == 0


def test_amd_efficient_is_unsupported_and_a_refused_level_is_an_error(
    tree: FakeSysfs, tmp_path: Path
) -> None:
    mi300x_node(tree)
    ctl = control(None, tree, tmp_path / "state")
    gpus = found(None, tree)
    outcome = ctl.apply_preset(gpus, P.EFFICIENT, None, enabled=True)
    assert outcome.result is R.UNSUPPORTED
    assert tree.writes == []

    tree.refuse_when(LEVEL.format(CARDS[1]), lambda v: v == "profile_peak", errno.EINVAL)
    outcome = ctl.apply_preset(gpus, P.PEAK, None, enabled=True)
    assert [s.result for s in outcome.settings] == [R.APPLIED, R.ERROR]
    assert levels(tree) == ["profile_peak", "auto"]
    assert list(ctl.baseline.entries()) == [f"gpu/{SLOTS[0]}/power_dpm_force_performance_level"]


def test_boards_without_clock_control_are_unsupported(tree: FakeSysfs, tmp_path: Path) -> None:
    intel = pci_device(tree, "0000:4d:00.0", "0x8086", "0x0bd5", "0x038000")
    tree.put(f"{intel}/hwmon/hwmon5/name", "i915")
    drm_card(tree, "card1", intel)
    ctl = control(None, tree, tmp_path / "state")
    gpus = found(None, tree)
    assert gpus.vendor == "intel"
    assert ctl.apply_preset(gpus, P.LOW, None, enabled=True).result is R.UNSUPPORTED
    assert tree.writes == []
    assert gpu_hardware_status(gpus, CATALOG).governor.writable is False  # type: ignore[union-attr]


# --- dry run -----------------------------------------------------------------------------------


def test_a_dry_run_writes_and_records_nothing(tree: FakeSysfs, tmp_path: Path) -> None:
    nvml = normal_node(2)
    ctl = control(nvml, tree, tmp_path / "state", dry_run=True)
    gpus = found(nvml, tree)
    assert ctl.apply_cap(gpus, 300, None).result is R.NOT_APPLIED
    assert ctl.apply_preset(gpus, P.EFFICIENT, None, enabled=True).result is R.NOT_APPLIED
    assert nvml.calls == []
    assert len(ctl.baseline) == 0
    assert not (tmp_path / "state").exists()

    amd_tree = FakeSysfs(tmp_path / "amd")
    hwmons = mi300x_node(amd_tree)
    before = [amd_tree.read(f"{h}/power1_cap") for h in hwmons]
    amd = GpuControl(
        GpuBackends.of(amd_tree, None), Baseline(tmp_path / "amd-state", "boot"), dry_run=True
    )
    amd_gpus = found(None, amd_tree)
    assert amd.apply_cap(amd_gpus, 400, None).result is R.NOT_APPLIED
    assert amd.apply_preset(amd_gpus, P.LOW, None, enabled=True).result is R.NOT_APPLIED
    assert amd_tree.writes == []
    assert [amd_tree.read(f"{h}/power1_cap") for h in hwmons] == before
    assert [amd_tree.read(LEVEL.format(c)) for c in CARDS] == ["auto", "auto"]


# --- NodeHardware status.gpu.governor ----------------------------------------------------------


def test_nvidia_status_lists_the_presets_with_their_clocks_and_the_baseline(
    tree: FakeSysfs, tmp_path: Path
) -> None:
    nvml = normal_node(2)
    ctl = control(nvml, tree, tmp_path / "state")
    gpus = found(nvml, tree)
    ctl.apply_cap(gpus, 300, None)
    ctl.apply_preset(gpus, P.LOW, None, enabled=True)

    governor = gpu_hardware_status(gpus, CATALOG, ctl.baseline).governor
    assert governor is not None
    assert governor.mechanism == "nvml"
    assert governor.writable is True
    assert governor.graphics_clock is not None
    assert (governor.graphics_clock.min_m_hz, governor.graphics_clock.max_m_hz) == (345, 1980)
    assert [(p.preset, p.native) for p in governor.presets or []] == [
        ("auto", "clocks unlocked (driver default)"),
        ("efficient", "locked 345-1575 MHz"),
        ("low", "locked 345 MHz"),
        ("peak", "locked 1980 MHz"),
    ]
    assert governor.baseline == [
        GpuBaseline(
            index=i,
            uuid=nvml.gpus[i].uuid,
            settings={"locked-clocks-mhz": "unlocked"},
        )
        for i in (0, 1)
    ]


def test_amd_status_lists_the_levels_it_can_write(tree: FakeSysfs) -> None:
    mi300x_node(tree)
    governor = gpu_hardware_status(found(None, tree), CATALOG).governor
    assert governor is not None
    assert (governor.mechanism, governor.current, governor.writable) == ("sysfs", "auto", True)
    assert governor.graphics_clock is not None
    assert (governor.graphics_clock.min_m_hz, governor.graphics_clock.max_m_hz) == (500, 2100)
    assert [(p.preset, p.native) for p in governor.presets or []] == [
        ("auto", "power_dpm_force_performance_level=auto"),
        ("low", "power_dpm_force_performance_level=low"),
        ("peak", "power_dpm_force_performance_level=profile_peak"),
    ]
    assert governor.baseline is None


def test_status_only_lists_presets_every_board_can_express(tree: FakeSysfs) -> None:
    amd_board(tree, "card1", SLOTS[0])
    amd_board(tree, "card2", SLOTS[1], level=None)  # no clock policy file on this one
    governor = gpu_hardware_status(found(None, tree), CATALOG).governor
    assert governor is not None
    assert governor.presets is None
    assert governor.writable is False


def test_status_names_a_baseline_whose_board_is_gone(tree: FakeSysfs, tmp_path: Path) -> None:
    nvml = normal_node(2)
    ctl = control(nvml, tree, tmp_path / "state")
    ctl.apply_cap(found(nvml, tree), 300, None)
    gone = nvml.gpus.pop()
    status = gpu_hardware_status(found(nvml, tree), CATALOG, ctl.baseline)
    assert status.governor is not None
    # Cap baselines are not clock settings: the governor block lists none of them.
    assert status.governor.baseline is None
    assert any(gone.uuid in w and "cannot be restored" in w for w in status.warnings or [])


def test_a_node_whose_cap_writes_are_refused_is_not_writable(
    tree: FakeSysfs, tmp_path: Path
) -> None:
    nvml = no_permission_node(2)
    ctl = control(nvml, tree, tmp_path / "state")
    ctl.apply_cap(found(nvml, tree), 300, None)
    governor = gpu_hardware_status(found(nvml, tree, ctl), CATALOG).governor
    assert governor is not None
    assert governor.writable is False


# --- board identity, refusals, tolerance, rediscovery ------------------------------------------


def test_a_board_whose_uuid_cannot_be_read_is_not_written_so_its_own_cap_never_becomes_baseline(
    tree: FakeSysfs, tmp_path: Path
) -> None:
    nvml = normal_node(2)
    nvml.fail["uuid", 0] = GpuUnavailable("GPU 0: uuid: Unknown Error", code=999)
    ctl = control(nvml, tree, tmp_path / "state")
    gpus = found(nvml, tree)
    assert gpus.devices[0].uuid is None

    cap = ctl.apply_cap(gpus, 300, None)
    preset = ctl.apply_preset(gpus, P.LOW, None, enabled=True)
    assert [index for _, index, _ in nvml.calls] == [1, 1]
    assert not any(k.startswith("gpu/0/") for k in ctl.baseline.entries())
    assert [s.result for s in cap.settings] == [R.ERROR, R.APPLIED]
    assert "board identity unknown: not written" in cap.message
    assert [s.result for s in preset.settings] == [R.ERROR, R.APPLIED_UNVERIFIED]
    assert any("UUID unreadable" in w for w in gpus.warnings)
    assert ctl.needs_rediscovery()  # a fresh read may find the UUID

    # The UUID reads again: the board's own limit is what is recorded, and what comes back.
    del nvml.fail["uuid", 0]
    gpus = found(nvml, tree)
    assert ctl.apply_cap(gpus, 300, None).result is R.APPLIED
    assert not ctl.needs_rediscovery()
    assert ctl.baseline.get(key(nvml, 0, "power-limit-mw")) == 700_000
    assert ctl.restore_cap(gpus).result is R.RESTORED
    assert limits(nvml) == [700_000, 700_000]


def test_a_baseline_is_not_restored_onto_a_board_whose_uuid_cannot_be_read(
    tree: FakeSysfs, tmp_path: Path
) -> None:
    nvml = normal_node(2)
    ctl = control(nvml, tree, tmp_path / "state")
    ctl.apply_cap(found(nvml, tree), 300, None)
    nvml.fail["uuid", 0] = GpuUnavailable("GPU 0: uuid: Unknown Error", code=999)

    outcome = ctl.restore_cap(found(nvml, tree))
    assert [s.result for s in outcome.settings] == [R.ERROR, R.RESTORED]
    assert limits(nvml) == [300_000, 700_000]
    assert list(ctl.baseline.entries()) == [key(nvml, 0, "power-limit-mw")]
    assert ctl.needs_rediscovery()


def test_a_board_whose_cap_write_was_refused_is_still_restored(
    tree: FakeSysfs, tmp_path: Path
) -> None:
    nvml = normal_node(2)
    ctl = control(nvml, tree, tmp_path / "state")
    assert ctl.apply_cap(found(nvml, tree), 300, None).result is R.APPLIED
    nvml.can_set = False  # the agent loses the privilege
    assert ctl.apply_cap(found(nvml, tree, ctl), 400, None).result is R.REFUSED
    assert ctl.refused() == {0, 1}
    assert set(ctl.baseline.entries().values()) == {700_000}
    refused = found(nvml, tree, ctl)
    assert not refused.control_available  # monitor-only for new caps

    # Restoring is still tried (the board's own value, clamped and verified)...
    attempts = len(nvml.set_calls())
    assert ctl.restore_cap(refused).result is R.REFUSED
    assert len(nvml.set_calls()) == attempts + 2
    assert len(ctl.baseline) == 2
    # ... and once it is allowed again, it succeeds and the boards are no longer refused.
    nvml.can_set = True
    assert ctl.restore_cap(found(nvml, tree, ctl)).result is R.RESTORED
    assert limits(nvml) == [700_000, 700_000]
    assert len(ctl.baseline) == 0
    assert ctl.refused() == frozenset()
    assert found(nvml, tree, ctl).control_available


def test_nothing_is_written_to_an_index_that_holds_another_board_now(
    tree: FakeSysfs, tmp_path: Path
) -> None:
    nvml = normal_node(2)
    nvml.gpus[1].limit_mw = 650_500
    ctl = control(nvml, tree, tmp_path / "state")
    stale = found(nvml, tree)
    ctl.apply_cap(stale, 300, None)
    ctl.apply_preset(stale, P.LOW, None, enabled=True)
    writes = len(nvml.calls)
    nvml.gpus.reverse()  # a driver reload numbers the boards the other way round

    cap = ctl.apply_cap(stale, 400, None)
    assert [s.result for s in cap.settings] == [R.ERROR, R.ERROR]
    assert "renumbered" in cap.message
    assert ctl.restore_cap(stale).result is R.ERROR
    assert ctl.restore_preset(stale).result is R.ERROR
    assert ctl.apply_preset(stale, P.PEAK, None, enabled=True).result is R.ERROR
    assert len(nvml.calls) == writes  # nothing written to either board
    assert ctl.needs_rediscovery()

    fresh = found(nvml, tree)
    cap_back, clocks_back = ctl.restore_all(fresh)
    assert (cap_back.result, clocks_back.result) == (R.RESTORED, R.RESTORED)
    assert not ctl.needs_rediscovery()
    # Each board got its own value back, by UUID, at its new index.
    assert limits(nvml) == [650_500, 700_000]
    assert len(ctl.baseline) == 0


def test_a_refused_write_that_took_effect_keeps_its_baseline(
    tree: FakeSysfs, tmp_path: Path
) -> None:
    nvml = normal_node(2)
    nvml.locks_readable = True
    failure = GpuInvalidArgument("GPU 0: Unknown Error", code=999)
    nvml.fail_after["set_power_limit_mw", 0] = failure
    nvml.fail_after["set_locked_gpu_clocks", 0] = failure
    ctl = control(nvml, tree, tmp_path / "state")
    gpus = found(nvml, tree)

    assert [s.result for s in ctl.apply_cap(gpus, 300, None).settings] == [R.ERROR, R.APPLIED]
    assert [s.result for s in ctl.apply_preset(gpus, P.LOW, None, enabled=True).settings] == [
        R.ERROR,
        R.APPLIED,
    ]
    assert limits(nvml) == [300_000, 300_000]  # the refused write changed the limit after all
    assert ctl.baseline.get(key(nvml, 0, "power-limit-mw")) == 700_000
    assert ctl.baseline.get(key(nvml, 0, "locked-clocks-mhz")) == "unlocked"

    nvml.fail_after.clear()
    cap, clocks = ctl.restore_all(gpus)
    assert (cap.result, clocks.result) == (R.RESTORED, R.RESTORED)
    assert limits(nvml) == [700_000, 700_000]
    assert [g.locked_clocks for g in nvml.gpus] == [None, None]


def test_a_refused_write_that_changed_nothing_leaves_no_baseline(
    tree: FakeSysfs, tmp_path: Path
) -> None:
    nvml = normal_node(1)
    nvml.fail["set_power_limit_mw", 0] = GpuInvalidArgument("Invalid Argument", code=2)
    ctl = control(nvml, tree, tmp_path / "state")
    assert ctl.apply_cap(found(nvml, tree), 300, None).result is R.ERROR
    assert len(ctl.baseline) == 0


def test_a_driver_that_rounds_the_limit_is_neither_drift_nor_contended(
    tree: FakeSysfs, tmp_path: Path
) -> None:
    nvml = normal_node(1)
    nvml.gpus[0].limit_step_mw = 1000  # keeps whole watts
    ctl = control(nvml, tree, tmp_path / "state")
    gpus = found(nvml, tree)
    assert ctl.apply_cap(gpus, 300.5, None).result is R.APPLIED
    assert limits(nvml) == [300_000]
    for _ in range(2):
        assert ctl.apply_cap(gpus, 300.5, None).result is R.EQUIVALENT
    assert len(nvml.set_calls()) == 1
    # Another writer beyond the tolerance is still contention.
    nvml.gpus[0].limit_mw = 450_000
    assert ctl.apply_cap(gpus, 300.5, None).result is R.CONTENDED


def test_an_unreadable_lock_reports_the_same_text_at_every_pass(
    tree: FakeSysfs, tmp_path: Path
) -> None:
    nvml = normal_node(2)
    ctl = control(nvml, tree, tmp_path / "state")
    gpus = found(nvml, tree)
    first = ctl.apply_preset(gpus, P.LOW, None, enabled=True)
    later = [ctl.apply_preset(gpus, P.LOW, None, enabled=True) for _ in range(2)]
    assert [(o.result, o.message) for o in later] == [(first.result, first.message)] * 2
    assert len(nvml.set_calls("set_locked_gpu_clocks")) == 2


def test_a_baseline_whose_board_is_gone_is_a_stable_error_that_asks_for_no_rediscovery(
    tree: FakeSysfs, tmp_path: Path
) -> None:
    nvml = normal_node(2)
    ctl = control(nvml, tree, tmp_path / "state")
    ctl.apply_cap(found(nvml, tree), 300, None)
    ctl.apply_preset(found(nvml, tree), P.LOW, None, enabled=True)
    gone = nvml.gpus.pop()
    gpus = found(nvml, tree)

    with capture_logs() as logs:
        passes = [ctl.restore_all(gpus) for _ in range(3)]
    assert [(c.result, g.result) for c, g in passes] == [(R.ERROR, R.ERROR)] * 3
    assert len({(c.message, g.message) for c, g in passes}) == 1
    assert gone.uuid in passes[0][0].message
    assert passes[1] == passes[2]
    orphaned = [e for e in logs if e["event"] == "gpu.baseline_orphaned"]
    assert len(orphaned) == 2  # the limit and the lock, once each
    assert not ctl.needs_rediscovery()


def test_a_board_lost_during_a_pass_asks_for_rediscovery_until_a_fresh_one_is_used(
    tree: FakeSysfs, tmp_path: Path
) -> None:
    nvml = normal_node(2)
    ctl = control(nvml, tree, tmp_path / "state")
    gpus = found(nvml, tree)
    assert ctl.apply_cap(gpus, 300, None).result is R.APPLIED
    assert not ctl.needs_rediscovery()
    nvml.lose(1)
    assert ctl.apply_cap(gpus, 350, None).result is R.ERROR
    assert ctl.needs_rediscovery()
    ctl.apply_preset(gpus, P.LOW, None, enabled=True)
    assert ctl.needs_rediscovery()

    # Discovery now knows the board is lost: still an error, but nothing more to look for.
    fresh = found(nvml, tree)
    assert ctl.apply_cap(fresh, 350, None).result is R.ERROR
    assert not ctl.needs_rediscovery()


def test_restore_with_drops_only_the_entries_that_are_back(tree: FakeSysfs, tmp_path: Path) -> None:
    baseline = Baseline.load(tmp_path / "state", tree)
    for name, value in (("a", 1), ("b", 2), ("c", 3), ("d", 4)):
        baseline.record(name, value)

    def attempt(key: str, value: BaselineValue) -> str:
        if key == "c":
            raise RuntimeError("a bug in one attempt")
        return "back" if key in ("a", "d") else "refused"

    outcomes = baseline.restore_with(["d", "c", "b", "a", "zz", "d"], attempt, "back".__eq__)
    assert outcomes == {"d": "back", "b": "refused", "a": "back"}
    assert baseline.entries() == {"b": 2, "c": 3}
    assert Baseline.load(tmp_path / "state", tree).entries() == {"b": 2, "c": 3}  # stored
