"""Setting one GPU's power limit, and saying per board what came of it.

For every board of a :class:`~joulie.agent.gpu_discovery.GpuDiscovery` the intent (watts, else
percent of the board's maximum) is resolved with the one cap resolution of
:func:`joulie.core.caps.effective_cap` against the board's discovered range, clamped into that
range in the driver's own unit (NVML milliwatts, amdgpu microwatts in whole watts), compared with
the value in force (nothing is written when they already agree within the tolerance), written,
and read back. One tolerance, :data:`DEFAULT_TOLERANCE_WATTS` in the driver's unit
(:func:`tolerance_native`), decides both whether the value in force already is the target and
whether a read-back is drift, so a driver that rounds what it is given neither drifts nor looks
changed by another writer at the next pass. Before anything is read or written through NVML, the
board's index is confirmed to hold the UUID discovery saw
(:func:`~joulie.agent.gpu_discovery.check_identity`); a board whose UUID is unknown is not
touched.

Each board gets a :class:`GpuCapResult` whose :class:`GpuCapOutcome` keeps apart what an
operator acts on differently: applied, applied but not verifiable, drift (the read-back differs
from what was written), unsupported (monitor-only board), refused (no permission), not applied
(no usable target) and error (lost board, refused value, I/O). A failure on one board never stops
the others. :class:`joulie.agent.gpu_control.GpuControl` turns these into NodeTwin
``controlStatus`` values, recording the baseline through ``before_write``, the one step between
reading the limit in force and writing.

Putting a baseline back is the same one-board operation, :func:`apply_gpu_cap` with the recorded
value as target and ``restoring=True``, called by
:meth:`joulie.agent.gpu_control.GpuControl.restore_cap` for the board whose UUID (amdgpu: PCI
slot) the baseline key names; it is clamped and verified like any other write. ``restoring`` lets
through a board discovery blocked only because an earlier write was refused, so a value the
agent wrote is still put back. Nothing here shells out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from joulie.agent.amd_gpu import read_cap_uw, write_cap_uw
from joulie.agent.gpu_discovery import (
    BoardChanged,
    BoardUnknown,
    GpuBackendKind,
    GpuDevice,
    GpuDiscovery,
    MonitorOnly,
    check_identity,
)
from joulie.agent.nvml import (
    GpuError,
    GpuLost,
    GpuNoPermission,
    GpuNotSupported,
    NvmlAdapter,
)
from joulie.agent.sysfs import Sysfs
from joulie.core.caps import effective_cap

__all__ = [
    "DEFAULT_TOLERANCE_WATTS",
    "BeforeWrite",
    "CapIntent",
    "GpuCapOutcome",
    "GpuCapResult",
    "apply_gpu_cap",
    "apply_gpu_caps",
    "native_unit",
    "read_limit",
    "tolerance_native",
]

DEFAULT_TOLERANCE_WATTS = 1.0
"""How far two readings of a limit may be apart and still be the same value (the read-back and
what was written; the limit in force and the target; the limit in force and what the agent last
wrote): the drivers store whole watts (amdgpu) or milliwatts, sometimes rounded (NVML), so
anything beyond a watt is another writer."""


class GpuCapOutcome(StrEnum):
    APPLIED = "applied"
    """The limit in force is the target (written now, or already so), confirmed by a read."""
    APPLIED_UNVERIFIED = "applied-unverified"
    """The write was accepted but the limit cannot be read back."""
    DRIFT = "drift"
    """The write was accepted but the limit read back differs from it."""
    UNSUPPORTED = "unsupported"
    """The board has no settable power limit (monitor-only)."""
    REFUSED = "refused"
    """The agent may not set the limit (no permission)."""
    CONTENDED = "contended"
    """Another writer changed the limit the agent set; not written again (``before_write``)."""
    NOT_APPLIED = "not-applied"
    """Nothing to write: the intent holds no usable cap, or only a percentage of a maximum
    that is unknown."""
    ERROR = "error"
    """The board is lost, refused the value, or failed otherwise."""


@dataclass(frozen=True)
class CapIntent:
    """A per-GPU cap as NodeTwin.spec states it (``capWattsPerGpu``, ``capPctOfMax``)."""

    watts: float | None = None
    pct_of_max: float | None = None


@dataclass(frozen=True)
class GpuCapResult:
    index: int
    uuid: str | None
    outcome: GpuCapOutcome
    target_watts: float | None = None
    """The resolved, clamped value that was aimed at."""
    clamped: bool = False
    """The intent asked for a value outside the board's range."""
    written: bool = False
    """A write was issued (False when the limit already matched, or nothing was tried)."""
    read_back_watts: float | None = None
    before_watts: float | None = None
    """The limit in force before, when it could be read."""
    detail: str = ""
    rediscover: bool = False
    """The discovery this ran on no longer describes the board: it was lost, its index holds
    another board, or its UUID is unknown. Discovering again is the remedy."""


