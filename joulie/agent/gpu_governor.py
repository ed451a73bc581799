"""GPU governor presets on a node's boards, with the baseline kept and put back.

A preset becomes one setting per board (:mod:`joulie.agent.gpu_settings`): NVML's locked
graphics clocks, or amdgpu's ``power_dpm_force_performance_level``. Each goes the way the CPU's
files go (:mod:`joulie.agent.cpu_control`): read what is in force; write nothing when it holds
the target, or when another writer changed the agent's own value since (contended); record the
value in force in the :class:`~joulie.agent.baseline.Baseline` before the first write, and do
not write when it cannot be stored; write; read back. One board's failure never stops the
others.

NVML has no query for locked clocks on most drivers, so the lock in force before the agent's
first write cannot be read. It is recorded as ``unlocked``: what every reboot and driver reload
leaves, and what restoring (a reset) puts back. A lock an operator set by hand before the agent
started cannot be seen and is reset on restore; that is the price of NVML offering no reading. A
lock the agent writes is reported ``applied-unverified``, and is not written again while this
process knows it wrote that same lock. An adapter that can read locks back
(:class:`~joulie.agent.nvml.LockedClocksReader`) is treated like a readable file.

Before anything is read or written through NVML, the board's index is confirmed to hold the UUID
discovery saw (:func:`~joulie.agent.gpu_discovery.check_identity`); a board whose UUID is unknown
is not touched. After a write the driver refused, the entry just recorded is dropped only when the
setting reads as before (or, for a lock NVML cannot read, reads nothing, as before).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import replace as _with

import structlog

from joulie.agent.amd_gpu import read_performance_level, write_performance_level
from joulie.agent.baseline import Baseline, BaselineError
from joulie.agent.gpu_discovery import (
    BoardChanged,
    BoardUnknown,
    GpuDevice,
    GpuDiscovery,
    MonitorOnly,
    check_identity,
)
from joulie.agent.gpu_settings import (
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
from joulie.agent.nvml import (
    GpuError,
    GpuInvalidArgument,
    GpuLost,
    GpuNoPermission,
    GpuNotSupported,
    GpuUnavailable,
    LockedClocksReader,
    NvmlAdapter,
)
from joulie.agent.outcomes import SettingOutcome
from joulie.agent.sysfs import Sysfs
from joulie.api.enums import ControlResult, GpuGovernorPreset
from joulie.core.control import ControlFacts, Failure, WriteDecision, control_result, decide_write

__all__ = ["GpuGovernor", "gpu_result"]

log = structlog.get_logger("joulie.agent.gpu_governor")

UNREADABLE_LOCK = "the driver cannot read it back"
"""The detail of an NVML lock in force that cannot be read, the same at the write and after it,
so that a steady preset reports the same text at every pass."""


def gpu_result(exc: GpuError, facts: ControlFacts | None = None) -> ControlResult:
    """The result of an attempt a GPU interface refused with ``exc``."""
    if isinstance(exc, GpuNotSupported):
        return ControlResult.UNSUPPORTED
    if isinstance(exc, GpuNoPermission):
        failure = Failure.PERMISSION
    elif isinstance(exc, GpuInvalidArgument):
        failure = Failure.REJECTED
    else:  # lost, unavailable, anything else
        failure = Failure.OTHER
    return control_result(_with(facts or ControlFacts(), failure=failure))


@dataclass(frozen=True)
class _Setting:
    """One board's clock setting: how to read it (None: it cannot be read) and write it."""

    key: str
    read: Callable[[], str | None]
    write: Callable[[str], None]
    check: Callable[[], None] = lambda: None
    """Raises when the interface no longer reaches the board discovery found (NVML: index and
    UUID); called before the setting is read."""


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
        self._last_written: dict[str, str] = {}
        self._orphans: set[str] = set()
        """Entries already reported as kept for a board that is not on the node."""
        self.rediscover = False
        """A board was found lost, renumbered or of unknown identity (see
        :meth:`joulie.agent.gpu_control.GpuControl.needs_rediscovery`, which clears it)."""

    def _failed(self, exc: GpuError) -> None:
        if isinstance(exc, GpuLost | BoardChanged | BoardUnknown):
            self.rediscover = True

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
            outcomes.append(self._set(setting, target.value, reassert))
        return outcomes

    def _setting(self, device: GpuDevice) -> _Setting | None:
        mechanism = device.clocks.mechanism
        if mechanism is ClockMechanism.NVML:
            index = device.index
            return _Setting(
                gpu_key(device.board_id, LOCKED_CLOCKS_MHZ),
                lambda: self._read_lock(index),
                lambda value: self._write_lock(index, value),
                lambda: check_identity(self._adapter(index), device),
            )
        path = device.performance_level_file
        if mechanism is ClockMechanism.SYSFS and path is not None:
            return _Setting(
                gpu_key(device.board_id, PERFORMANCE_LEVEL),
                lambda: read_performance_level(self.sysfs, path),
                lambda value: write_performance_level(self.sysfs, path, value),
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

    def _set(self, setting: _Setting, target: str, reassert: bool) -> SettingOutcome:
        key = setting.key
        try:
            setting.check()
            observed = setting.read()
        except GpuError as exc:
            self._failed(exc)
            return SettingOutcome(key, gpu_result(exc), target, detail=str(exc))
        last = self._last_written.get(key)
        facts = ControlFacts(
            target=target,
            observed=observed,
            last_written=last,
            reassert=reassert,
            dry_run=self.dry_run,
        )
        if observed is None:
            # No reading (NVML locks): what is in force is what the agent last wrote, else the
            # recorded baseline's "unlocked" when the agent never wrote it, else unknown.
            assumed = last
            if assumed is None and key not in self.baseline:
                assumed = UNLOCKED
            if assumed == target:
                if last is not None:  # written earlier by the agent: as the write reported it
                    result = ControlResult.APPLIED_UNVERIFIED
                    return SettingOutcome(key, result, target, detail=UNREADABLE_LOCK)
                return SettingOutcome(
                    key, ControlResult.EQUIVALENT, target, detail="no lock of the agent's in force"
                )
            decision = WriteDecision.WRITE
        else:
            decision = decide_write(target, observed, last, reassert=reassert)
        if decision is not WriteDecision.WRITE or self.dry_run:
            detail = {
                WriteDecision.CONTENDED: f"changed by another writer to {observed}",
                WriteDecision.EQUIVALENT: "",
            }.get(decision, "dry run")
            return SettingOutcome(key, control_result(facts), target, observed, detail=detail)
        try:
            recorded = self.baseline.record(key, observed if observed is not None else UNLOCKED)
        except BaselineError as exc:
            result = control_result(_with(facts, failure=Failure.OTHER))
            return SettingOutcome(key, result, target, observed, detail=f"not written: {exc}")
        try:
            setting.write(target)
        except GpuError as exc:
            self._failed(exc)
            # Refused: forget the entry just recorded only while the setting still reads as it
            # did, so that a value the write changed after all is still put back.
            if recorded and self._unchanged(setting, observed):
                self.baseline.forget([key])
            log.warning("gpu.clock_write_failed", key=key, value=target, error=str(exc))
            return SettingOutcome(key, gpu_result(exc, facts), target, observed, detail=str(exc))
        self._last_written[key] = target
        read_back = self._try_read(setting)
        result = control_result(_with(facts, written=True, read_back=read_back))
        detail = "" if read_back is not None else UNREADABLE_LOCK
        if result is ControlResult.DRIFT:
            detail = f"wrote {target}, reads {read_back}"
            log.warning("gpu.clock_drift", key=key, wrote=target, reads=read_back)
        return SettingOutcome(key, result, target, observed, read_back, detail)

    @staticmethod
    def _unchanged(setting: _Setting, observed: str | None) -> bool:
        """Whether a setting reads as it did before a refused write: the same value, or, for one
        that could not be read before (NVML locks), still nothing readable."""
        try:
            return setting.read() == observed
        except GpuError:
            return False

    @staticmethod
    def _try_read(setting: _Setting) -> str | None:
        try:
            return setting.read()
        except GpuError:
            return None

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
        facts = ControlFacts(restoring=True, target=value, dry_run=self.dry_run)
        try:
            setting.check()
            observed = setting.read()
        except GpuError as exc:
            self._failed(exc)
            return SettingOutcome(key, gpu_result(exc, facts), value, detail=str(exc))
        if observed is None and self._last_written.get(key) == value:
            observed = value  # the agent's own last write was the baseline
        facts = _with(facts, observed=observed)
        if observed == value or self.dry_run:
            if observed == value:
                self._last_written.pop(key, None)
            return SettingOutcome(key, control_result(facts), value, observed)
        try:
            setting.write(value)
        except GpuError as exc:
            self._failed(exc)
            log.warning("gpu.clock_not_restored", key=key, value=value, error=str(exc))
            return SettingOutcome(key, gpu_result(exc, facts), value, observed, detail=str(exc))
        self._last_written.pop(key, None)
        read_back = self._try_read(setting)
        result = control_result(_with(facts, written=True, read_back=read_back))
        detail = f"wrote {value}, reads {read_back}" if result is ControlResult.DRIFT else ""
        return SettingOutcome(key, result, value, observed, read_back, detail)


def _is_clock_key(key: str) -> bool:
    split = split_gpu_key(key)
    return split is not None and split[1] in CLOCK_SETTINGS
