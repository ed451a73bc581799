"""The GPUs' power limits and clocks as the agent controls them, with the baseline kept.

:class:`GpuControl` takes the per-GPU cap and the governor preset of a NodeTwin spec and reports
each as one :class:`~joulie.agent.outcomes.ComponentOutcome` (combined from one setting per
board), and restores both. Caps go through the one-board operation of
:mod:`joulie.agent.gpu_cap`; presets through :class:`~joulie.agent.gpu_governor.GpuGovernor`.

Before the first write to a board's limit, the limit in force is recorded in the
:class:`~joulie.agent.baseline.Baseline` under ``gpu/<UUID>/power-limit-mw`` (NVML) or
``gpu/<PCI slot, else index>/power1_cap-uw`` (amdgpu); a limit that cannot be read is not
written, since it could not be put back, and nothing is written when the record cannot be
stored. An NVIDIA board whose UUID is unknown is not written at all (its own cap could otherwise
become its baseline once the UUID reads again), nor one whose index no longer holds the UUID
discovery saw. After a write the driver refused, the entry just recorded is dropped only if the
board still holds the recorded value. A limit another writer changed after the agent set it is
``contended`` and left alone until ``reassert``; one tolerance, :data:`DEFAULT_TOLERANCE_WATTS`
in the driver's unit, says what counts as the same limit throughout. Restoring writes the
recorded value through the same clamp and read-back, only onto the board of that UUID (also one
whose earlier write was refused), and drops the entry once the limit is back. A dry run computes
and reports, and writes and records nothing.

:meth:`GpuControl.needs_rediscovery` tells the caller whether the discovery it passed no longer
describes the boards (one lost, renumbered, or of unknown identity), as opposed to an error that
a fresh discovery would not change (a baseline kept for a board that is gone).
"""

from __future__ import annotations

from dataclasses import replace

import structlog

from joulie.agent.baseline import Baseline, BaselineError, BaselineValue
from joulie.agent.gpu_cap import (
    DEFAULT_TOLERANCE_WATTS,
    BeforeWrite,
    CapIntent,
    GpuCapOutcome,
    GpuCapResult,
    apply_gpu_cap,
    apply_gpu_caps,
    native_unit,
    read_limit,
    tolerance_native,
)
from joulie.agent.gpu_discovery import GpuBackendKind, GpuDevice, GpuDiscovery
from joulie.agent.gpu_governor import GpuGovernor
from joulie.agent.gpu_settings import (
    CAP_SETTINGS,
    POWER1_CAP_UW,
    POWER_LIMIT_MW,
    gpu_key,
    split_gpu_key,
)
from joulie.agent.nvml import NvmlAdapter
from joulie.agent.outcomes import ComponentOutcome, SettingOutcome
from joulie.agent.sysfs import Sysfs
from joulie.api.enums import ControlResult, GpuGovernorPreset
from joulie.core.caps import effective_cap
from joulie.core.control import WriteDecision, decide_write

__all__ = [
    # The one-board operation, re-exported: callers and tests name it from here.
    "DEFAULT_TOLERANCE_WATTS",
    "BeforeWrite",
    "CapIntent",
    "GpuCapOutcome",
    "GpuCapResult",
    "GpuControl",
    "apply_gpu_cap",
    "apply_gpu_caps",
]

log = structlog.get_logger("joulie.agent.gpu_control")


_RESULTS = {
    GpuCapOutcome.APPLIED: ControlResult.APPLIED,
    GpuCapOutcome.APPLIED_UNVERIFIED: ControlResult.APPLIED_UNVERIFIED,
    GpuCapOutcome.DRIFT: ControlResult.DRIFT,
    GpuCapOutcome.UNSUPPORTED: ControlResult.UNSUPPORTED,
    GpuCapOutcome.REFUSED: ControlResult.REFUSED,
    GpuCapOutcome.CONTENDED: ControlResult.CONTENDED,
    GpuCapOutcome.NOT_APPLIED: ControlResult.NOT_APPLIED,
    GpuCapOutcome.ERROR: ControlResult.ERROR,
}
_IN_FORCE = (GpuCapOutcome.APPLIED, GpuCapOutcome.APPLIED_UNVERIFIED)


