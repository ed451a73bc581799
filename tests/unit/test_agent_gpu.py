"""GPU discovery and power-limit control against a fake NVML and fake DRM/hwmon trees: what
the agent reports for each kind of node, and what it writes (in the driver's unit, clamped to
the board's range, read back) and says about it, board by board."""

from __future__ import annotations

import errno
import sys
import types
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from joulie.agent.baseline import Baseline
from joulie.agent.gpu.backends import GpuBackends
from joulie.agent.gpu.control import GpuControl
from joulie.agent.gpu.device import GpuBackendKind, GpuDiscovery, MonitorOnly
from joulie.agent.gpu.discovery import discover_gpus, gpu_hardware_status
from joulie.agent.gpu.errors import (
    GpuError,
    GpuInvalidArgument,
    GpuLost,
    GpuNoPermission,
    GpuNotSupported,
    GpuUnavailable,
)
from joulie.agent.gpu.nvml import NvmlAdapter, PynvmlAdapter
from joulie.agent.outcomes import SettingOutcome
from joulie.agent.sysfs import Sysfs
from joulie.api.enums import ControlResult
from joulie.hardware.catalog import Catalog
from tests.support.fake_nvml import (
    FakeNvml,
    limits_not_supported_node,
    no_permission_node,
    normal_node,
    unavailable_nvml,
)
from tests.support.fake_sysfs import FakeSysfs
from tests.support.sysfs_trees import amd_board, drm_card, mi300x_node, pci_device

CATALOG = Catalog.load()
R = ControlResult


@pytest.fixture
def tree(tmp_path: Path) -> FakeSysfs:
    """An empty node: no DRM cards, no PCI devices."""
    return FakeSysfs(tmp_path)


def discovered(nvml: NvmlAdapter | None, tree: Sysfs, **kwargs: Any) -> GpuDiscovery:
    return discover_gpus(GpuBackends.of(tree, nvml), **kwargs)


def control(nvml: NvmlAdapter | None, tree: FakeSysfs) -> GpuControl:
    return GpuControl(GpuBackends.of(tree, nvml), Baseline(tree.root / "agent-state", "boot"))


def capped(
    found: GpuDiscovery,
    nvml: NvmlAdapter | None,
    tree: FakeSysfs,
    watts: float | None = None,
    pct: float | None = None,
    *,
    ctl: GpuControl | None = None,
) -> tuple[SettingOutcome, ...]:
    """What capping every board through the agent's control (baseline kept) did, per board."""
    return (ctl or control(nvml, tree)).apply_cap(found, watts, pct).settings


def outcomes(results: tuple[SettingOutcome, ...]) -> list[ControlResult]:
    return [r.result for r in results]


# --- NVIDIA discovery --------------------------------------------------------------------------


def test_four_h100_boards_are_reported_with_their_range_in_watts(tree: FakeSysfs) -> None:
    found = discovered(normal_node(4), tree)
    assert (found.vendor, found.count, found.raw_model) == ("nvidia", 4, "NVIDIA H100 80GB HBM3")
    assert (found.min_watts, found.max_watts, found.default_watts) == (200.0, 700.0, 700.0)
    assert found.current_cap_watts == 700.0
    assert found.control_available
    assert found.telemetry_available
    assert found.warnings == ()
    board = found.devices[1]
    assert board.backend is GpuBackendKind.NVML
    assert board.uuid is not None
    assert board.uuid.startswith("GPU-")
    assert (board.graphics_clock_min_mhz, board.graphics_clock_max_mhz) == (345, 1980)

    status = gpu_hardware_status(found, CATALOG)
    assert status.present
    assert status.model == "NVIDIA_H100_SXM"
    assert status.count == 4
    assert status.cap_range_per_gpu is not None
    assert (status.cap_range_per_gpu.min_watts, status.cap_range_per_gpu.max_watts) == (200, 700)
    assert status.current_cap_watts == 700
    assert status.control_available
    assert status.telemetry_available
    assert status.warnings is None


def test_a100_range_comes_from_the_board_not_the_model(tree: FakeSysfs) -> None:
    found = discovered(normal_node(8, board="a100"), tree)
    assert (found.count, found.min_watts, found.max_watts) == (8, 100.0, 400.0)
    assert gpu_hardware_status(found, CATALOG).model == "NVIDIA_A100_SXM"


