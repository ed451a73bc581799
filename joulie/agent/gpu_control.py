"""The GPUs' power limits and clocks as the agent controls them, with the baseline kept.

:class:`GpuControl` takes the per-GPU cap and the governor preset of a NodeTwin spec and reports
each as one :class:`~joulie.agent.outcomes.ComponentOutcome` (combined from one setting per
board), and restores both. Caps go through the one-board operation of
:mod:`joulie.agent.gpu_cap`; presets through :class:`~joulie.agent.gpu_governor.GpuGovernor`.

Before the first write to a board's limit, the limit in force is recorded in the
:class:`~joulie.agent.baseline.Baseline` under ``gpu/<UUID, else index>/power-limit-mw``
(NVML) or ``gpu/<PCI slot>/power1_cap-uw`` (amdgpu); a limit that cannot be read is not
written, since it could not be put back, and nothing is written when the record cannot be
stored. A limit another writer changed after the agent set it is ``contended`` and left alone
until ``reassert``. Restoring writes the recorded value through the same clamp and read-back,
only onto the board of that UUID, and drops the entry once the limit is back. A dry run
computes and reports, and writes and records nothing.
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


class _NotBack(Exception):
    """A restored limit is not at its baseline."""


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

    def refused(self) -> frozenset[int]:
        """Indices of the boards whose last cap write was refused for lack of permission; pass
        them to ``discover_gpus(refused=...)`` so that they are not written again."""
        return frozenset(self._refused)

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
        recorded: list[bool] = []

        def before_write(before: int | None, target: int) -> tuple[GpuCapOutcome, str] | None:
            if before is None:
                why = "the limit in force cannot be read, so it could not be put back"
                return GpuCapOutcome.NOT_APPLIED, f"not written: {why}"
            last = self._last_cap.get(key)
            if decide_write(target, before, last, reassert=reassert) is WriteDecision.CONTENDED:
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
        if result.written:
            self._last_cap[key] = _native(result.target_watts, per_watt) or 0
            self._refused.discard(device.index)
        elif recorded:  # the write was tried and refused: the board holds the recorded value
            if recorded[0]:
                self.baseline.forget([key])
            if result.outcome is GpuCapOutcome.REFUSED:
                self._refused.add(device.index)
            log.warning("gpu.cap_write_failed", key=key, error=result.detail)
        outcome = _RESULTS[result.outcome]
        if result.outcome is GpuCapOutcome.APPLIED and not result.written:
            outcome = ControlResult.EQUIVALENT
        return _setting_outcome(key, outcome, result, per_watt)

    def restore_cap(self, discovery: GpuDiscovery) -> ComponentOutcome:
        """Put every board's limit the agent changed back to its baseline."""
        keys = [k for k in self.baseline.entries() if _is_cap_key(k)]
        outcomes: dict[str, SettingOutcome] = {}

        def write(key: str, value: BaselineValue) -> None:
            outcome = self._restore_cap(discovery, key, value)
            outcomes[key] = outcome
            if outcome.result is not ControlResult.RESTORED:
                raise _NotBack(outcome.detail or outcome.result.value)

        self.baseline.restore(keys, write)
        return ComponentOutcome.of([outcomes[k] for k in keys if k in outcomes])

    def _restore_cap(
        self, discovery: GpuDiscovery, key: str, value: BaselineValue
    ) -> SettingOutcome:
        board, setting = split_gpu_key(key) or ("", "")
        device = discovery.board(board)
        if device is None or _unit(device)[0] != setting:
            # Never onto another board: the entry waits for its own.
            why = f"GPU {board} is not on this node" if device is None else f"it has no {setting}"
            detail = f"{why}; its baseline is kept"
            return SettingOutcome(key, ControlResult.ERROR, str(value), detail=detail)
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
        )
        outcome = _RESULTS[result.outcome]
        if result.outcome in _IN_FORCE:
            if _native(result.target_watts, per_watt) == native:
                outcome = ControlResult.RESTORED
                self._last_cap.pop(key, None)
            else:  # the range no longer holds the recorded value: clamped, not back
                outcome = ControlResult.DRIFT
                result = replace(result, detail=f"{native} is outside the board's range now")
        return _setting_outcome(key, outcome, result, per_watt, target=str(native))

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
        return ComponentOutcome.of(self.governor.restore(discovery))

    def restore_all(self, discovery: GpuDiscovery) -> tuple[ComponentOutcome, ComponentOutcome]:
        """Restore the limits, then the clocks."""
        return self.restore_cap(discovery), self.restore_preset(discovery)


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
