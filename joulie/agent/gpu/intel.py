"""Intel discrete boards (i915, xe) through their hwmon files: monitor-only, power readings.

Integrated graphics (the fixed slot 0000:00:02.0) is part of the CPU package, so the DRM scan
does not count it as a GPU at all.
"""

from __future__ import annotations

from collections.abc import Collection

from joulie.agent.gpu.backend import ClockAccess, PowerLimit, VendorBoards
from joulie.agent.gpu.device import GpuDevice
from joulie.agent.gpu.drm import DrmVendor, drm_device, hwmon_power_watts, scan_drm_gpus
from joulie.agent.gpu.errors import GpuNotSupported
from joulie.agent.sysfs import Sysfs

__all__ = ["IntelBackend"]


class IntelBackend:
    vendor = "intel"
    limit_setting = None
    clock_setting = None

    def __init__(self, sysfs: Sysfs) -> None:
        self.sysfs = sysfs

    def discover(self, refused: Collection[int]) -> VendorBoards:
        scan = scan_drm_gpus(self.sysfs, DrmVendor.INTEL)
        boards = list(scan.gpus)
        return VendorBoards(tuple(drm_device(i, g) for i, g in enumerate(boards)), scan.warnings)

    def power_limit(self, device: GpuDevice) -> PowerLimit:
        raise GpuNotSupported(f"GPU {device.index}: Intel boards are monitor-only")

    def clocks(self, device: GpuDevice) -> ClockAccess | None:
        return None

    def power_watts(self, device: GpuDevice) -> float | None:
        return hwmon_power_watts(self.sysfs, device.hwmon)

    def close(self) -> None:
        return None
