"""One GPU board's power limit, in the driver's own unit, as the guarded write sees it.

:func:`cap_setting` gives the :class:`~joulie.agent.guarded_write.Setting` of a board's limit
(NVML milliwatts, amdgpu hwmon ``power1_cap`` microwatts in whole watts) and
:func:`cap_target` the value a per-GPU intent comes to on that board: resolved with the one cap
resolution (:func:`joulie.core.caps.effective_cap`) against the board's discovered range, then
clamped into that range in the driver's unit. One tolerance, :data:`DEFAULT_TOLERANCE_WATTS` in
the driver's unit, decides both whether the limit in force already is the target and whether a
read-back is drift, so a driver that rounds what it is given neither drifts nor looks changed by
another writer at the next pass.

A board discovery found uncappable (:func:`blocked`) is not touched, so a write the board or the
kernel has refused is not retried at every reconcile; restoring lets through a board blocked only
because an earlier write was refused, so that a value the agent wrote is still put back. A limit
that cannot be read is not written (it could not be put back), and the value in force before the
agent's first write is what restoring writes. Nothing here shells out.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from joulie.agent.gpu.discovery import (
    BoardChanged,
    BoardUnknown,
    GpuBackendKind,
    GpuDevice,
    MonitorOnly,
    check_identity,
)
from joulie.agent.gpu.drm import read_cap_uw, write_cap_uw
from joulie.agent.gpu.nvml import (
    GpuError,
    GpuInvalidArgument,
    GpuLost,
    GpuNoPermission,
    GpuNotSupported,
    NvmlAdapter,
)
from joulie.agent.gpu.settings import POWER1_CAP_UW, POWER_LIMIT_MW, gpu_key
from joulie.agent.guarded_write import Setting, SettingFailed
from joulie.agent.sysfs import Sysfs
from joulie.api.enums import ControlResult
from joulie.core.caps import effective_cap
from joulie.core.control import Failure

__all__ = [
    "DEFAULT_TOLERANCE_WATTS",
    "PowerLimit",
    "blocked",
    "cap_setting",
    "cap_setting_name",
    "cap_target",
    "gpu_failure",
    "native_unit",
    "needs_rediscovery",
    "power_limit",
]

DEFAULT_TOLERANCE_WATTS = 1.0
"""How far two readings of a limit may be apart and still be the same value (the read-back and
what was written; the limit in force and the target; the limit in force and what the agent last
wrote): the drivers store whole watts (amdgpu) or milliwatts, sometimes rounded (NVML), so
anything beyond a watt is another writer."""


def gpu_failure(exc: GpuError) -> SettingFailed:
    """A GPU interface's refusal as the guarded write counts it."""
    if isinstance(exc, GpuNotSupported):
        return SettingFailed(str(exc), failure=None)
    if isinstance(exc, GpuNoPermission):
        return SettingFailed(str(exc), Failure.PERMISSION)
    if isinstance(exc, GpuInvalidArgument):
        return SettingFailed(str(exc), Failure.REJECTED)
    return SettingFailed(str(exc), Failure.OTHER)  # lost, unavailable, anything else


def needs_rediscovery(exc: GpuError) -> bool:
    """Whether ``exc`` says the discovery in hand no longer describes the board."""
    return isinstance(exc, GpuLost | BoardChanged | BoardUnknown)


_BLOCKED = {
    MonitorOnly.NOT_SUPPORTED: ControlResult.UNSUPPORTED,
    MonitorOnly.NO_RANGE: ControlResult.UNSUPPORTED,
    MonitorOnly.UNAVAILABLE: ControlResult.UNSUPPORTED,
    MonitorOnly.NO_PERMISSION: ControlResult.REFUSED,
    MonitorOnly.LOST: ControlResult.ERROR,
}


def blocked(device: GpuDevice, *, restoring: bool = False) -> tuple[ControlResult, str] | None:
    """Why discovery found the board's limit not to be touched, as a result and a detail."""
    why = device.monitor_only
    if restoring and why is MonitorOnly.NO_PERMISSION:
        why = None
    if why is None and device.max_watts is None:
        why = MonitorOnly.NO_RANGE
    return None if why is None else (_BLOCKED[why], f"monitor-only: {why.value}")


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

    def to_watts(self, native: int) -> float:
        return native / self.per_watt

    def native(self, watts: float) -> int:
        return round(watts * self.per_watt)

    def check_identity(self) -> None:
        """Raise unless the interface still reaches the board discovery found."""

    def read(self) -> int:
        raise NotImplementedError

    def write(self, native: int) -> None:
        raise NotImplementedError