def test_limits_not_supported_make_the_node_monitor_only(tree: FakeSysfs) -> None:
    found = discovered(limits_not_supported_node(2), tree)
    assert found.count == 2
    assert not found.control_available
    assert found.telemetry_available  # the draw still reads
    assert all(d.monitor_only is MonitorOnly.NOT_SUPPORTED for d in found.devices)
    assert (found.min_watts, found.max_watts, found.current_cap_watts) == (None, None, None)
    assert any("GPU 0, 1" in w and "monitor-only" in w for w in found.warnings)

    status = gpu_hardware_status(found, CATALOG)
    assert status.present
    assert status.control_available is False
    assert status.cap_range_per_gpu is None
    assert status.model is None
    assert status.raw_model == "NVIDIA GeForce RTX 3090"
    assert status.warnings


def test_a_lost_board_is_reported_and_the_others_stay_usable(tree: FakeSysfs) -> None:
    nvml = normal_node(4)
    nvml.lose(2)
    found = discovered(nvml, tree)
    assert found.count == 4
    assert found.devices[2].monitor_only is MonitorOnly.LOST
    assert [d.control for d in found.devices] == [True, True, False, True]
    assert not found.control_available
    assert found.raw_model == "NVIDIA H100 80GB HBM3"
    assert any("GPU 2" in w and "lost" in w for w in found.warnings)


def test_nvidia_boards_without_nvml_are_counted_from_the_pci_bus(tree: FakeSysfs) -> None:
    for n in range(2):
        pci_device(tree, f"0000:1{n}:00.0", "0x10de", "0x2330", "0x030200")
        pci_device(tree, f"0000:1{n}:00.1", "0x10de", "0x22e8", "0x040300")  # its audio
    pci_device(tree, "0000:20:00.0", "0x10de", "0x22a3", "0x068000")  # an NVSwitch

    for nvml in (unavailable_nvml(), None):
        found = discovered(nvml, tree)
        assert (found.vendor, found.count) == ("nvidia", 2)
        assert not found.control_available
        assert not found.telemetry_available
        assert all(d.monitor_only is MonitorOnly.UNAVAILABLE for d in found.devices)
        assert any("NVML is not usable" in w for w in found.warnings)
        status = gpu_hardware_status(found, CATALOG)
        assert status.present
        assert status.count == 2
        assert status.model is None


def test_a_node_without_gpus_says_so(tree: FakeSysfs) -> None:
    for nvml in (unavailable_nvml(), None, FakeNvml(gpus=[])):
        found = discovered(nvml, tree)
        assert not found.present
        assert found.count == 0
        assert found.vendor is None
        status = gpu_hardware_status(found, CATALOG)
        assert status.present is False
        assert status.count == 0
        assert status.control_available is False
        assert status.telemetry_available is False


# --- NVIDIA control ----------------------------------------------------------------------------


def test_a_cap_is_written_in_milliwatts_and_read_back(tree: FakeSysfs) -> None:
    nvml = normal_node(4)
    results = capped(discovered(nvml, tree), nvml, tree, 312.5)
    assert outcomes(results) == [R.APPLIED] * 4
    assert nvml.set_calls() == [(i, (312_500,)) for i in range(4)]
    assert all(r.read_back == "312500" and r.observed == "700000" for r in results)
    assert [r.key for r in results] == [f"gpu/{g.uuid}/power-limit-mw" for g in nvml.gpus]


@pytest.mark.parametrize(
    ("watts", "pct", "milliwatts"),
    [
        (900, None, 700_000),
        (50, None, 200_000),
        (None, 60, 420_000),
        (None, 10, 200_000),
        (240, 60, 240_000),
    ],
)
def test_requests_are_resolved_then_clamped_to_the_board_range(
    tree: FakeSysfs, watts: float | None, pct: float | None, milliwatts: int
) -> None:
    nvml = normal_node(2)
    for gpu in nvml.gpus:
        gpu.limit_mw = 333_000  # so that every target is a change
    results = capped(discovered(nvml, tree), nvml, tree, watts, pct)
    assert nvml.set_calls() == [(0, (milliwatts,)), (1, (milliwatts,))]
    assert outcomes(results) == [R.APPLIED] * 2
    assert all(r.target == str(milliwatts) for r in results)


def test_a_limit_already_in_force_is_not_written_again(tree: FakeSysfs) -> None:
    nvml = normal_node(2)
    found = discovered(nvml, tree)
    ctl = control(nvml, tree)
    capped(found, nvml, tree, 400, ctl=ctl)
    again = capped(found, nvml, tree, 400, ctl=ctl)
    assert outcomes(again) == [R.EQUIVALENT] * 2
    assert len(nvml.set_calls()) == 2  # the first pass only


