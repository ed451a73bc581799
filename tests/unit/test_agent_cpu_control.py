"""CPU caps and governor presets on fake sysfs trees: clamped before the write, read back after,
refusals told apart, and every file back at its baseline after a restore."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from joulie.agent.baseline import BOOT_ID_PATH, Baseline
from joulie.agent.cpu_control import ComponentOutcome, CpuControl
from joulie.agent.cpu_discovery import CpuDiscovery, discover_cpu, probe_cpu_locks
from joulie.api.enums import Boost, ControlResult, CpuGovernorPreset
from tests.support.fake_sysfs import FakeSysfs
from tests.support.sysfs_trees import amd_epyc_9654, intel_bios_locked, intel_xeon_8260

R = ControlResult
P = CpuGovernorPreset
RAPL = "/sys/class/powercap"
LIMIT0 = f"{RAPL}/intel-rapl:0/constraint_0_power_limit_uw"
LIMIT1 = f"{RAPL}/intel-rapl:1/constraint_0_power_limit_uw"
ENABLED0 = f"{RAPL}/intel-rapl:0/enabled"
WINDOW0 = f"{RAPL}/intel-rapl:0/constraint_0_time_window_us"
POLICY = "/sys/devices/system/cpu/cpufreq/policy{}"
NO_TURBO = "/sys/devices/system/cpu/intel_pstate/no_turbo"


class KernelQuirks(FakeSysfs):
    """A fake tree whose kernel may store something other than what was written (a clamped
    limit), as a real one does when firmware or another limit interferes."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.stores: dict[str, str] = {}

    def _write(self, target: Path, value: str) -> None:
        path = "/" + str(target.relative_to(self.root))
        super()._write(target, value)
        if path in self.stores:
            target.write_text(self.stores[path] + "\n")


def build(root: Path, *, locked: bool = False) -> FakeSysfs:
    tree = intel_bios_locked(root) if locked else intel_xeon_8260(root)
    tree.put(BOOT_ID_PATH, "0f0f0f0f-1111-2222-3333-444444444444")
    # The operator runs the packages below their 165 W maximum.
    tree.put(LIMIT0, 100_000_000)
    tree.put(LIMIT1, 100_000_000)
    return tree


def epp_busy_under_performance(tree: FakeSysfs, n: int) -> None:
    """The kernel's rule: no EPP write while the policy runs the performance governor."""
    governor = f"{POLICY.format(n)}/scaling_governor"

    def busy(_value: str) -> bool:
        return tree.read(governor) == "performance"

    tree.refuse_when(f"{POLICY.format(n)}/energy_performance_preference", busy, errno.EBUSY)


