"""GPU governor presets on a node's boards, with the baseline kept and put back.

A preset becomes one setting per board (:mod:`joulie.agent.gpu.settings`), reached through the
board's backend (:meth:`joulie.agent.gpu.backend.GpuBackend.clocks`: NVML's locked graphics
clocks, amdgpu's ``power_dpm_force_performance_level``). Each is written and restored through
the agent's one guarded write (:mod:`joulie.agent.guarded_write`), the way the CPU's files are.
One board's failure never stops the others.

A setting the interface cannot read (NVML locks on most drivers) is taken to hold what the
backend states (``unlocked``: what every reboot and driver reload leaves, and what restoring
puts back). A lock an operator set by hand before the agent started cannot be seen and is reset
on restore; that is the price of NVML offering no reading. A lock the agent writes is reported
``applied-unverified``, and is not written again while this process knows it wrote that same
lock. The backend confirms the board's identity before every read that leads to a write.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import structlog

from joulie.agent.baseline import Baseline
from joulie.agent.gpu.backends import GpuBackends
from joulie.agent.gpu.device import GpuDevice, GpuDiscovery, MonitorOnly
from joulie.agent.gpu.errors import GpuError, GpuNotSupported, needs_rediscovery, translated
from joulie.agent.gpu.settings import (
    gpu_key,
    preset_target,
    split_gpu_key,
    why_not_expressible,
)
from joulie.agent.guarded_write import GuardedWriter, Setting
from joulie.agent.outcomes import SettingOutcome
from joulie.api.enums import ControlResult, GpuGovernorPreset

__all__ = ["UNREADABLE_LOCK", "GpuGovernor"]

_T = TypeVar("_T")

log = structlog.get_logger("joulie.agent.gpu.clocks")

UNREADABLE_LOCK = "the driver cannot read it back"
"""The detail of an NVML lock in force that cannot be read, the same at the write and after it,
so that a steady preset reports the same text at every pass."""


class GpuGovernor:
    """The clock settings of a node's GPUs, changed with ``baseline`` kept."""

    def __init__(self, backends: GpuBackends, baseline: Baseline, *, dry_run: bool = False) -> None:
        self.backends = backends
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
        return translated(call, self._noted)

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
        try:
            access = self.backends.of_device(device).clocks(device)
        except GpuNotSupported:
            return None
        if access is None:
            return None
        return Setting(
            gpu_key(device.board_id, access.setting),
            lambda: self._guarded(access.read),
            lambda value: self._guarded(lambda: access.write(value)),
            check=lambda: self._guarded(access.check),
            unread_value=access.unread_value,
            unread_detail=UNREADABLE_LOCK,
        )

    # -- restoring ----------------------------------------------------------------------------

    def restore(self, discovery: GpuDiscovery) -> list[SettingOutcome]:
        """Put every clock setting the agent changed back on the board it was read from."""
        keys = [k for k in self.baseline.entries() if self._is_clock_key(k)]
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
        outcome = self.writer.restore(setting, value)
        if outcome.result is not ControlResult.RESTORED:
            log.warning(
                "gpu.clock_not_restored", key=key, result=outcome.result.value, error=outcome.detail
            )
        return outcome

    def _is_clock_key(self, key: str) -> bool:
        split = split_gpu_key(key)
        return split is not None and split[1] in self.backends.clock_settings()
