"""A GPU vendor is one backend: a new one, written against the protocol alone, is discovered,
capped with its baseline kept, restored, clock-governed and measured by the same code the real
backends go through, without any other module knowing of it."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from joulie.agent.baseline import Baseline
from joulie.agent.cpu_discovery import discover_cpu
from joulie.agent.gpu.backend import ClockAccess, PowerLimit, VendorBoards
from joulie.agent.gpu.backends import GpuBackends
from joulie.agent.gpu.control import GpuControl
from joulie.agent.gpu.device import GpuBackendKind, GpuDevice
from joulie.agent.gpu.discovery import discover_gpus
from joulie.agent.gpu.errors import GpuNoPermission
from joulie.agent.gpu.settings import ClockMechanism
from joulie.agent.host_power import PowerSampler
from joulie.api.enums import ControlResult, GpuGovernorPreset
from tests.support.fake_sysfs import FakeSysfs

R = ControlResult


@dataclass
class _Board:
    limit_mw: int = 300_000
    level: str = "auto"
    locked: bool = False


class _ToyLimit(PowerLimit):
    per_watt = 1000
    step = 1000  # whole watts

    def __init__(self, board: _Board, device: GpuDevice) -> None:
        assert device.max_watts is not None
        super().__init__(device.min_watts, device.max_watts)
        self.board = board

    def read(self) -> int:
        return self.board.limit_mw

    def write(self, native: int) -> None:
        if self.board.locked:
            raise GpuNoPermission("toy: the limit is locked")
        self.board.limit_mw = native


class ToyBackend:
    """Two boards of a vendor no other module names, in memory."""

    vendor = "toy"
    limit_setting = "toy-limit-mw"
    clock_setting = "toy-level"

    def __init__(self) -> None:
        self.boards = [_Board(), _Board()]

    def discover(self, refused: Collection[int]) -> VendorBoards:
        return VendorBoards(
            tuple(
                GpuDevice(
                    index=i,
                    vendor=self.vendor,
                    backend=GpuBackendKind.HWMON,
                    raw_model="Toy Accelerator",
                    uuid=f"TOY-{i}",
                    min_watts=100.0,
                    max_watts=300.0,
                    current_cap_watts=board.limit_mw / 1000,
                    graphics_clocks_mhz=(500, 1000),
                    graphics_clock_min_mhz=500,
                    graphics_clock_max_mhz=1000,
                    telemetry=True,
                    clock_mechanism=ClockMechanism.SYSFS,
                )
                for i, board in enumerate(self.boards)
            ),
            ("toy: two boards",),
        )

    def power_limit(self, device: GpuDevice) -> PowerLimit:
        return _ToyLimit(self.boards[device.index], device)

    def clocks(self, device: GpuDevice) -> ClockAccess | None:
        board = self.boards[device.index]
        return ClockAccess(
            self.clock_setting,
            lambda: board.level,
            lambda value: setattr(board, "level", value),
            lambda: None,
        )

    def power_watts(self, device: GpuDevice) -> float | None:
        return 123.0 + device.index

    def close(self) -> None:
        return None


def test_a_new_vendor_backend_is_discovered_capped_restored_governed_and_measured(
    tmp_path: Path,
) -> None:
    toy = ToyBackend()
    backends = GpuBackends((toy,))
    found = discover_gpus(backends)
    assert (found.vendor, found.count, found.max_watts) == ("toy", 2, 300.0)
    assert "toy: two boards" in found.warnings

    control = GpuControl(backends, Baseline(tmp_path / "state", "boot"))
    capped = control.apply_cap(found, 150.4, None)
    assert capped.result is R.APPLIED
    assert [b.limit_mw for b in toy.boards] == [150_000, 150_000]  # whole watts, clamped
    assert control.baseline.entries() == {
        "gpu/TOY-0/toy-limit-mw": 300_000,
        "gpu/TOY-1/toy-limit-mw": 300_000,
    }
    assert control.apply_preset(found, GpuGovernorPreset.LOW, None, enabled=True).result is (
        R.APPLIED
    )
    assert [b.level for b in toy.boards] == ["low", "low"]

    cap, clocks = control.restore_all(found)
    assert (cap.result, clocks.result) == (R.RESTORED, R.RESTORED)
    assert toy.boards == [_Board(), _Board()]
    assert control.baseline.entries() == {}

    node = FakeSysfs(tmp_path / "root")
    sampler = PowerSampler(node, backends, lambda: 0.0)
    assert sampler.sample(discover_cpu(node), found).gpu_watts == {"0": 123.0, "1": 124.0}


def test_a_refusal_from_a_new_backend_is_told_to_discovery(tmp_path: Path) -> None:
    toy = ToyBackend()
    toy.boards[1].locked = True
    backends = GpuBackends((toy,))
    control = GpuControl(backends, Baseline(tmp_path / "state", "boot"))
    outcome = control.apply_cap(discover_gpus(backends), 200, None)
    assert [s.result for s in outcome.settings] == [R.APPLIED, R.REFUSED]
    assert control.refused() == {1}
    assert toy.boards[1].limit_mw == 300_000
