"""The GPUs' power limits and clocks as the agent controls them, with the baseline kept.

:class:`GpuControl` takes the per-GPU cap and the governor preset of a NodeTwin spec and reports
each as one :class:`~joulie.agent.outcomes.ComponentOutcome` (combined from one setting per
board), and restores both. Caps are set board by board (:meth:`GpuControl.apply_caps`, one cap
per board, as the class of each board's pod asks); the node-wide cap is the case where every
board is given the same intent. A board's limit (:mod:`joulie.agent.gpu.power_limit`) and its clocks
(:class:`~joulie.agent.gpu.clocks.GpuGovernor`) are written and restored through the agent's one
guarded write (:mod:`joulie.agent.guarded_write`).

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

from collections.abc import Sequence
from dataclasses import replace

import structlog

from joulie.agent.baseline import Baseline, BaselineValue
from joulie.agent.gpu.backend import PowerLimit
from joulie.agent.gpu.backends import GpuBackends
from joulie.agent.gpu.clocks import GpuGovernor
from joulie.agent.gpu.device import GpuDevice, GpuDiscovery
from joulie.agent.gpu.errors import GpuError, GpuNoPermission, gpu_failure, needs_rediscovery
from joulie.agent.gpu.power_limit import DEFAULT_TOLERANCE_WATTS, blocked, cap_setting
from joulie.agent.gpu.settings import gpu_key, split_gpu_key
from joulie.agent.guarded_write import GuardedWriter, Setting
from joulie.agent.outcomes import ComponentOutcome, SettingOutcome
from joulie.api.enums import ControlResult, GpuGovernorPreset
from joulie.core.caps import EffectiveCap, effective_cap

__all__ = ["DEFAULT_TOLERANCE_WATTS", "GpuControl"]

log = structlog.get_logger("joulie.agent.gpu.control")


class GpuControl:
    """The power limits and clocks of one node's GPUs, changed with ``baseline`` kept."""

    def __init__(self, backends: GpuBackends, baseline: Baseline, *, dry_run: bool = False) -> None:
        self.backends = backends
        self.baseline = baseline
        self.dry_run = dry_run
        """Compute and report, write nothing and record nothing (SIMULATE_ONLY)."""
        self.governor = GpuGovernor(backends, baseline, dry_run=dry_run)
        self.writer = GuardedWriter(baseline, dry_run=dry_run, name="gpu_cap")
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

        The node-wide form of :meth:`apply_caps`: one intent, resolved against each board's
        own range. ``reassert``: write again a limit another writer changed since the agent's
        write (otherwise ``contended`` and left alone).
        """
        self._begin(discovery)
        if effective_cap(watts, pct_of_max, None) is None:
            restored = self.restore_cap(discovery)
            return restored if restored.result is not None else ComponentOutcome(None, "no cap")
        caps = [
            effective_cap(watts, pct_of_max, d.max_watts, d.min_watts) for d in discovery.devices
        ]
        return self.apply_caps(discovery, caps, reassert=reassert)

    def apply_caps(
        self,
        discovery: GpuDiscovery,
        caps: Sequence[EffectiveCap | None],
        *,
        notes: Sequence[str] | None = None,
        reassert: bool = False,
    ) -> ComponentOutcome:
        """Cap each board at its own cap (``caps`` in discovery order); a board whose cap is
        None is put back to its baseline (one the agent never changed is reported
        ``equivalent``). ``notes``: per board, why that cap, added to its outcome's detail.
        """
        self._begin(discovery)
        if len(caps) != discovery.count or (notes is not None and len(notes) != len(caps)):
            raise ValueError(f"{len(caps)} caps for {discovery.count} boards")
        if not discovery.present:
            return ComponentOutcome(ControlResult.UNSUPPORTED, "no GPUs on this node")
        settings = []
        for i, (device, cap) in enumerate(zip(discovery.devices, caps, strict=True)):
            if cap is None:
                outcome = self._uncap(discovery, device)
            else:
                outcome = self._cap(device, cap, reassert)
            note = notes[i] if notes is not None else ""
            if note:
                outcome = replace(outcome, detail="; ".join(filter(None, (outcome.detail, note))))
            settings.append(outcome)
        return ComponentOutcome.of(settings)

    def _cap(self, device: GpuDevice, cap: EffectiveCap, reassert: bool) -> SettingOutcome:
        key = gpu_key(device.board_id, self._limit_setting(device))
        stop = blocked(device)
        if stop is not None:
            # Discovery found the board uncappable: it is not touched, so a write the board or
            # the kernel has refused is not retried at every reconcile.
            return SettingOutcome(key, stop[0], detail=stop[1])
        reached = self._limit(device, key)
        if isinstance(reached, SettingOutcome):
            return reached
        limit, setting = reached
        if cap.watts is None:
            return SettingOutcome(key, ControlResult.NOT_APPLIED, detail="no usable cap")
        outcome = self.writer.apply(setting, str(limit.clamp(cap.watts)), reassert=reassert)
        if outcome.result in _WRITTEN:
            self._refused.discard(device.index)
        return outcome

    def _uncap(self, discovery: GpuDiscovery, device: GpuDevice) -> SettingOutcome:
        """One board back at its own limit: its baseline restored, if the agent changed it."""
        key = gpu_key(device.board_id, self._limit_setting(device))
        if not device.identity_known or key not in self.baseline:
            return SettingOutcome(key, ControlResult.EQUIVALENT, detail="its own limit")
        outcomes = self.baseline.restore_with(
            [key], lambda k, value: self._restore_cap(discovery, k, value), _is_back
        )
        return outcomes[key]

    def _limit(self, device: GpuDevice, key: str) -> tuple[PowerLimit, Setting] | SettingOutcome:
        """The board's limit and its setting; an outcome when nothing here can set it."""
        try:
            limit = self.backends.of_device(device).power_limit(device)
        except GpuError as exc:
            failed = gpu_failure(exc)
            result = ControlResult.UNSUPPORTED if failed.failure is None else ControlResult.ERROR
            return SettingOutcome(key, result, detail=failed.detail)
        return limit, cap_setting(key, limit, lambda exc: self._noted(exc, device.index))

    def _limit_setting(self, device: GpuDevice) -> str:
        """The baseline setting name of the board's limit (its backend's)."""
        try:
            setting = self.backends.of_device(device).limit_setting
        except GpuError:
            setting = None
        return setting or "power-limit"

    def _is_cap_key(self, key: str) -> bool:
        split = split_gpu_key(key)
        return split is not None and split[1] in self.backends.limit_settings()

    def _noted(self, exc: GpuError, index: int) -> None:
        if needs_rediscovery(exc):
            self._rediscover = True
        if isinstance(exc, GpuNoPermission):
            # Told to discovery (refused()), so that the board is not written again.
            self._refused.add(index)

    def restore_cap(self, discovery: GpuDiscovery) -> ComponentOutcome:
        """Put every board's limit the agent changed back to its baseline."""
        self._begin(discovery)
        keys = [k for k in self.baseline.entries() if self._is_cap_key(k)]
        outcomes = self.baseline.restore_with(
            keys, lambda key, value: self._restore_cap(discovery, key, value), _is_back
        )
        return ComponentOutcome.of(list(outcomes.values()))

    def _restore_cap(
        self, discovery: GpuDiscovery, key: str, value: BaselineValue
    ) -> SettingOutcome:
        board, setting_name = split_gpu_key(key) or ("", "")
        device = discovery.board(board)
        if device is None or self._limit_setting(device) != setting_name:
            # Never onto another board: the entry waits for its own.
            if device is None and any(not d.identity_known for d in discovery.devices):
                # It may be the board whose UUID could not be read: look again.
                self._rediscover = True
            return self._orphaned(key, value, board, setting_name, device)
        self._orphans.discard(key)
        try:
            native = int(value)
        except ValueError:
            return SettingOutcome(key, ControlResult.ERROR, str(value), detail="not a number")
        stop = blocked(device, restoring=True)
        if stop is not None:
            return SettingOutcome(key, stop[0], str(native), detail=stop[1])
        reached = self._limit(device, key)
        if isinstance(reached, SettingOutcome):
            return replace(reached, target=str(native))
        limit, setting = reached
        # The recorded value goes through the same clamp as any other: a board whose range no
        # longer holds it gets the nearest value, reported as drift and kept for later.
        target = limit.clamp(native / limit.per_watt)
        outcome = self.writer.restore(setting, str(target))
        if outcome.result is ControlResult.RESTORED:
            self._refused.discard(device.index)
            if target != native:
                why = f"{native} is outside the board's range now"
                outcome = replace(
                    outcome, result=ControlResult.DRIFT, target=str(native), detail=why
                )
        if outcome.result is not ControlResult.RESTORED:
            log.warning(
                "gpu.cap_not_restored", key=key, result=outcome.result.value, error=outcome.detail
            )
        return outcome

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


_WRITTEN = (ControlResult.APPLIED, ControlResult.APPLIED_UNVERIFIED, ControlResult.DRIFT)


def _is_back(outcome: SettingOutcome) -> bool:
    return outcome.result is ControlResult.RESTORED
