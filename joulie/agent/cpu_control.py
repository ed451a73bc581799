"""Changing a node's CPU power settings through sysfs, and putting them back.

Two components, each reported as one :class:`~joulie.api.enums.ControlResult`:

* the package cap: the long-term (PL1) RAPL limit of every package zone discovery kept, or the
  AMD HSMP socket cap. The watts come from the one cap resolution
  (:func:`joulie.core.caps.effective_cap`, CPU watts are per package) against the zone's range,
  and are clamped again in microwatts before the write, because RAPL does not range-check: an
  oversized value wraps into a tiny cap. A zone that states no maximum is not written. A zone
  whose limit is not enforced (``enabled`` 0) is enabled after the limit is written. The time
  window is left as it is.
* the governor preset: the mapping discovery found for this node
  (:class:`~joulie.agent.cpu_discovery.PresetMapping`), written per cpufreq policy in the order
  the kernel needs: boost, then the governor, then the EPP (never under ``performance``, where the
  kernel refuses EPP with EBUSY, and never for a policy whose governor write failed), then the
  maximum frequency.

Every file is written and restored through the agent's one guarded write
(:mod:`joulie.agent.guarded_write`: read, decide, record the baseline, write, read back); this
module says which files, which values and in which order. A setting a preset does not set, but
that the agent changed earlier, goes back to its baseline.

Restoring writes the baseline back: RAPL limits then their ``enabled``, then boost, governor, EPP
and frequency limits (min and max in the order that never crosses them).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from joulie.agent.baseline import Baseline, BaselineValue
from joulie.agent.cpu_discovery import BoostControl, GovernorCapabilities
from joulie.agent.guarded_write import GuardedWriter, Setting, SettingFailed
from joulie.agent.outcomes import ComponentOutcome, SettingOutcome
from joulie.agent.powercap_discovery import HsmpCap, RaplZone
from joulie.agent.sysfs import ErrorKind, Sysfs, SysfsError
from joulie.api.enums import Boost, ControlResult, CpuGovernorPreset
from joulie.core.caps import effective_cap
from joulie.core.control import ControlFacts, Failure, control_result

__all__ = [
    "POWERCAP_PREFIX",
    "RAPL_TOLERANCE_UW",
    "ComponentOutcome",
    "CoreCeiling",
    "CpuControl",
    "SettingOutcome",
]

POWERCAP_PREFIX = "/sys/class/powercap/"
HWMON_PREFIX = "/sys/class/hwmon/"
CPU_PREFIX = "/sys/devices/system/cpu/"

FLOOR_PCT_OF_MAX = 10.0
"""No cap below this share of a zone's maximum is written, whatever minimum the zone states: a
limit near zero throttles every core to its lowest frequency, which no policy means (a spec
asking 1 % of a 165 W package would otherwise be written as 1.65 W, and a zone stating a 1 uW
minimum had 100 uW written)."""
MAX_PLAUSIBLE_UW = 2_000_000_000
"""A zone stating a maximum above 2 kW is not believed (the largest CPU packages are rated near
500 W; an assumption with room): its limit is not written. A maximum of 2^64-1 read from a
broken zone led to writing 9223372036854775808 uW."""

RAPL_TOLERANCE_UW = 1_000_000
"""A RAPL limit reads back in the register's power unit (often 1/8 W), so a reading within 1 W
of the value written counts as the same."""


def _failure(error: SysfsError) -> Failure:
    if error.kind is ErrorKind.PERMISSION:
        return Failure.PERMISSION
    if error.kind is ErrorKind.REJECTED:
        return Failure.REJECTED
    return Failure.OTHER


def _is_rapl_limit(key: str) -> bool:
    return key.startswith(POWERCAP_PREFIX) and key.endswith("_power_limit_uw")


def _tolerance(key: str) -> int:
    if _is_rapl_limit(key) or (key.startswith(HWMON_PREFIX) and key.endswith("_cap")):
        return RAPL_TOLERANCE_UW
    return 0


@dataclass(frozen=True)
class CoreCeiling:
    """A frequency ceiling one cpufreq policy's cores take instead of the preset's."""

    khz: int
    note: str
    """Why, added to the setting's outcome (``standard work's exclusive cores``)."""


class CpuControl:
    """The CPU settings of one node, changed through ``sysfs`` with ``baseline`` kept."""

    def __init__(
        self,
        sysfs: Sysfs,
        baseline: Baseline,
        *,
        dry_run: bool = False,
        floor_pct_of_max: float = FLOOR_PCT_OF_MAX,
    ) -> None:
        self.sysfs = sysfs
        self.baseline = baseline
        self.dry_run = dry_run
        """Compute and report, write nothing (SIMULATE_ONLY)."""
        self.floor_pct_of_max = floor_pct_of_max
        """Lowest package cap written where the zone states no minimum (intel_rapl states none),
        as a percentage of the zone's maximum."""
        self.writer = GuardedWriter(baseline, dry_run=dry_run, name="cpu")

    # -- one setting --------------------------------------------------------------------------

    def _file(self, key: str) -> Setting:
        sysfs = self.sysfs

        def read() -> str:
            try:
                return sysfs.read(key)
            except SysfsError as exc:
                if exc.kind is ErrorKind.MISSING:
                    raise SettingFailed("no such file", failure=None) from None
                raise SettingFailed(exc.detail, _failure(exc)) from None

        def write(value: str) -> None:
            try:
                sysfs.write(key, value)
            except SysfsError as exc:
                raise SettingFailed(exc.detail, _failure(exc)) from None

        return Setting(key, read, write, tolerance=_tolerance(key))

    def _set(self, key: str, target: str, *, reassert: bool = False) -> SettingOutcome:
        return self.writer.apply(self._file(key), target, reassert=reassert)

    def _back_to_baseline(self, keys: Sequence[str]) -> list[SettingOutcome]:
        """Restore ``keys`` that have a baseline, in the order given."""
        outcomes = self.baseline.restore_with(
            keys,
            lambda key, value: self.writer.restore(
                self._file(key), str(value), held=lambda: self._held(key)
            ),
            lambda outcome: outcome.result is ControlResult.RESTORED,
        )
        return list(outcomes.values())

    def _held(self, key: str) -> str | None:
        """Why ``key`` need not be written back: an EPP the kernel holds at ``performance``."""
        if posixpath.basename(key) != "energy_performance_preference":
            return None
        governor_key = posixpath.join(posixpath.dirname(key), "scaling_governor")
        pending = self.baseline.get(governor_key)
        if self.sysfs.try_read(governor_key) == "performance" and pending in (None, "performance"):
            # The kernel holds EPP at performance under this governor and refuses writes, and
            # the governor stays: nothing of the agent's is left in force to put back. (Were
            # the governor still to be restored to another one, the kernel would bring back the
            # EPP the agent wrote, so the entry is kept for then.)
            return "held by the governor"
        return None

    # -- package cap --------------------------------------------------------------------------

    def apply_package_cap(
        self,
        zones: Sequence[RaplZone],
        watts: float | None,
        pct_of_max: float | None,
        *,
        hsmp: Sequence[HsmpCap] = (),
        reassert: bool = False,
    ) -> ComponentOutcome:
        """Cap every package at the spec's per-package intent; no intent restores the baseline.

        ``zones`` are the package zones discovery kept (duplicates and sub-zones excluded); the
        HSMP caps are used only when no zone has a long-term limit (AMD).
        """
        if effective_cap(watts, pct_of_max, None) is None:
            restored = self.restore_package_cap()
            return restored if restored.result is not None else ComponentOutcome(None, "no cap")
        limited = [z for z in zones if z.long_term is not None]
        if not limited and any(c.cap_path for c in hsmp):
            return self._apply_hsmp(hsmp, watts, pct_of_max, reassert)
        if not limited:
            return ComponentOutcome(
                ControlResult.UNSUPPORTED,
                "no RAPL package zone with a long-term limit and no HSMP cap on this node",
            )
        packages: dict[int, list[RaplZone]] = {}
        for zone in limited:
            packages.setdefault(zone.package, []).append(zone)
        settings: list[SettingOutcome] = []
        for dies in packages.values():
            # The cap is per package; a package whose limits are per die (package-N-die-M)
            # shares it among its dies in proportion to their maxima.
            maxima = [z.long_term.max_power_uw if z.long_term else None for z in dies]
            total = sum(m for m in maxima if m) if all(maxima) else None
            for zone, die_max in zip(dies, maxima, strict=True):
                share = die_max / total if total and die_max and len(dies) > 1 else 1.0
                settings.extend(self._cap_zone(zone, watts, pct_of_max, share, reassert))
        return ComponentOutcome.of(settings)

    def _cap_zone(
        self,
        zone: RaplZone,
        watts: float | None,
        pct: float | None,
        share: float,
        reassert: bool,
    ) -> list[SettingOutcome]:
        lt = zone.long_term
        assert lt is not None
        key = lt.limit_path
        if zone.locked:
            return [SettingOutcome(key, ControlResult.REFUSED, detail="locked by the BIOS")]
        target = self._clamped_uw(
            watts * share if watts is not None else None, pct, lt.max_power_uw, lt.min_power_uw
        )
        if target is None:
            facts = ControlFacts(declined=True, dry_run=self.dry_run)
            return [
                SettingOutcome(
                    key,
                    control_result(facts),
                    detail=f"{zone.name} states no believable maximum to clamp the cap to",
                )
            ]
        outcome = self._set(key, str(target), reassert=reassert)
        settings = [outcome]
        if outcome.result in (
            ControlResult.APPLIED,
            ControlResult.APPLIED_UNVERIFIED,
            ControlResult.EQUIVALENT,
            ControlResult.DRIFT,
        ):
            enabled = posixpath.join(zone.path, "enabled")
            if self.sysfs.try_read(enabled) not in (None, "1"):
                # A limit on a disabled zone is not enforced.
                settings.append(self._set(enabled, "1", reassert=reassert))
        return settings

    def _clamped_uw(
        self,
        watts: float | None,
        pct: float | None,
        max_uw: int | None,
        min_uw: int | None,
    ) -> int | None:
        """The limit to write in microwatts, inside the zone's range; None without a believable
        maximum (:data:`MAX_PLAUSIBLE_UW`)."""
        if not max_uw or max_uw <= 0 or max_uw > MAX_PLAUSIBLE_UW:
            return None
        # The device's minimum when it is higher, never below the floor share of the maximum.
        floor_uw = max(round(max_uw * self.floor_pct_of_max / 100), min_uw or 0)
        cap = effective_cap(watts, pct, max_uw / 1e6, floor_uw / 1e6)
        if cap is None or cap.watts is None:
            return None
        target = round(cap.watts * 1e6)
        # Clamp again in the unit written: RAPL masks an out-of-range value into a tiny cap.
        return max(min(target, max_uw), min(max(floor_uw, 1), max_uw))

    def _apply_hsmp(
        self, caps: Sequence[HsmpCap], watts: float | None, pct: float | None, reassert: bool
    ) -> ComponentOutcome:
        settings: list[SettingOutcome] = []
        for cap in caps:
            if cap.cap_path is None:
                continue
            target = self._clamped_uw(watts, pct, cap.cap_max_uw, None)
            if target is None:
                settings.append(
                    SettingOutcome(
                        cap.cap_path,
                        control_result(ControlFacts(declined=True, dry_run=self.dry_run)),
                        detail="the HSMP cap states no maximum",
                    )
                )
                continue
            settings.append(self._set(cap.cap_path, str(target), reassert=reassert))
        return ComponentOutcome.of(settings)

    def restore_package_cap(self) -> ComponentOutcome:
        """Put every package limit (and ``enabled``) the agent changed back to its baseline."""
        keys = [k for k in self.baseline.entries() if _is_cap_key(k)]
        # Limit first, then whether it is enforced (the order the reference restores them in).
        keys.sort(key=lambda k: (posixpath.dirname(k), posixpath.basename(k) == "enabled"))
        return ComponentOutcome.of(self._back_to_baseline(keys))

    # -- governor preset ----------------------------------------------------------------------

    def apply_preset(
        self,
        governor: GovernorCapabilities | None,
        policies: Iterable[str],
        preset: CpuGovernorPreset | None,
        boost: Boost | None = None,
        *,
        ceilings: Mapping[str, CoreCeiling] | None = None,
        enabled: bool = True,
        reassert: bool = False,
    ) -> ComponentOutcome:
        """Bring every cpufreq policy (``policyN`` directories) to ``preset``.

        ``ceilings``: per policy, a frequency ceiling that replaces the preset's (the cores of a
        pod that holds them exclusively, by its class); with no preset only those are written.
        ``enabled`` is GOVERNOR_WRITES: when off, anything the agent changed earlier is restored
        and the result is ``disabled``. No preset and no ceiling restores the baseline.
        """
        ceilings = ceilings or {}
        if not enabled:
            restored = self.restore_governor()
            if restored.result is not None:
                return restored
            return ComponentOutcome(ControlResult.DISABLED, "governor writes are off")
        if preset is None and not ceilings:
            restored = self.restore_governor()
            return restored if restored.result is not None else ComponentOutcome(None, "no preset")
        if preset is None:
            return self._ceilings_only(ceilings, reassert)
        mapping = governor.preset(preset) if governor is not None else None
        if governor is None or mapping is None:
            return ComponentOutcome(
                ControlResult.UNSUPPORTED, f"this node cannot express the {preset.value} preset"
            )
        settings: list[SettingOutcome] = []
        if governor.boost is not None:
            if boost is not None:
                settings.append(self._set_boost(governor.boost, boost, reassert))
            else:
                # The spec leaves boost to the node: a setting the agent made goes back.
                settings.extend(self._back_to_baseline([governor.boost.path]))
        policies = list(policies)
        governed: set[str] = set()
        for policy in policies:
            outcome = self._set(f"{policy}/scaling_governor", mapping.governor, reassert=reassert)
            settings.append(outcome)
            if outcome.result in _DONE or self.dry_run:
                governed.add(policy)
        for policy in policies:
            key = f"{policy}/energy_performance_preference"
            if mapping.governor == "performance":
                continue  # the kernel holds EPP under it; a baseline waits for the restore
            if mapping.epp is None:
                # This preset sets no EPP: one the agent set for another preset goes.
                settings.extend(self._back_to_baseline([key]))
                continue
            if policy not in governed:
                settings.append(
                    SettingOutcome(
                        key,
                        control_result(ControlFacts(declined=True)),
                        mapping.epp,
                        detail="governor not set, so the EPP is not written",
                    )
                )
                continue
            settings.append(self._set(key, mapping.epp, reassert=reassert))
        for policy in policies:
            key = f"{policy}/scaling_max_freq"
            if policy in ceilings:
                settings.append(self._ceiling(policy, ceilings[policy], reassert))
                continue
            if mapping.max_freq_khz is None:
                # This preset sets no ceiling: one the agent set for another preset goes.
                settings.extend(self._back_to_baseline([key]))
                continue
            settings.append(
                self._set(key, str(self._freq(policy, mapping.max_freq_khz)), reassert=reassert)
            )
        return ComponentOutcome.of(settings)

    def _ceilings_only(
        self, ceilings: Mapping[str, CoreCeiling], reassert: bool
    ) -> ComponentOutcome:
        """No preset, but some policies' cores have a ceiling of their own: those are written,
        and every other cpufreq setting the agent changed goes back to its baseline."""
        keep = {f"{policy}/scaling_max_freq" for policy in ceilings}
        others = [k for k in self.baseline.entries() if k.startswith(CPU_PREFIX) and k not in keep]
        settings = self._back_to_baseline(self._restore_order(others))
        settings += [self._ceiling(p, c, reassert) for p, c in ceilings.items()]
        return ComponentOutcome.of(settings)

    def _ceiling(self, policy: str, ceiling: CoreCeiling, reassert: bool) -> SettingOutcome:
        key = f"{policy}/scaling_max_freq"
        outcome = self._set(key, str(self._freq(policy, ceiling.khz)), reassert=reassert)
        return replace(outcome, detail="; ".join(filter(None, (outcome.detail, ceiling.note))))

    def _set_boost(self, control: BoostControl, boost: Boost, reassert: bool) -> SettingOutcome:
        on = boost is Boost.ON
        return self._set(control.path, "0" if on == control.inverted else "1", reassert=reassert)

    def _freq(self, policy: str, khz: int) -> int:
        """``khz`` inside the policy's hardware range."""
        low = self.sysfs.try_read_int(f"{policy}/cpuinfo_min_freq")
        high = self.sysfs.try_read_int(f"{policy}/cpuinfo_max_freq")
        if high:
            khz = min(khz, high)
        if low:
            khz = max(khz, low)
        return khz

    def restore_governor(self) -> ComponentOutcome:
        """Put every cpufreq setting the agent changed back, in the order the kernel needs."""
        keys = [k for k in self.baseline.entries() if k.startswith(CPU_PREFIX)]
        return ComponentOutcome.of(self._back_to_baseline(self._restore_order(keys)))

    def _restore_order(self, keys: list[str]) -> list[str]:
        boost = [k for k in keys if posixpath.basename(k) in ("no_turbo", "boost")]
        ordered = list(boost)
        by_policy: dict[str, list[str]] = {}
        for key in keys:
            if key not in boost:
                by_policy.setdefault(posixpath.dirname(key), []).append(key)
        for policy, own in by_policy.items():
            named = {posixpath.basename(k): k for k in own}
            gov, epp = named.get("scaling_governor"), named.get("energy_performance_preference")
            if gov is not None and self.baseline.get(gov) == "performance" and epp is not None:
                # Back to performance: the EPP is written while it is still accepted.
                ordered += [epp, gov]
            else:
                ordered += [k for k in (gov, epp) if k is not None]
            ordered += self._min_max_order(policy, named)
            ordered += [k for k in own if k not in ordered]
        return ordered

    def _min_max_order(self, policy: str, named: dict[str, str]) -> list[str]:
        low, high = named.get("scaling_min_freq"), named.get("scaling_max_freq")
        if low is None or high is None:
            return [k for k in (low, high) if k is not None]
        new_min = _int(self.baseline.get(low))
        current_max = self.sysfs.try_read_int(f"{policy}/scaling_max_freq")
        # A minimum above the current maximum is refused by older kernels: raise the max first.
        if new_min is not None and current_max is not None and new_min > current_max:
            return [high, low]
        return [low, high]

    # -- everything ---------------------------------------------------------------------------

    def restore_all(self) -> tuple[ComponentOutcome, ComponentOutcome]:
        """Restore the package caps, then the cpufreq settings (the reference's order)."""
        return self.restore_package_cap(), self.restore_governor()


_DONE = (ControlResult.APPLIED, ControlResult.APPLIED_UNVERIFIED, ControlResult.EQUIVALENT)


def _is_cap_key(key: str) -> bool:
    if key.startswith(POWERCAP_PREFIX):
        return True
    return key.startswith(HWMON_PREFIX) and key.endswith("/power1_cap")


def _int(value: BaselineValue | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None