def test_an_intent_without_a_usable_cap_writes_nothing(tree: FakeSysfs) -> None:
    nvml = normal_node(1)
    for watts in (None, float("nan"), -5.0, 0.0):
        assert control(nvml, tree).apply_cap(discovered(nvml, tree), watts, None).result is None
    assert nvml.set_calls() == []


def test_read_back_that_differs_is_drift(tree: FakeSysfs) -> None:
    nvml = normal_node(2)
    nvml.gpus[1].held_limit_mw = 500_000  # another limiter puts its own value back
    results = capped(discovered(nvml, tree), nvml, tree, 300)
    assert outcomes(results) == [R.APPLIED, R.DRIFT]
    assert results[1].read_back == "500000"
    assert "wrote 300 W, reads 500 W" in results[1].detail


class _UnreadableOnceSet(FakeNvml):
    """A board whose limit reads until the agent's write and not after it."""

    def set_power_limit_mw(self, index: int, milliwatts: int) -> None:
        super().set_power_limit_mw(index, milliwatts)
        self.gpus[index].limit_readable = False


def test_a_limit_that_cannot_be_read_back_is_applied_unverified(tree: FakeSysfs) -> None:
    nvml = _UnreadableOnceSet(normal_node(1).gpus)
    results = capped(discovered(nvml, tree), nvml, tree, 300)
    assert outcomes(results) == [R.APPLIED_UNVERIFIED]
    assert results[0].read_back is None
    assert nvml.gpus[0].limit_mw == 300_000


def test_a_limit_that_cannot_be_read_is_not_written(tree: FakeSysfs) -> None:
    nvml = normal_node(1)
    found = discovered(nvml, tree)
    nvml.gpus[0].limit_readable = False
    results = capped(found, nvml, tree, 300)
    assert outcomes(results) == [R.NOT_APPLIED]  # it could not be put back
    assert "cannot be read" in results[0].detail
    assert nvml.set_calls() == []


def test_no_permission_is_refused_and_not_retried_once_known(tree: FakeSysfs) -> None:
    nvml = no_permission_node(4)
    found = discovered(nvml, tree)
    assert found.control_available  # discovery does not write, so it cannot know yet
    ctl = control(nvml, tree)
    results = capped(found, nvml, tree, 300, ctl=ctl)
    assert outcomes(results) == [R.REFUSED] * 4
    assert all(g.limit_mw == 700_000 for g in nvml.gpus)
    assert len(nvml.set_calls()) == 4
    assert ctl.baseline.entries() == {}  # nothing changed, nothing to put back

    again = discovered(nvml, tree, refused=ctl.refused())
    assert not again.control_available
    assert all(d.monitor_only is MonitorOnly.NO_PERMISSION for d in again.devices)
    assert any("may not set" in w for w in again.warnings)
    assert outcomes(capped(again, nvml, tree, 300, ctl=ctl)) == [R.REFUSED] * 4
    assert len(nvml.set_calls()) == 4  # nothing new attempted


def test_not_supported_limits_are_unsupported_without_a_write(tree: FakeSysfs) -> None:
    nvml = limits_not_supported_node(2)
    results = capped(discovered(nvml, tree), nvml, tree, 200)
    assert outcomes(results) == [R.UNSUPPORTED] * 2
    assert nvml.calls == []


def test_a_set_the_board_answers_not_supported_is_unsupported(tree: FakeSysfs) -> None:
    nvml = normal_node(2)
    nvml.fail["set_power_limit_mw", 0] = GpuNotSupported("Not Supported", code=3)
    nvml.fail["set_power_limit_mw", 1] = GpuInvalidArgument("Invalid Argument", code=2)
    results = capped(discovered(nvml, tree), nvml, tree, 300)
    assert outcomes(results) == [R.UNSUPPORTED, R.ERROR]


def test_a_board_lost_mid_run_is_an_error_and_the_others_are_still_capped(
    tree: FakeSysfs,
) -> None:
    nvml = normal_node(4)
    found = discovered(nvml, tree)
    assert found.control_available
    nvml.lose(2)
    ctl = control(nvml, tree)
    results = capped(found, nvml, tree, 350, ctl=ctl)
    assert outcomes(results) == [R.APPLIED, R.APPLIED, R.ERROR, R.APPLIED]
    assert "lost" in results[2].detail.lower()
    assert ctl.needs_rediscovery()
    assert [g.limit_mw for g in nvml.gpus] == [350_000, 350_000, 700_000, 350_000]