class _Nvml(PowerLimit):
    per_watt = 1000
    step = 1

    def __init__(
        self, nvml: NvmlAdapter, device: GpuDevice, low: float | None, high: float
    ) -> None:
        super().__init__(low, high)
        self.nvml, self.device, self.index = nvml, device, device.index

    def check_identity(self) -> None:
        check_identity(self.nvml, self.device)

    def read(self) -> int:
        return self.nvml.power_limit_mw(self.index)

    def write(self, native: int) -> None:
        # NVML's v1 setter (see nvml.PynvmlAdapter): it reports a refusal, the v2 wrapper not.
        self.nvml.set_power_limit_mw(self.index, native)


class _Hwmon(PowerLimit):
    per_watt = 1_000_000
    step = 1_000_000  # amdgpu keeps whole watts

    def __init__(self, sysfs: Sysfs, hwmon: str, low: float | None, high: float) -> None:
        super().__init__(low, high)
        self.sysfs, self.hwmon = sysfs, hwmon

    def read(self) -> int:
        return read_cap_uw(self.sysfs, self.hwmon)

    def write(self, native: int) -> None:
        write_cap_uw(self.sysfs, self.hwmon, native)


def power_limit(device: GpuDevice, *, nvml: NvmlAdapter | None, sysfs: Sysfs) -> PowerLimit:
    """The limit of a ranged board (:func:`blocked` says None); raises
    :class:`~joulie.agent.gpu.nvml.GpuNotSupported` when nothing here can set it."""
    assert device.max_watts is not None  # only ranged boards get this far
    if device.backend is GpuBackendKind.NVML:
        if nvml is None:
            raise GpuNotSupported(f"GPU {device.index}: no NVML adapter")
        return _Nvml(nvml, device, device.min_watts, device.max_watts)
    if device.backend is GpuBackendKind.HWMON and device.hwmon is not None:
        return _Hwmon(sysfs, device.hwmon, device.min_watts, device.max_watts)
    raise GpuNotSupported(f"GPU {device.index}: no interface to set its power limit")


def cap_target(
    limit: PowerLimit, device: GpuDevice, watts: float | None, pct: float | None
) -> int | None:
    """The native value a per-GPU intent (watts, else percent of the maximum) comes to on this
    board, clamped into its range; None when the intent holds no usable cap."""
    cap = effective_cap(watts, pct, device.max_watts, device.min_watts)
    if cap is None or cap.watts is None:
        return None
    return limit.clamp(cap.watts)


def cap_setting(
    device: GpuDevice,
    limit: PowerLimit,
    noted: Callable[[GpuError], None],
    tolerance_watts: float = DEFAULT_TOLERANCE_WATTS,
) -> Setting:
    """The board's limit for the guarded write; ``noted`` hears of every error the interface
    raised (the caller watches for a board to discover again)."""
    per_watt = limit.per_watt

    def guarded(call: Callable[[], None]) -> None:
        try:
            call()
        except GpuError as exc:
            noted(exc)
            raise gpu_failure(exc) from None

    def read() -> str | None:
        try:
            return str(limit.read())
        except GpuLost as exc:
            noted(exc)
            raise gpu_failure(exc) from None
        except GpuError:
            return None  # the limit in force is unknown: not written, since not restorable

    def show(value: str) -> str:
        try:
            return f"{int(value) / per_watt:g} W"
        except ValueError:
            return value

    return Setting(
        gpu_key(device.board_id, cap_setting_name(device)),
        read,
        lambda value: guarded(lambda: limit.write(int(value))),
        check=lambda: guarded(limit.check_identity),
        tolerance=limit.native(tolerance_watts),
        show=show,
        recorded_as=int,
    )


def cap_setting_name(device: GpuDevice) -> str:
    """The baseline setting name of a board's limit."""
    return POWER1_CAP_UW if device.backend is GpuBackendKind.HWMON else POWER_LIMIT_MW


def native_unit(device: GpuDevice) -> int:
    """How many of the driver's units make a watt for this board's limit."""
    return _Hwmon.per_watt if device.backend is GpuBackendKind.HWMON else _Nvml.per_watt
