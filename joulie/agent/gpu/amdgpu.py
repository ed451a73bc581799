"""AMD boards through amdgpu's DRM and hwmon files: power caps in microwatts (whole watts) and
the clock policy ``power_dpm_force_performance_level``.

The driver stores the cap in whole watts (it divides what is written by 10^6), so the agent
writes whole watts in microwatts and a read-back is exact. A board without ``power1_cap`` or a
usable maximum (virtual functions, some consumer boards) is monitor-only; so is one whose last
cap write was refused for lack of permission.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from joulie.agent.gpu.backend import ClockAccess, PowerLimit, VendorBoards
from joulie.agent.gpu.device import GpuDevice, MonitorOnly
from joulie.agent.gpu.drm import DrmVendor, drm_device, hwmon_power_watts, scan_drm_gpus
from joulie.agent.gpu.errors import (
    GpuError,
    GpuInvalidArgument,
    GpuLost,
    GpuNoPermission,
    GpuNotSupported,
)
from joulie.agent.gpu.settings import PERFORMANCE_LEVEL, POWER1_CAP_UW, ClockMechanism
from joulie.agent.sysfs import ErrorKind, Sysfs, SysfsError

__all__ = ["AmdgpuBackend"]


class AmdgpuBackend:
    vendor = "amd"
    limit_setting = POWER1_CAP_UW
    clock_setting = PERFORMANCE_LEVEL

    def __init__(self, sysfs: Sysfs) -> None:
        self.sysfs = sysfs

    def discover(self, refused: Collection[int]) -> VendorBoards:
        scan = scan_drm_gpus(self.sysfs, DrmVendor.AMD)
        boards = list(scan.gpus)
        devices = [drm_device(i, g) for i, g in enumerate(boards)]
        for i in refused:
            if i < len(devices) and devices[i].monitor_only is None:
                devices[i] = replace(devices[i], monitor_only=MonitorOnly.NO_PERMISSION)
        return VendorBoards(tuple(devices), scan.warnings)

    def power_limit(self, device: GpuDevice) -> PowerLimit:
        assert device.max_watts is not None  # only ranged boards get this far
        if device.hwmon is None:
            raise GpuNotSupported(f"GPU {device.index}: no interface to set its power limit")
        return _HwmonLimit(self.sysfs, device.hwmon, device.min_watts, device.max_watts)

    def clocks(self, device: GpuDevice) -> ClockAccess | None:
        path = device.performance_level_file
        if device.clocks.mechanism is not ClockMechanism.SYSFS or path is None:
            return None
        sysfs = self.sysfs
        return ClockAccess(
            PERFORMANCE_LEVEL,
            lambda: _read(sysfs, path, "read the performance level"),
            lambda value: _write(sysfs, path, value, "set the performance level"),
            lambda: None,
        )

    def power_watts(self, device: GpuDevice) -> float | None:
        return hwmon_power_watts(self.sysfs, device.hwmon)

    def close(self) -> None:
        return None


class _HwmonLimit(PowerLimit):
    per_watt = 1_000_000
    step = 1_000_000  # amdgpu keeps whole watts

    def __init__(self, sysfs: Sysfs, hwmon: str, low: float | None, high: float) -> None:
        super().__init__(low, high)
        self.sysfs, self.hwmon = sysfs, hwmon

    def read(self) -> int:
        try:
            return self.sysfs.read_int(f"{self.hwmon}/power1_cap")
        except SysfsError as exc:
            raise _gpu_error(exc, "read the power cap") from None

    def write(self, native: int) -> None:
        _write(self.sysfs, f"{self.hwmon}/power1_cap", str(int(native)), "set the power cap")


def _read(sysfs: Sysfs, path: str, what: str) -> str:
    try:
        return sysfs.read(path)
    except SysfsError as exc:
        raise _gpu_error(exc, what) from None


def _write(sysfs: Sysfs, path: str, value: str, what: str) -> None:
    try:
        sysfs.write(path, value)
    except SysfsError as exc:
        raise _gpu_error(exc, what) from None


def _gpu_error(exc: SysfsError, what: str) -> GpuError:
    message = f"{what}: {exc}"
    if exc.kind is ErrorKind.MISSING:
        # The file was there at discovery: the driver let go of the board.
        return GpuLost(message)
    if exc.kind is ErrorKind.PERMISSION:
        return GpuNoPermission(message)
    if exc.kind is ErrorKind.REJECTED:
        # EOPNOTSUPP means the board has no cap; EINVAL, a value it refuses.
        if "not supported" in exc.detail.lower():
            return GpuNotSupported(message)
        return GpuInvalidArgument(message)
    return GpuError(message)
