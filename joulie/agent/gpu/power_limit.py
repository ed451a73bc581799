"""One GPU board's power limit, in the driver's own unit, as the guarded write sees it.

:func:`cap_setting` gives the :class:`~joulie.agent.guarded_write.Setting` of a board's limit
(:class:`~joulie.agent.gpu.backend.PowerLimit`, in the unit its backend's driver keeps); the cap
written is resolved with the one cap resolution (:func:`joulie.core.caps.effective_cap`) against
the board's discovered range, then clamped into that range in the driver's unit
(:meth:`~joulie.agent.gpu.backend.PowerLimit.clamp`). One tolerance,
:data:`DEFAULT_TOLERANCE_WATTS` in the driver's unit, decides both whether the limit in force
already is the target and whether a read-back is drift, so a driver that rounds what it is given
neither drifts nor looks changed by another writer at the next pass.

A board discovery found uncappable (:func:`blocked`) is not touched, so a write the board or the
kernel has refused is not retried at every reconcile; restoring lets through a board blocked only
because an earlier write was refused, so that a value the agent wrote is still put back. A limit
that cannot be read is not written (it could not be put back), and the value in force before the
agent's first write is what restoring writes. Nothing here shells out.
"""

from __future__ import annotations

from collections.abc import Callable

from joulie.agent.gpu.backend import PowerLimit
from joulie.agent.gpu.device import GpuDevice, MonitorOnly
from joulie.agent.gpu.errors import GpuError, GpuLost, gpu_failure, translated
from joulie.agent.guarded_write import Setting
from joulie.api.enums import ControlResult

__all__ = ["DEFAULT_TOLERANCE_WATTS", "blocked", "cap_setting"]

DEFAULT_TOLERANCE_WATTS = 1.0
"""How far two readings of a limit may be apart and still be the same value (the read-back and
what was written; the limit in force and the target; the limit in force and what the agent last
wrote): the drivers store whole watts (amdgpu) or milliwatts, sometimes rounded (NVML), so
anything beyond a watt is another writer."""


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


def cap_setting(
    key: str,
    limit: PowerLimit,
    noted: Callable[[GpuError], None],
    tolerance_watts: float = DEFAULT_TOLERANCE_WATTS,
) -> Setting:
    """The board's limit for the guarded write; ``noted`` hears of every error the interface
    raised (the caller watches for a board to discover again)."""
    per_watt = limit.per_watt

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
        key,
        read,
        lambda value: translated(lambda: limit.write(int(value)), noted),
        check=lambda: translated(limit.check_identity, noted),
        tolerance=limit.native(tolerance_watts),
        show=show,
        recorded_as=int,
    )