def test_restoring_per_board_baselines_goes_through_the_same_path(tree: FakeSysfs) -> None:
    nvml = normal_node(4)
    nvml.gpus[2].limit_mw = 650_000
    found = discovered(nvml, tree)
    ctl = control(nvml, tree)
    capped(found, nvml, tree, 250, ctl=ctl)
    restored = ctl.restore_cap(found).settings
    assert [(r.result, r.read_back) for r in restored] == [
        (R.RESTORED, "700000"),
        (R.RESTORED, "700000"),
        (R.RESTORED, "650000"),
        (R.RESTORED, "700000"),
    ]
    assert [g.limit_mw for g in nvml.gpus] == [700_000, 700_000, 650_000, 700_000]
    assert ctl.baseline.entries() == {}


# --- the pynvml adapter ------------------------------------------------------------------------


def test_nvml_without_a_driver_is_unavailable() -> None:
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:  # pragma: no cover - only on a machine with the NVIDIA driver
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver")
    adapter = PynvmlAdapter()
    with pytest.raises(GpuUnavailable):
        adapter.init()
    with pytest.raises(GpuUnavailable):
        adapter.device_count()
    adapter.shutdown()  # harmless when never initialised


def test_nvml_without_the_binding_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    with pytest.raises(GpuUnavailable, match="nvidia-ml-py"):
        PynvmlAdapter().init()


def fake_binding(**functions: Callable[..., Any]) -> Any:
    """The real pynvml's errors and constants, with the device calls replaced."""
    pynvml = pytest.importorskip("pynvml")
    module: Any = types.ModuleType("pynvml_standin")
    module.NVMLError = pynvml.NVMLError
    module.NVML_CLOCK_GRAPHICS = pynvml.NVML_CLOCK_GRAPHICS
    module.NVML_CLOCK_MEM = pynvml.NVML_CLOCK_MEM
    module.nvmlInit = lambda: None
    module.nvmlShutdown = lambda: None
    module.nvmlDeviceGetCount = lambda: 2
    module.nvmlDeviceGetHandleByIndex = lambda i: f"handle{i}"
    for name, function in functions.items():
        setattr(module, name, function)
    return module


def nvml_error(code: int) -> Callable[..., Any]:
    pynvml = pytest.importorskip("pynvml")

    def fail(*_: Any) -> Any:
        raise pynvml.NVMLError(code)

    return fail


def test_the_adapter_maps_nvml_codes_to_our_errors() -> None:
    adapter = PynvmlAdapter(
        fake_binding(
            nvmlDeviceGetPowerManagementLimitConstraints=nvml_error(3),
            nvmlDeviceSetPowerManagementLimit=nvml_error(4),
            nvmlDeviceGetPowerUsage=nvml_error(15),
            nvmlDeviceGetTotalEnergyConsumption=nvml_error(999),
            nvmlDeviceSetGpuLockedClocks=nvml_error(2),
            nvmlDeviceGetUUID=nvml_error(13),
        )
    )
    adapter.init()
    cases: list[tuple[Callable[[], object], type[GpuError]]] = [
        (lambda: adapter.power_limit_constraints_mw(0), GpuNotSupported),
        (lambda: adapter.set_power_limit_mw(1, 300_000), GpuNoPermission),
        (lambda: adapter.power_usage_mw(1), GpuLost),
        (lambda: adapter.set_locked_gpu_clocks(0, 345, 1500), GpuInvalidArgument),
        (lambda: adapter.uuid(0), GpuUnavailable),
    ]
    for call, error in cases:
        with pytest.raises(error) as caught:
            call()
        assert type(caught.value) is error
    with pytest.raises(GpuError) as unknown:
        adapter.total_energy_mj(0)
    assert unknown.value.code == 999
    assert type(unknown.value) is GpuError