class GpuControl:
    """The power limits and clocks of one node's GPUs, changed with ``baseline`` kept."""

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
        """Compute and report, write nothing and record nothing (SIMULATE_ONLY)."""
        self.governor = GpuGovernor(nvml, sysfs, baseline, dry_run=dry_run)
        self._last_cap: dict[str, int] = {}
        self._refused: set[int] = set()
        self._discovery: GpuDiscovery | None = None
        self._rediscover = False
        self._orphans: set[str] = set()
        """Cap entries already reported as kept for a board that is not on the node."""

    def refused(self) -> frozenset[int]:
        """Indices of the boards whose last cap write was refused for lack of permission; pass
        them to ``discover_gpus(refused=...)`` so that they are not written again (restoring
        their baseline is still tried)."""
        return frozenset(self._refused)

    def needs_rediscovery(self) -> bool:
        """Whether the discovery last passed in no longer describes the boards: a board was lost
        during a pass, an index held another board than discovery saw, or a board's UUID is
        unknown (a fresh read may find it). False for errors another discovery would not change,
        such as a baseline entry kept for a board that is gone. Cleared when another discovery
        is passed in."""
        return self._rediscover or self.governor.rediscover

    def _begin(self, discovery: GpuDiscovery) -> None:
        if discovery is not self._discovery:
            self._discovery = discovery
            self._rediscover = False
            self.governor.rediscover = False

    # -- caps ---------------------------------------------------------------------------------

    def apply_cap(
        self,
        discovery: GpuDiscovery,
        watts: float | None,
        pct_of_max: float | None,
        *,
        reassert: bool = False,
    ) -> ComponentOutcome:
        """Cap every board at the spec's per-GPU intent; no intent restores the baseline.

        ``reassert``: write again a limit another writer changed since the agent's write
        (otherwise ``contended`` and left alone).
        """
        self._begin(discovery)
        if effective_cap(watts, pct_of_max, None) is None:
            restored = self.restore_cap(discovery)
            return restored if restored.result is not None else ComponentOutcome(None, "no cap")
        if not discovery.present:
            return ComponentOutcome(ControlResult.UNSUPPORTED, "no GPUs on this node")
        intent = CapIntent(watts, pct_of_max)
        return ComponentOutcome.of([self._cap(d, intent, reassert) for d in discovery.devices])

    def _cap(self, device: GpuDevice, intent: CapIntent, reassert: bool) -> SettingOutcome:
        setting, per_watt = _unit(device)
        key = gpu_key(device.board_id, setting)
        tolerance = tolerance_native(device)
        recorded: list[bool] = []
        seen: list[int] = []

        def before_write(before: int | None, target: int) -> tuple[GpuCapOutcome, str] | None:
            if before is None:
                why = "the limit in force cannot be read, so it could not be put back"
                return GpuCapOutcome.NOT_APPLIED, f"not written: {why}"
            seen.append(before)
            last = self._last_cap.get(key)
            decision = decide_write(target, before, last, tolerance=tolerance, reassert=reassert)
            if decision is WriteDecision.CONTENDED:
                return GpuCapOutcome.CONTENDED, f"changed by another writer to {before}"
            if self.dry_run:
                return GpuCapOutcome.NOT_APPLIED, "dry run"
            try:
                recorded.append(self.baseline.record(key, before))
            except BaselineError as exc:
                return GpuCapOutcome.ERROR, f"not written: {exc}"
            return None

        result = apply_gpu_cap(
            device, intent, nvml=self.nvml, sysfs=self.sysfs, before_write=before_write
        )
        if result.rediscover:
            self._rediscover = True
        if result.written:
            self._last_cap[key] = _native(result.target_watts, per_watt) or 0
            self._refused.discard(device.index)
        elif recorded:  # the write was tried and refused
            if result.outcome is GpuCapOutcome.REFUSED:
                self._refused.add(device.index)
            # Drop the entry just recorded only while the board still holds that value: one the
            # write changed after all must still be put back.
            if recorded[0]:
                now = read_limit(device, nvml=self.nvml, sysfs=self.sysfs)
                if now is not None and abs(now - seen[0]) <= tolerance:
                    self.baseline.forget([key])
            log.warning("gpu.cap_write_failed", key=key, error=result.detail)
        outcome = _RESULTS[result.outcome]
        if result.outcome is GpuCapOutcome.APPLIED and not result.written:
            outcome = ControlResult.EQUIVALENT
        return _setting_outcome(key, outcome, result, per_watt)

    def restore_cap(self, discovery: GpuDiscovery) -> ComponentOutcome:
        """Put every board's limit the agent changed back to its baseline."""
        self._begin(discovery)
        keys = [k for k in self.baseline.entries() if _is_cap_key(k)]
        outcomes = self.baseline.restore_with(
            keys, lambda key, value: self._restore_cap(discovery, key, value), _is_back
        )
        return ComponentOutcome.of(list(outcomes.values()))

    def _restore_cap(
        self, discovery: GpuDiscovery, key: str, value: BaselineValue
    ) -> SettingOutcome:
        board, setting = split_gpu_key(key) or ("", "")
        device = discovery.board(board)
        if device is None or _unit(device)[0] != setting:
            # Never onto another board: the entry waits for its own.
            if device is None and any(not d.identity_known for d in discovery.devices):
                # It may be the board whose UUID could not be read: look again.
                self._rediscover = True
            return self._orphaned(key, value, board, setting, device)
        self._orphans.discard(key)
        per_watt = _unit(device)[1]
        try:
            native = int(value)
        except ValueError:
            return SettingOutcome(key, ControlResult.ERROR, str(value), detail="not a number")

        def before_write(before: int | None, target: int) -> tuple[GpuCapOutcome, str] | None:
            return (GpuCapOutcome.NOT_APPLIED, "dry run") if self.dry_run else None

        result = apply_gpu_cap(
            device,
            CapIntent(watts=native / per_watt),
            nvml=self.nvml,
            sysfs=self.sysfs,
            before_write=before_write,
            restoring=True,
        )
        if result.rediscover:
            self._rediscover = True
        if result.outcome is GpuCapOutcome.REFUSED and not result.written:
            self._refused.add(device.index)
        outcome = _RESULTS[result.outcome]
        if result.outcome in _IN_FORCE:
            if _native(result.target_watts, per_watt) == native:
                outcome = ControlResult.RESTORED
                self._last_cap.pop(key, None)
                self._refused.discard(device.index)
            else:  # the range no longer holds the recorded value: clamped, not back
                outcome = ControlResult.DRIFT
                result = replace(result, detail=f"{native} is outside the board's range now")
        if outcome is not ControlResult.RESTORED:
            log.warning("gpu.cap_not_restored", key=key, result=outcome.value, error=result.detail)
        return _setting_outcome(key, outcome, result, per_watt, target=str(native))

    def _orphaned(
        self,
        key: str,
        value: BaselineValue,
        board: str,
        setting: str,
        device: GpuDevice | None,
    ) -> SettingOutcome:
        """An entry whose board is not here: the same error and text at every pass, logged
        once, and no reason to discover again."""
        why = f"GPU {board} is not on this node" if device is None else f"it has no {setting}"
        detail = f"{why}; its baseline is kept"
        if key not in self._orphans:
            self._orphans.add(key)
            log.warning("gpu.baseline_orphaned", key=key, value=value, reason=why)
        return SettingOutcome(key, ControlResult.ERROR, str(value), detail=detail)

    # -- governor presets ---------------------------------------------------------------------

    def apply_preset(
        self,
        discovery: GpuDiscovery,
        preset: GpuGovernorPreset | None,
        ceiling_pct: float | None,
        *,
        enabled: bool,
        reassert: bool = False,
    ) -> ComponentOutcome:
        """Bring every board's clocks to ``preset`` (``ceiling_pct``: the ``efficient``
        ceiling, default 80 % of the maximum graphics clock).

        ``enabled`` is GOVERNOR_WRITES: when off, anything the agent changed earlier is restored
        and the result is ``disabled``. No preset restores the baseline.
        """
        self._begin(discovery)
        if not enabled:
            restored = self.restore_preset(discovery)
            if restored.result is not None:
                return restored
            return ComponentOutcome(ControlResult.DISABLED, "governor writes are off")
        if preset is None:
            restored = self.restore_preset(discovery)
            return restored if restored.result is not None else ComponentOutcome(None, "no preset")
        if not discovery.present:
            return ComponentOutcome(ControlResult.UNSUPPORTED, "no GPUs on this node")
        return ComponentOutcome.of(
            self.governor.apply(discovery, preset, ceiling_pct, reassert=reassert)
        )

    def restore_preset(self, discovery: GpuDiscovery) -> ComponentOutcome:
        """Put every board's clock setting the agent changed back to its baseline."""
        self._begin(discovery)
        return ComponentOutcome.of(self.governor.restore(discovery))

    def restore_all(self, discovery: GpuDiscovery) -> tuple[ComponentOutcome, ComponentOutcome]:
        """Restore the limits, then the clocks."""
        return self.restore_cap(discovery), self.restore_preset(discovery)


def _is_back(outcome: SettingOutcome) -> bool:
    return outcome.result is ControlResult.RESTORED


def _unit(device: GpuDevice) -> tuple[str, int]:
    """The baseline setting name of a board's limit and its unit per watt."""
    setting = POWER1_CAP_UW if device.backend is GpuBackendKind.HWMON else POWER_LIMIT_MW
    return setting, native_unit(device)


def _native(watts: float | None, per_watt: int) -> int | None:
    return None if watts is None else round(watts * per_watt)


def _is_cap_key(key: str) -> bool:
    split = split_gpu_key(key)
    return split is not None and split[1] in CAP_SETTINGS


def _setting_outcome(
    key: str,
    result: ControlResult,
    cap: GpuCapResult,
    per_watt: int,
    *,
    target: str | None = None,
) -> SettingOutcome:
    def text(watts: float | None) -> str | None:
        native = _native(watts, per_watt)
        return None if native is None else str(native)

    return SettingOutcome(
        key,
        result,
        target if target is not None else text(cap.target_watts),
        text(cap.before_watts),
        text(cap.read_back_watts) if cap.written else None,
        cap.detail,
    )