BeforeWrite = Callable[[int | None, int], "tuple[GpuCapOutcome, str] | None"]
"""Called just before a write with the limit in force (the driver's unit; None: unreadable) and
the target; an outcome and a reason returned instead of None stop the write."""


def apply_gpu_caps(
    discovery: GpuDiscovery,
    intent: CapIntent | Mapping[int, CapIntent],
    *,
    nvml: NvmlAdapter | None,
    sysfs: Sysfs,
    tolerance_watts: float = DEFAULT_TOLERANCE_WATTS,
) -> tuple[GpuCapResult, ...]:
    """Apply ``intent`` to every board (one intent for all), or to the boards a mapping names
    by index (each its own). Records no baseline: :class:`~joulie.agent.gpu_control.GpuControl`
    is the caller that does."""
    results = []
    for device in discovery.devices:
        if isinstance(intent, CapIntent):
            wanted = intent
        elif device.index in intent:
            wanted = intent[device.index]
        else:
            continue
        results.append(
            apply_gpu_cap(device, wanted, nvml=nvml, sysfs=sysfs, tolerance_watts=tolerance_watts)
        )
    return tuple(results)


def apply_gpu_cap(
    device: GpuDevice,
    intent: CapIntent,
    *,
    nvml: NvmlAdapter | None,
    sysfs: Sysfs,
    tolerance_watts: float = DEFAULT_TOLERANCE_WATTS,
    before_write: BeforeWrite | None = None,
    restoring: bool = False,
) -> GpuCapResult:
    """Resolve, clamp, write and verify one board's cap.

    ``restoring``: the intent is the board's recorded baseline, so a board blocked only because
    an earlier write was refused (:attr:`MonitorOnly.NO_PERMISSION`) is tried all the same.
    """
    base = GpuCapResult(index=device.index, uuid=device.uuid, outcome=GpuCapOutcome.ERROR)
    why = device.monitor_only
    if restoring and why is MonitorOnly.NO_PERMISSION:
        why = None
    if why is None and device.max_watts is None:
        why = MonitorOnly.NO_RANGE
    if why is not None:
        # Discovery found the board uncappable: it is not touched, so a write the board or the
        # kernel has refused is not retried at every reconcile.
        return replace(base, outcome=_BLOCKED[why], detail=f"monitor-only: {why.value}")
    low, high = device.min_watts, device.max_watts
    cap = effective_cap(intent.watts, intent.pct_of_max, high, low)
    if cap is None or cap.watts is None:
        return replace(base, outcome=GpuCapOutcome.NOT_APPLIED, detail="no usable cap")
    try:
        backend = _backend(device, nvml, sysfs)
        backend.check_identity()
    except GpuError as exc:
        return _failed(base, exc)
    tolerance = backend.native(tolerance_watts)
    target = backend.clamp(cap.watts)
    target_watts = backend.to_watts(target)
    asked = _asked_watts(intent, high)
    base = replace(
        base,
        target_watts=target_watts,
        clamped=asked is not None and abs(asked - target_watts) > 1e-9,
    )

    before: int | None = None
    try:
        before = backend.read()
    except GpuLost as exc:
        return _failed(base, exc)
    except GpuError:
        pass  # a limit that cannot be read can still be set; the read-back will tell
    if before is not None:
        base = replace(base, before_watts=backend.to_watts(before))
        if abs(before - target) <= tolerance:  # already in force: no write
            return replace(
                base, outcome=GpuCapOutcome.APPLIED, read_back_watts=backend.to_watts(before)
            )
    stop = before_write(before, target) if before_write is not None else None
    if stop is not None:
        return replace(base, outcome=stop[0], detail=stop[1])
    try:
        backend.write(target)
    except GpuError as exc:
        return _failed(base, exc)
    base = replace(base, written=True)
    try:
        after = backend.read()
    except GpuLost as exc:
        return _failed(base, exc)
    except GpuError as exc:
        return replace(
            base, outcome=GpuCapOutcome.APPLIED_UNVERIFIED, detail=f"read-back failed: {exc}"
        )
    after_watts = backend.to_watts(after)
    if abs(after - target) > tolerance:
        return replace(
            base,
            outcome=GpuCapOutcome.DRIFT,
            read_back_watts=after_watts,
            detail=f"wrote {target_watts:g} W, read back {after_watts:g} W",
        )
    return replace(base, outcome=GpuCapOutcome.APPLIED, read_back_watts=after_watts)