def test_the_adapter_uses_the_v1_setter_in_milliwatts_and_normalises_names() -> None:
    seen: list[tuple[str, int]] = []
    clocks = {0: 1755, 2: 2619}
    adapter = PynvmlAdapter(
        fake_binding(
            nvmlDeviceGetName=lambda h: b"NVIDIA H100 80GB HBM3",  # old bindings: bytes
            nvmlDeviceGetUUID=lambda h: "GPU-1234",
            nvmlDeviceGetPowerManagementLimitConstraints=lambda h: [200_000, 700_000],
            nvmlDeviceGetPowerManagementLimit=lambda h: 700_000,
            nvmlDeviceSetPowerManagementLimit=lambda h, mw: seen.append((h, mw)),
            nvmlDeviceSetPowerManagementLimit_v2=nvml_error(999),  # must not be used
            nvmlDeviceGetClockInfo=lambda h, kind: clocks[kind],
        )
    )
    adapter.init()
    assert adapter.device_count() == 2
    assert adapter.name(1) == "NVIDIA H100 80GB HBM3"
    assert adapter.uuid(1) == "GPU-1234"
    assert adapter.power_limit_constraints_mw(0) == (200_000, 700_000)
    adapter.set_power_limit_mw(1, 312_500)
    assert seen == [("handle1", 312_500)]
    assert adapter.clocks_mhz(0).graphics_mhz == 1755
    assert adapter.clocks_mhz(0).memory_mhz == 2619
    adapter.shutdown()
    with pytest.raises(GpuUnavailable):
        adapter.name(0)


# --- AMD and Intel through hwmon ---------------------------------------------------------------


def test_amd_boards_are_found_from_drm_with_ranges_in_watts(tree: FakeSysfs) -> None:
    mi300x_node(tree)
    found = discovered(None, tree)
    assert (found.vendor, found.count, found.raw_model) == ("amd", 2, "AMD Instinct MI300X")
    assert (found.min_watts, found.max_watts, found.current_cap_watts) == (350.0, 750.0, 750.0)
    assert found.control_available
    assert found.telemetry_available
    assert [d.uuid for d in found.devices] == ["0000:c1:00.0", "0000:c2:00.0"]
    assert all(d.backend is GpuBackendKind.HWMON for d in found.devices)
    status = gpu_hardware_status(found, CATALOG)
    assert (status.vendor, status.model, status.count) == ("amd", "AMD_INSTINCT_MI300X", 2)


def test_amd_caps_are_written_in_whole_watts_as_microwatts(tree: FakeSysfs) -> None:
    hwmons = mi300x_node(tree)
    found = discovered(None, tree)
    results = capped(found, None, tree, 500.4)
    assert outcomes(results) == [R.APPLIED] * 2
    assert tree.writes == [(f"{h}/power1_cap", "500000000") for h in hwmons]
    assert [r.read_back for r in results] == ["500000000"] * 2

    tree.writes.clear()
    above = capped(found, None, tree, 1000)
    assert outcomes(above) == [R.APPLIED] * 2
    assert tree.writes == [(f"{h}/power1_cap", "750000000") for h in hwmons]
    assert tree.read_int(f"{hwmons[0]}/power1_cap") == 750_000_000


def test_amd_refusals_are_told_apart(tree: FakeSysfs) -> None:
    hwmons = mi300x_node(tree)
    found = discovered(None, tree)
    tree.refuse(f"{hwmons[0]}/power1_cap", errno.EACCES)
    tree.refuse(f"{hwmons[1]}/power1_cap", errno.EINVAL)
    results = capped(found, None, tree, 400)
    assert outcomes(results) == [R.REFUSED, R.ERROR]
    assert tree.read_int(f"{hwmons[0]}/power1_cap") == 750_000_000


def test_an_amd_board_whose_files_vanish_is_an_error(tree: FakeSysfs) -> None:
    hwmons = mi300x_node(tree)
    found = discovered(None, tree)
    tree.path(f"{hwmons[1]}/power1_cap").unlink()  # the driver let go of it
    results = capped(found, None, tree, 400)
    assert outcomes(results) == [R.APPLIED, R.ERROR]


def test_amd_boards_without_cap_files_are_monitor_only(tree: FakeSysfs) -> None:
    amd_board(tree, "card1", "0000:c1:00.0", cap_uw=None, power_file="power1_average")
    amd_board(tree, "card2", "0000:c2:00.0", device_id="0x7448", cap_max_uw=0)
    found = discovered(None, tree)
    assert [d.monitor_only for d in found.devices] == [
        MonitorOnly.NOT_SUPPORTED,
        MonitorOnly.NO_RANGE,
    ]
    assert not found.control_available
    assert found.telemetry_available
    assert any("no power1_cap" in w for w in found.warnings)
    assert any("power1_cap_max" in w for w in found.warnings)
    results = capped(found, None, tree, 200)
    assert outcomes(results) == [R.UNSUPPORTED] * 2
    assert tree.writes == []


