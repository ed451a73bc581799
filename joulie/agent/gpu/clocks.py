"""GPU governor presets on a node's boards, with the baseline kept and put back.

A preset becomes one setting per board (:mod:`joulie.agent.gpu.settings`): NVML's locked
graphics clocks, or amdgpu's ``power_dpm_force_performance_level``. Each is written and restored
through the agent's one guarded write (:mod:`joulie.agent.guarded_write`), the way the CPU's files
are. One board's failure never stops the others.

NVML has no query for locked clocks on most drivers, so the lock in force before the agent's
first write cannot be read. It is recorded as ``unlocked``: what every reboot and driver reload
leaves, and what restoring (a reset) puts back. A lock an operator set by hand before the agent
started cannot be seen and is reset on restore; that is the price of NVML offering no reading. A
lock the agent writes is reported ``applied-unverified``, and is not written again while this
process knows it wrote that same lock. An adapter that can read locks back
(:class:`~joulie.agent.gpu.nvml.LockedClocksReader`) is treated like a readable file.

Before anything is read or written through NVML, the board's index is confirmed to hold the UUID
discovery saw (:func:`~joulie.agent.gpu.discovery.check_identity`); a board whose UUID is unknown
is not touched. After a write the driver refused, the entry just recorded is dropped only when the
setting reads as before (or, for a lock NVML cannot read, reads nothing, as before).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import structlog

from joulie.agent.baseline import Baseline
from joulie.agent.gpu.discovery import (
    GpuDevice,
    GpuDiscovery,
    MonitorOnly,
    check_identity,
)
from joulie.agent.gpu.drm import read_performance_level, write_performance_level
from joulie.agent.gpu.nvml import (
    GpuError,
    GpuInvalidArgument,
    GpuNotSupported,
    GpuUnavailable,
    LockedClocksReader,
    NvmlAdapter,
)
from joulie.agent.gpu.power_limit import gpu_failure, needs_rediscovery
from joulie.agent.gpu.settings import (
    CLOCK_SETTINGS,
    LOCKED_CLOCKS_MHZ,
    PERFORMANCE_LEVEL,
    UNLOCKED,
    ClockMechanism,
    gpu_key,
    parse_lock,
    preset_target,
    split_gpu_key,
    why_not_expressible,
)
from joulie.agent.guarded_write import GuardedWriter, Setting
from joulie.agent.outcomes import SettingOutcome
from joulie.agent.sysfs import Sysfs
from joulie.api.enums import ControlResult, GpuGovernorPreset

__all__ = ["UNREADABLE_LOCK", "GpuGovernor"]

_T = TypeVar("_T")

log = structlog.get_logger("joulie.agent.gpu.clocks")

UNREADABLE_LOCK = "the driver cannot read it back"
"""The detail of an NVML lock in force that cannot be read, the same at the write and after it,
so that a steady preset reports the same text at every pass."""


class GpuGovernor:
    """The clock settings of a node's GPUs, changed with ``baseline`` kept."""

    def __init__(
        self,
        nvml: NvmlAdapter | None,
        sysfs: Sysfs,
        baseline: Baseline,
        *,
        dry_run: bool = False,
    ) -> None:
        self.nvml = nvml
        self.sysfs = sysfs
        self.baseline = baseline
        self.dry_run = dry_run
        self.writer = GuardedWriter(baseline, dry_run=dry_run, name="gpu_clocks")
        self._orphans: set[str] = set()
        """Entries already reported as kept for a board that is not on the node."""
        self.rediscover = False
        """A board was found lost, renumbered or of unknown identity (see
        :meth:`joulie.agent.gpu.control.GpuControl.needs_rediscovery`, which clears it)."""

    def _noted(self, exc: GpuError) -> None:
        if needs_rediscovery(exc):
            self.rediscover = True

    def _guarded(self, call: Callable[[], _T]) -> _T:
        try:
            return call()
        except GpuError as exc:
            self._noted(exc)
            raise gpu_failure(exc) from None

    # -- applying -----------------------------------------------------------------------------

    def apply(
        self,
        discovery: GpuDiscovery,
        preset: GpuGovernorPreset,
        ceiling_pct: float | None,
        *,
        reassert: bool = False,
    ) -> list[SettingOutcome]:
        """Bring every board to ``preset`` (``ceiling_pct`` only counts for ``efficient``)."""
        outcomes = []
        for device in discovery.devices:
            board = gpu_key(device.board_id, "clocks")
            if device.monitor_only is MonitorOnly.LOST:
                outcomes.append(SettingOutcome(board, ControlResult.ERROR, detail="board lost"))
                continue
            target = preset_target(device.clocks, preset, ceiling_pct)
            setting = self._setting(device)
            if target is None or setting is None:
                why = why_not_expressible(device.clocks, preset)
                outcomes.append(SettingOutcome(board, ControlResult.UNSUPPORTED, detail=why))
                continue
            outcomes.append(self.writer.apply(setting, target.value, reassert=reassert))
        return outcomes

    def _setting(self, device: GpuDevice) -> Setting | None:
        mechanism = device.clocks.mechanism
        if mechanism is ClockMechanism.NVML:
            index = device.index
            return Setting(
                gpu_key(device.board_id, LOCKED_CLOCKS_MHZ),
                lambda: self._guarded(lambda: self._read_lock(index)),
                lambda value: self._guarded(lambda: self._write_lock(index, value)),
                check=lambda: self._guarded(lambda: check_identity(self._adapter(index), device)),
                unread_value=UNLOCKED,
                unread_detail=UNREADABLE_LOCK,
            )
        path = device.performance_level_file
        if mechanism is ClockMechanism.SYSFS and path is not None:
            return Setting(
                gpu_key(device.board_id, PERFORMANCE_LEVEL),
                lambda: self._guarded(lambda: read_performance_level(self.sysfs, path)),
                lambda value: self._guarded(
                    lambda: write_performance_level(self.sysfs, path, value)
                ),
            )
        return None

    def _adapter(self, index: int) -> NvmlAdapter:
        if self.nvml is None:
            raise GpuUnavailable(f"GPU {index}: no NVML adapter")
        return self.nvml

    def _read_lock(self, index: int) -> str | None:
        nvml = self._adapter(index)
        if not isinstance(nvml, LockedClocksReader):
            return None
        try:
            lock = nvml.locked_gpu_clocks(index)
        except GpuNotSupported:
            return None
        return UNLOCKED if lock is None else f"{lock[0]}-{lock[1]}"

    def _write_lock(self, index: int, value: str) -> None:
        nvml = self._adapter(index)
        try:
            pair = parse_lock(value)
        except ValueError as exc:  # a baseline file edited by hand
            raise GpuInvalidArgument(f"GPU {index}: {exc}") from None
        if pair is None:
            nvml.reset_locked_gpu_clocks(index)
        else:
            nvml.set_locked_gpu_clocks(index, *pair)

    # -- restoring ----------------------------------------------------------------------------

    def restore(self, discovery: GpuDiscovery) -> list[SettingOutcome]:
        """Put every clock setting the agent changed back on the board it was read from."""
        keys = [k for k in self.baseline.entries() if _is_clock_key(k)]
        outcomes = self.baseline.restore_with(
            keys,
            lambda key, value: self._restore_one(discovery, key, str(value)),
            lambda outcome: outcome.result is ControlResult.RESTORED,
        )
        return list(outcomes.values())

    def _restore_one(self, discovery: GpuDiscovery, key: str, value: str) -> SettingOutcome:
        board = (split_gpu_key(key) or ("", ""))[0]
        device = discovery.board(board)
        setting = self._setting(device) if device is not None else None
        if device is None or setting is None or setting.key != key:
            # Never onto another board: the entry waits for its own. The same error and text at
            # every pass, logged once; another discovery would not change it, unless a board
            # whose UUID is unknown might be this one.
            why = "its clock interface is gone"
            if device is None:
                why = f"GPU {board} is not on this node"
                if any(not d.identity_known for d in discovery.devices):
                    self.rediscover = True
            if key not in self._orphans:
                self._orphans.add(key)
                log.warning("gpu.baseline_orphaned", key=key, value=value, reason=why)
            detail = f"{why}; its baseline is kept"
            return SettingOutcome(key, ControlResult.ERROR, value, detail=detail)
        self._orphans.discard(key)
        return self.writer.restore(setting, value)


def _is_clock_key(key: str) -> bool:
    split = split_gpu_key(key)
    return split is not None and split[1] in CLOCK_SETTINGS