def read_limit(device: GpuDevice, *, nvml: NvmlAdapter | None, sysfs: Sysfs) -> int | None:
    """The limit in force on a ranged board, in the driver's unit; None when it cannot be read
    (or, for an NVIDIA board, when its index no longer holds its UUID)."""
    if device.max_watts is None:
        return None
    try:
        backend = _backend(device, nvml, sysfs)
        backend.check_identity()
        return backend.read()
    except GpuError:
        return None


def tolerance_native(device: GpuDevice, watts: float = DEFAULT_TOLERANCE_WATTS) -> int:
    """``watts`` of tolerance in the driver's unit for this board's limit."""
    return round(watts * native_unit(device))


# --- per-vendor native values ------------------------------------------------------------------


class _Backend:
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


class _Nvml(_Backend):
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


class _Hwmon(_Backend):
    per_watt = 1_000_000
    step = 1_000_000  # amdgpu keeps whole watts

    def __init__(self, sysfs: Sysfs, hwmon: str, low: float | None, high: float) -> None:
        super().__init__(low, high)
        self.sysfs, self.hwmon = sysfs, hwmon

    def read(self) -> int:
        return read_cap_uw(self.sysfs, self.hwmon)

    def write(self, native: int) -> None:
        write_cap_uw(self.sysfs, self.hwmon, native)


def _backend(device: GpuDevice, nvml: NvmlAdapter | None, sysfs: Sysfs) -> _Backend:
    assert device.max_watts is not None  # only ranged boards get this far
    if device.backend is GpuBackendKind.NVML:
        if nvml is None:
            raise GpuNotSupported(f"GPU {device.index}: no NVML adapter")
        return _Nvml(nvml, device, device.min_watts, device.max_watts)
    if device.backend is GpuBackendKind.HWMON and device.hwmon is not None:
        return _Hwmon(sysfs, device.hwmon, device.min_watts, device.max_watts)
    raise GpuNotSupported(f"GPU {device.index}: no interface to set its power limit")


# --- outcomes ----------------------------------------------------------------------------------


_BLOCKED = {
    MonitorOnly.NOT_SUPPORTED: GpuCapOutcome.UNSUPPORTED,
    MonitorOnly.NO_RANGE: GpuCapOutcome.UNSUPPORTED,
    MonitorOnly.UNAVAILABLE: GpuCapOutcome.UNSUPPORTED,
    MonitorOnly.NO_PERMISSION: GpuCapOutcome.REFUSED,
    MonitorOnly.LOST: GpuCapOutcome.ERROR,
}


def _failed(base: GpuCapResult, exc: GpuError) -> GpuCapResult:
    rediscover = isinstance(exc, GpuLost | BoardChanged | BoardUnknown)
    return replace(base, outcome=_outcome_of(exc), detail=str(exc), rediscover=rediscover)


def _outcome_of(exc: GpuError) -> GpuCapOutcome:
    if isinstance(exc, GpuNotSupported):
        return GpuCapOutcome.UNSUPPORTED
    if isinstance(exc, GpuNoPermission):
        return GpuCapOutcome.REFUSED
    # GpuLost, GpuInvalidArgument (a clamped value refused), GpuUnavailable, anything else.
    return GpuCapOutcome.ERROR


def _asked_watts(intent: CapIntent, max_watts: float | None) -> float | None:
    """What the intent asked for before any clamping (the same precedence as effective_cap)."""
    if intent.watts is not None and math.isfinite(intent.watts) and intent.watts > 0:
        return float(intent.watts)
    pct = intent.pct_of_max
    if pct is not None and math.isfinite(pct) and pct > 0 and max_watts is not None:
        return max_watts * pct / 100.0
    return None


def native_unit(device: GpuDevice) -> int:
    """How many of the driver's units make a watt for this board's limit."""
    return _Hwmon.per_watt if device.backend is GpuBackendKind.HWMON else _Nvml.per_watt