def test_intel_discrete_gpus_are_monitor_only_and_integrated_ones_ignored(
    tree: FakeSysfs,
) -> None:
    igpu = pci_device(tree, "0000:00:02.0", "0x8086", "0x9a49", "0x030000")
    drm_card(tree, "card0", igpu)
    dgpu = pci_device(tree, "0000:3a:00.0", "0x8086", "0x0bd5", "0x038000")
    tree.put(f"{dgpu}/hwmon/hwmon3/name", "i915")
    tree.put(f"{dgpu}/hwmon/hwmon3/energy1_input", 123_456_789)
    tree.put(f"{dgpu}/hwmon/hwmon3/power1_max", 600_000_000)
    drm_card(tree, "card1", dgpu)

    found = discovered(None, tree)
    assert (found.vendor, found.count, found.raw_model) == ("intel", 1, "Intel GPU 0x0bd5")
    assert not found.control_available
    assert found.telemetry_available
    assert found.devices[0].monitor_only is MonitorOnly.NOT_SUPPORTED
    assert found.max_watts is None
    results = capped(found, None, tree, 300)
    assert outcomes(results) == [R.UNSUPPORTED]
    assert tree.writes == []


def test_nvidia_takes_precedence_and_other_vendors_are_named(tree: FakeSysfs) -> None:
    mi300x_node(tree)
    found = discovered(normal_node(2), tree)
    assert (found.vendor, found.count) == ("nvidia", 2)
    assert any("2 amd GPU(s)" in w for w in found.warnings)


# --- board identity, restoring a refused board, tolerance --------------------------------------


def test_a_cap_is_not_written_to_an_index_that_holds_another_board(tree: FakeSysfs) -> None:
    nvml = normal_node(2)
    found = discovered(nvml, tree)
    nvml.gpus.reverse()  # renumbered after a driver reload
    ctl = control(nvml, tree)
    results = capped(found, nvml, tree, 300, ctl=ctl)
    assert outcomes(results) == [R.ERROR] * 2
    assert ctl.needs_rediscovery()
    assert all("renumbered" in r.detail for r in results)
    nvml.gpus.pop()  # and then one is gone
    results = capped(found, nvml, tree, 300, ctl=ctl)
    assert outcomes(results) == [R.ERROR] * 2
    assert "holds no board" in results[1].detail
    assert nvml.calls == []


def test_a_board_whose_uuid_is_unknown_is_not_written(tree: FakeSysfs) -> None:
    nvml = normal_node(2)
    nvml.fail["uuid", 1] = GpuUnavailable("GPU 1: uuid: Unknown Error", code=999)
    found = discovered(nvml, tree)
    results = capped(found, nvml, tree, 300)
    assert nvml.set_calls() == [(0, (300_000,))]
    assert outcomes(results) == [R.APPLIED, R.ERROR]
    assert "board identity unknown: not written" in results[1].detail
    assert [d.identity_known for d in found.devices] == [True, False]
    assert found.board("1") is None  # an index key never matches it


def test_restoring_tries_a_board_blocked_only_by_a_refused_write(tree: FakeSysfs) -> None:
    nvml = normal_node(1)
    nvml.gpus[0].limit_mw = 300_000  # the agent's earlier cap, before a write was refused
    found = discovered(nvml, tree, refused={0})
    assert found.devices[0].monitor_only is MonitorOnly.NO_PERMISSION
    ctl = control(nvml, tree)
    entry = f"gpu/{nvml.gpus[0].uuid}/power-limit-mw"
    ctl.baseline.record(entry, 700_000)
    assert outcomes(capped(found, nvml, tree, 250, ctl=ctl)) == [R.REFUSED]
    assert nvml.calls == []
    assert outcomes(ctl.restore_cap(found).settings) == [R.RESTORED]
    assert nvml.gpus[0].limit_mw == 700_000

    ctl.baseline.record(entry, 650_000)
    lost = replace(found, devices=(replace(found.devices[0], monitor_only=MonitorOnly.LOST),))
    assert outcomes(ctl.restore_cap(lost).settings) == [R.ERROR]
    assert len(nvml.set_calls()) == 1


def test_a_limit_within_the_tolerance_of_the_target_is_not_written(tree: FakeSysfs) -> None:
    nvml = normal_node(2)
    nvml.gpus[0].limit_mw = 300_400  # a driver's rounding of an earlier 300 W
    nvml.gpus[1].limit_mw = 301_001  # beyond a watt: another value
    results = capped(discovered(nvml, tree), nvml, tree, 300)
    assert outcomes(results) == [R.EQUIVALENT, R.APPLIED]
    assert nvml.set_calls() == [(1, (300_000,))]