def snapshot(tree: FakeSysfs) -> dict[str, str]:
    """Every regular file of the tree (links not followed) and its contents."""
    return {
        "/" + str(p.relative_to(tree.root)): p.read_text().strip()
        for p in sorted(tree.root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


@pytest.fixture
def tree(tmp_path: Path) -> FakeSysfs:
    return build(tmp_path / "root")


def control(
    tree: FakeSysfs, state: Path, *, dry_run: bool = False
) -> tuple[CpuControl, CpuDiscovery]:
    found = probe_cpu_locks(tree, discover_cpu(tree))
    return CpuControl(tree, Baseline.load(state, tree), dry_run=dry_run), found


def cap(
    ctl: CpuControl, found: CpuDiscovery, watts: float | None, pct: float | None = None
) -> ComponentOutcome:
    return ctl.apply_package_cap(found.powercap.zones, watts, pct, hsmp=found.powercap.hsmp)


def preset(
    ctl: CpuControl, found: CpuDiscovery, p: P | None, boost: Boost | None = None
) -> ComponentOutcome:
    return ctl.apply_preset(found.governor, [x.path for x in found.policies], p, boost)


# -- package cap ----------------------------------------------------------------------------------


def test_a_cap_above_the_maximum_is_written_at_the_maximum(tree: FakeSysfs, tmp_path: Path) -> None:
    ctl, found = control(tree, tmp_path / "state")
    tree.writes.clear()
    outcome = cap(ctl, found, 400.0)
    assert outcome.result is R.APPLIED
    assert tree.read_int(LIMIT0) == tree.read_int(LIMIT1) == 165_000_000
    written = dict(tree.writes)
    # Only the two package long-term limits: no dram, psys, mmio copy, short_term or window.
    assert sorted(written) == [LIMIT0, LIMIT1]
    assert ctl.baseline.entries() == {LIMIT0: "100000000", LIMIT1: "100000000"}


def test_the_percentage_is_of_each_packages_maximum(tree: FakeSysfs, tmp_path: Path) -> None:
    ctl, found = control(tree, tmp_path / "state")
    assert cap(ctl, found, None, 50).result is R.APPLIED
    assert tree.read_int(LIMIT0) == tree.read_int(LIMIT1) == 82_500_000
    # 60 % is 99 W, within the register's precision of the 100 W in force: nothing to write.
    assert cap(ctl, found, None, 60.6).result is R.APPLIED
    tree.writes.clear()
    assert cap(ctl, found, None, 60).result is R.EQUIVALENT
    assert tree.writes == []


def test_the_same_cap_again_is_equivalent_and_writes_nothing(
    tree: FakeSysfs, tmp_path: Path
) -> None:
    ctl, found = control(tree, tmp_path / "state")
    cap(ctl, found, 120.0)
    tree.writes.clear()
    assert cap(ctl, found, 120.0).result is R.EQUIVALENT
    assert tree.writes == []


def test_a_disabled_zone_is_enabled_after_its_limit(tree: FakeSysfs, tmp_path: Path) -> None:
    tree.put(ENABLED0, 0)
    ctl, found = control(tree, tmp_path / "state")
    tree.writes.clear()
    assert cap(ctl, found, 120.0).result is R.APPLIED
    assert [p for p, _ in tree.writes] == [LIMIT0, ENABLED0, LIMIT1]
    assert tree.read(ENABLED0) == "1"
    assert ctl.baseline.get(ENABLED0) == "0"


def test_a_limit_that_reads_back_otherwise_is_drift(tmp_path: Path) -> None:
    tree = KernelQuirks(tmp_path / "root")
    built = build(tmp_path / "root")  # same root: the quirky tree sees the same files
    assert built.root == tree.root
    tree.stores[LIMIT1] = "90000000"  # firmware holds package-1 at 90 W
    ctl, found = control(tree, tmp_path / "state")
    outcome = cap(ctl, found, 120.0)
    assert outcome.result is R.DRIFT
    by_key = {s.key: s for s in outcome.settings}
    assert by_key[LIMIT0].result is R.APPLIED
    assert by_key[LIMIT1].result is R.DRIFT
    assert by_key[LIMIT1].read_back == "90000000"
    assert "wrote 120000000, reads 90000000" in outcome.message
    # The next pass sees the value the write left: the same drift, not another writer, and no
    # write until the agent re-asserts.
    tree.writes.clear()
    again = cap(ctl, found, 120.0)
    assert {s.key: s.result for s in again.settings}[LIMIT1] is R.DRIFT
    assert tree.writes == []


def test_no_cap_below_a_tenth_of_a_zone_without_a_minimum(tree: FakeSysfs, tmp_path: Path) -> None:
    ctl, found = control(tree, tmp_path / "state")
    assert cap(ctl, found, None, 1).result is R.APPLIED  # 1 % of 165 W would be 1.65 W
    assert tree.read_int(LIMIT0) == tree.read_int(LIMIT1) == 16_500_000


def test_boost_goes_back_when_the_spec_stops_setting_it(tree: FakeSysfs, tmp_path: Path) -> None:
    ctl, found = control(tree, tmp_path / "state")
    before = tree.read(NO_TURBO)
    assert preset(ctl, found, P.EFFICIENCY, Boost.OFF).result is R.APPLIED
    assert tree.read(NO_TURBO) == "1"
    # Same preset, boost left to the node: the agent's setting goes, the preset stays.
    outcome = preset(ctl, found, P.EFFICIENCY, None)
    assert {s.key: s.result for s in outcome.settings}[NO_TURBO] is R.RESTORED
    assert tree.read(NO_TURBO) == before
    assert NO_TURBO not in ctl.baseline


def test_within_the_power_unit_is_applied_not_drift(tmp_path: Path) -> None:
    tree = KernelQuirks(tmp_path / "root")
    build(tmp_path / "root")
    tree.stores[LIMIT0] = "119875000"  # 1/8 W units
    ctl, found = control(tree, tmp_path / "state")
    assert cap(ctl, found, 120.0).result is R.APPLIED


def test_a_bios_locked_package_is_refused_and_nothing_is_recorded(tmp_path: Path) -> None:
    tree = build(tmp_path / "root", locked=True)
    ctl, found = control(tree, tmp_path / "state")
    outcome = cap(ctl, found, 120.0)
    assert outcome.result is R.REFUSED
    assert "locked" in outcome.message
    assert tree.read_int(LIMIT0) == 100_000_000
    assert len(ctl.baseline) == 0


def test_a_refused_write_leaves_no_baseline_to_restore(tree: FakeSysfs, tmp_path: Path) -> None:
    # Not found locked by discovery (no probe), refused at the write itself.
    found = discover_cpu(tree)
    ctl = CpuControl(tree, Baseline.load(tmp_path / "state", tree))
    tree.refuse(LIMIT1, errno.EACCES)
    outcome = cap(ctl, found, 120.0)
    assert outcome.result is R.REFUSED
    assert ctl.baseline.entries() == {LIMIT0: "100000000"}


def test_a_zone_stating_a_tiny_minimum_still_gets_the_floor(
    tree: FakeSysfs, tmp_path: Path
) -> None:
    # A minimum of 1 uW took the place of the floor: 1 % of the maximum was written as 100 uW.
    for zone in (0, 1):
        tree.put(f"{RAPL}/intel-rapl:{zone}/constraint_0_min_power_uw", 1)
    ctl, found = control(tree, tmp_path / "state")
    assert cap(ctl, found, None, 1).result is R.APPLIED
    assert tree.read_int(LIMIT0) == tree.read_int(LIMIT1) == 16_500_000


def test_a_zone_stating_an_absurd_maximum_is_not_written(tree: FakeSysfs, tmp_path: Path) -> None:
    # A broken zone reading 2^64-1 as its maximum had 9223372036854775808 uW written.
    for zone in (0, 1):
        tree.put(f"{RAPL}/intel-rapl:{zone}/constraint_0_max_power_uw", 2**64 - 1)
    ctl, found = control(tree, tmp_path / "state")
    tree.writes.clear()
    outcome = cap(ctl, found, 400.0)
    assert outcome.result is R.NOT_APPLIED
    assert tree.writes == []
    assert "no believable maximum" in outcome.settings[0].detail


def test_a_zone_without_a_maximum_is_not_written(tree: FakeSysfs, tmp_path: Path) -> None:
    for zone in (0, 1):
        tree.put(f"{RAPL}/intel-rapl:{zone}/constraint_0_max_power_uw", 0)
    ctl, found = control(tree, tmp_path / "state")
    tree.writes.clear()
    assert cap(ctl, found, 120.0).result is R.NOT_APPLIED
    assert tree.writes == []


def test_a_dry_run_writes_nothing(tree: FakeSysfs, tmp_path: Path) -> None:
    ctl, found = control(tree, tmp_path / "state", dry_run=True)
    tree.writes.clear()
    assert cap(ctl, found, 120.0).result is R.NOT_APPLIED
    assert preset(ctl, found, P.EFFICIENCY).result is R.NOT_APPLIED
    assert tree.writes == []
    assert len(ctl.baseline) == 0


def test_another_writer_since_our_write_is_contended(tree: FakeSysfs, tmp_path: Path) -> None:
    ctl, found = control(tree, tmp_path / "state")
    cap(ctl, found, 120.0)
    tree.put(LIMIT0, 80_000_000)  # thermald, a BMC, an operator...
    tree.writes.clear()
    outcome = cap(ctl, found, 120.0)
    assert outcome.result is R.CONTENDED
    assert tree.writes == []
    # A new target is applied, and the baseline is still the value from before the agent.
    assert cap(ctl, found, 110.0).result is R.APPLIED
    assert ctl.baseline.get(LIMIT0) == "100000000"


def test_no_cap_restores_the_baseline(tree: FakeSysfs, tmp_path: Path) -> None:
    ctl, found = control(tree, tmp_path / "state")
    cap(ctl, found, 120.0)
    outcome = cap(ctl, found, None)
    assert outcome.result is R.RESTORED
    assert tree.read_int(LIMIT0) == tree.read_int(LIMIT1) == 100_000_000
    assert len(ctl.baseline) == 0
    assert cap(ctl, found, None).result is None  # nothing asked, nothing to put back


def test_the_time_window_is_left_alone(tree: FakeSysfs, tmp_path: Path) -> None:
    ctl, found = control(tree, tmp_path / "state")
    before = tree.read(WINDOW0)
    cap(ctl, found, 120.0)
    assert tree.read(WINDOW0) == before
    assert all(not p.endswith("time_window_us") for p, _ in tree.writes)


def test_amd_caps_through_hsmp_clamped_to_its_maximum(tmp_path: Path) -> None:
    tree = amd_epyc_9654(tmp_path / "root")
    tree.put(BOOT_ID_PATH, "0f0f0f0f-1111-2222-3333-444444444444")
    hsmp_cap = "/sys/class/hwmon/hwmon3/power1_cap"
    ctl, found = control(tree, tmp_path / "state")
    assert cap(ctl, found, 500.0).result is R.APPLIED
    assert tree.read_int(hsmp_cap) == 400_000_000
    assert cap(ctl, found, 250.0).result is R.APPLIED
    assert tree.read_int(hsmp_cap) == 250_000_000
    assert ctl.restore_package_cap().result is R.RESTORED
    assert tree.read_int(hsmp_cap) == 360_000_000


def test_no_cap_interface_is_unsupported(tmp_path: Path) -> None:
    tree = amd_epyc_9654(tmp_path / "root", hsmp=False)
    ctl, found = control(tree, tmp_path / "state")
    tree.writes.clear()
    assert cap(ctl, found, 200.0).result is R.UNSUPPORTED
    assert tree.writes == []


# -- governor presets ---------------------------------------------------------------------------


def test_efficiency_writes_governor_then_epp_per_policy(tree: FakeSysfs, tmp_path: Path) -> None:
    tree.put(NO_TURBO, 0)
    for n in range(8):
        tree.put(f"{POLICY.format(n)}/scaling_governor", "performance")
    ctl, found = control(tree, tmp_path / "state")
    tree.writes.clear()
    outcome = preset(ctl, found, P.EFFICIENCY, Boost.OFF)
    assert outcome.result is R.APPLIED
    paths = [p for p, _ in tree.writes]
    assert paths[0] == NO_TURBO  # boost first
    governors = [i for i, p in enumerate(paths) if p.endswith("scaling_governor")]
    epps = [i for i, p in enumerate(paths) if p.endswith("energy_performance_preference")]
    assert len(governors) == len(epps) == 8
    assert max(governors) < min(epps)
    assert tree.read(f"{POLICY.format(3)}/energy_performance_preference") == "balance_power"
    assert tree.read(NO_TURBO) == "1"


def test_performance_writes_no_epp(tree: FakeSysfs, tmp_path: Path) -> None:
    ctl, found = control(tree, tmp_path / "state")
    tree.writes.clear()
    assert preset(ctl, found, P.PERFORMANCE).result is R.APPLIED
    assert all(not p.endswith("energy_performance_preference") for p, _ in tree.writes)
    assert tree.read(f"{POLICY.format(0)}/scaling_governor") == "performance"


def test_epp_is_written_only_after_the_governor_left_performance(
    tree: FakeSysfs, tmp_path: Path
) -> None:
    # The kernel refuses any EPP while the policy runs the performance governor (EBUSY).
    for n in range(8):
        tree.put(f"{POLICY.format(n)}/scaling_governor", "performance")
        epp_busy_under_performance(tree, n)
    ctl, found = control(tree, tmp_path / "state")
    assert preset(ctl, found, P.BALANCED).result is R.APPLIED
    # A governor write the kernel refuses: the EPP of that policy is not attempted.
    ctl.restore_governor()
    tree.refuse(f"{POLICY.format(2)}/scaling_governor", errno.EINVAL)
    tree.writes.clear()
    outcome = preset(ctl, found, P.EFFICIENCY)
    assert outcome.result is R.ERROR
    by_key = {s.key: s for s in outcome.settings}
    epp2 = f"{POLICY.format(2)}/energy_performance_preference"
    assert by_key[f"{POLICY.format(2)}/scaling_governor"].result is R.ERROR
    assert by_key[epp2].result is R.NOT_APPLIED
    assert epp2 not in [p for p, _ in tree.writes]
    assert by_key[f"{POLICY.format(1)}/energy_performance_preference"].result is R.APPLIED


def test_a_governor_the_node_does_not_offer_is_unsupported(tmp_path: Path) -> None:
    tree = build(tmp_path / "root")
    for n in range(8):
        tree.put(f"{POLICY.format(n)}/scaling_available_governors", "powersave")
    ctl, found = control(tree, tmp_path / "state")
    tree.writes.clear()
    assert preset(ctl, found, P.PERFORMANCE).result is R.UNSUPPORTED
    assert tree.writes == []


def test_a_governor_the_kernel_rejects_is_an_error(tree: FakeSysfs, tmp_path: Path) -> None:
    for n in range(8):
        tree.refuse(f"{POLICY.format(n)}/scaling_governor", errno.EINVAL)
    ctl, found = control(tree, tmp_path / "state")
    outcome = preset(ctl, found, P.PERFORMANCE)
    assert outcome.result is R.ERROR
    assert "Invalid argument" in outcome.message
    assert len(ctl.baseline) == 0


def test_governor_writes_off_restores_and_reports_disabled(tree: FakeSysfs, tmp_path: Path) -> None:
    ctl, found = control(tree, tmp_path / "state")
    nodes = [x.path for x in found.policies]
    assert preset(ctl, found, P.PERFORMANCE).result is R.APPLIED
    off = ctl.apply_preset(found.governor, nodes, P.PERFORMANCE, enabled=False)
    assert off.result is R.RESTORED
    assert tree.read(f"{POLICY.format(0)}/scaling_governor") == "powersave"
    again = ctl.apply_preset(found.governor, nodes, P.PERFORMANCE, enabled=False)
    assert again.result is R.DISABLED


# -- restore --------------------------------------------------------------------------------------


def test_restore_puts_every_file_back_at_its_baseline(tree: FakeSysfs, tmp_path: Path) -> None:
    tree.put(ENABLED0, 0)
    before = snapshot(tree)
    ctl, found = control(tree, tmp_path / "state")
    cap(ctl, found, 90.0)
    preset(ctl, found, P.EFFICIENCY, Boost.OFF)
    preset(ctl, found, P.PERFORMANCE, Boost.ON)  # the baseline stays the pre-agent one
    assert snapshot(tree) != before

    cap_outcome, gov_outcome = ctl.restore_all()
    assert cap_outcome.result is R.RESTORED
    assert gov_outcome.result is R.RESTORED
    assert snapshot(tree) == before
    assert len(ctl.baseline) == 0
    assert not ctl.baseline.path.exists()


def test_restore_order_boost_governor_epp_and_caps_first(tree: FakeSysfs, tmp_path: Path) -> None:
    for n in range(8):
        epp_busy_under_performance(tree, n)
    ctl, found = control(tree, tmp_path / "state")
    cap(ctl, found, 90.0)
    preset(ctl, found, P.EFFICIENCY, Boost.OFF)  # EPP balance_power under powersave
    preset(ctl, found, P.PERFORMANCE, Boost.OFF)  # then the performance governor
    tree.writes.clear()
    cap_outcome, gov_outcome = ctl.restore_all()
    assert cap_outcome.result is gov_outcome.result is R.RESTORED
    paths = [p for p, _ in tree.writes]
    assert paths[:2] == [LIMIT0, LIMIT1]
    assert paths[2] == NO_TURBO
    governor_at = paths.index(f"{POLICY.format(0)}/scaling_governor")
    epp_at = paths.index(f"{POLICY.format(0)}/energy_performance_preference")
    assert governor_at < epp_at


def test_restore_back_to_performance_writes_the_epp_while_it_is_accepted(
    tree: FakeSysfs, tmp_path: Path
) -> None:
    for n in range(8):
        tree.put(f"{POLICY.format(n)}/scaling_governor", "performance")
        tree.put(f"{POLICY.format(n)}/energy_performance_preference", "performance")
        epp_busy_under_performance(tree, n)
    before = snapshot(tree)
    ctl, found = control(tree, tmp_path / "state")
    assert preset(ctl, found, P.EFFICIENCY).result is R.APPLIED
    assert ctl.restore_governor().result is R.RESTORED
    assert snapshot(tree) == before


def test_a_restart_in_the_same_boot_restores_the_real_baseline(
    tree: FakeSysfs, tmp_path: Path
) -> None:
    before = snapshot(tree)
    ctl, found = control(tree, tmp_path / "state")
    cap(ctl, found, 90.0)
    preset(ctl, found, P.EFFICIENCY, Boost.OFF)

    # A new process on the same boot applies the same spec, then is told to stop.
    again, found = control(tree, tmp_path / "state")
    assert cap(again, found, 90.0).result is R.EQUIVALENT
    assert preset(again, found, P.EFFICIENCY, Boost.OFF).result is R.EQUIVALENT
    assert again.baseline.get(LIMIT0) == "100000000"
    again.restore_all()
    assert snapshot(tree) == before


def test_a_restore_the_kernel_refuses_keeps_its_entry(tree: FakeSysfs, tmp_path: Path) -> None:
    ctl, found = control(tree, tmp_path / "state")
    cap(ctl, found, 90.0)
    tree.refuse(LIMIT1, errno.EACCES)
    outcome = ctl.restore_package_cap()
    assert outcome.result is R.REFUSED
    assert tree.read_int(LIMIT0) == 100_000_000
    assert ctl.baseline.entries() == {LIMIT1: "100000000"}


def test_a_limit_gone_when_it_is_put_back_is_an_error_and_its_baseline_kept(
    tree: FakeSysfs, tmp_path: Path
) -> None:
    ctl, found = control(tree, tmp_path / "state")
    assert cap(ctl, found, 120.0).result is R.APPLIED
    tree.path(LIMIT0).unlink()  # the driver let go of the zone
    restored = ctl.restore_package_cap()
    assert {s.key: s.result for s in restored.settings}[LIMIT0] is R.ERROR
    assert restored.result is R.ERROR
    assert LIMIT0 in ctl.baseline.entries()  # put back once the zone is there again
