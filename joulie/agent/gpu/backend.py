"""What a GPU vendor's interface offers the agent: one backend per interface.

A backend finds the boards its interface reaches and gives, per board, its power limit in the
driver's own unit (:class:`PowerLimit`), its clock setting (:class:`ClockAccess`) and its power
draw. Everything above it (the guarded write of caps and clocks, discovery's node figures, the
power sampler) is written once against :class:`GpuBackend`; the backends are listed in order of
precedence in :mod:`joulie.agent.gpu.backends`. A new vendor is a module implementing this
protocol plus an entry in that list (and its product labels and resource name in ``api``).

A backend raises the vendor-neutral :mod:`joulie.agent.gpu.errors`, never its library's own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Protocol

from joulie.agent.gpu.device import GpuDevice

__all__ = ["ClockAccess", "GpuBackend", "PowerLimit", "VendorBoards"]


class PowerLimit:
    """One board's limit in the driver's own integer unit."""

    per_watt: int
    step: int
    """Smallest distinct value the driver keeps, in native units."""

    def __init__(self, low_watts: float | None, high_watts: float) -> None:
        # The range in native units, shrunk to values the driver keeps as written.
        # (Rounded first: 0.2 W * 1000 is 200.00000000000003 in floating point.)
        self.low = math.ceil(round((low_watts or 0.0) * self.per_watt / self.step, 6)) * self.step
        self.high = math.floor(round(high_watts * self.per_watt / self.step, 6)) * self.step

    def clamp(self, watts: float) -> int:
        native = round(watts * self.per_watt / self.step) * self.step
        return max(self.low, min(native, self.high))

    def native(self, watts: float) -> int:
        return round(watts * self.per_watt)

    def check_identity(self) -> None:
        """Raise unless the interface still reaches the board discovery found."""

    def read(self) -> int:
        raise NotImplementedError

    def write(self, native: int) -> None:
        raise NotImplementedError


@dataclass(frozen=True)
class ClockAccess:
    """One board's clock setting as its interface reads and writes it (raising
    :class:`~joulie.agent.gpu.errors.GpuError`)."""

    setting: str
    """The baseline setting name (``locked-clocks-mhz``, ``power_dpm_force_performance_level``)."""
    read: Callable[[], str | None]
    """The setting in force; None when the interface has no reading of it."""
    write: Callable[[str], None]
    check: Callable[[], None]
    """Raises unless the interface still reaches the board discovery found."""
    unread_value: str | None = None
    """What is in force when :attr:`read` gives nothing (NVML: ``unlocked``)."""


@dataclass(frozen=True)
class VendorBoards:
    """What one backend found on the node."""

    devices: tuple[GpuDevice, ...]
    warnings: tuple[str, ...] = ()


class GpuBackend(Protocol):
    """One vendor interface (NVML, amdgpu's hwmon and DRM files, Intel's hwmon files)."""

    @property
    def vendor(self) -> str:
        """``nvidia``, ``amd``, ``intel``: the vendor of every board it finds."""
        ...

    @property
    def limit_setting(self) -> str | None:
        """The baseline setting name of its boards' power limits (None: it sets none)."""
        ...

    @property
    def clock_setting(self) -> str | None:
        """The baseline setting name of its boards' clock setting (None: it sets none)."""
        ...

    def discover(self, refused: Collection[int]) -> VendorBoards:
        """The boards its interface reaches now. ``refused``: indices of boards whose last cap
        write was refused for lack of permission (monitor-only until the agent restarts)."""
        ...

    def power_limit(self, device: GpuDevice) -> PowerLimit:
        """The board's power limit; raises
        :class:`~joulie.agent.gpu.errors.GpuNotSupported` when nothing here can set it."""
        ...

    def clocks(self, device: GpuDevice) -> ClockAccess | None:
        """The board's clock setting, None when its clocks cannot be governed."""
        ...

    def power_watts(self, device: GpuDevice) -> float | None:
        """The board's power draw now, None when it cannot be read."""
        ...

    def close(self) -> None:
        """Release the interface (NVML shutdown); errors are the caller's to log."""
        ...
