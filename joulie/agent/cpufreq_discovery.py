"""cpufreq as discovery sees it: the policies (never ``cpuN/cpufreq``, which are links to them),
the driver and its family, the frequency landmarks, the governor and EPP state, the boost switch,
and the vendor-neutral presets this node can express with what each means natively (see
:func:`_presets`). Read-only; frequencies in kHz, as in sysfs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from joulie.agent.sysfs import Sysfs
from joulie.api.enums import CpuGovernorPreset

__all__ = [
    "ACTIVE_DRIVERS",
    "BoostControl",
    "CpufreqDiscovery",
    "CpufreqPolicy",
    "FreqLandmarks",
    "GovernorCapabilities",
    "PresetMapping",
    "discover_cpufreq",
    "driver_family",
    "parse_cpu_list",
]

CPU = "/sys/devices/system/cpu"
CPUFREQ = f"{CPU}/cpufreq"

ACTIVE_DRIVERS = frozenset({"intel_pstate", "amd-pstate-epp"})
"""Drivers whose ``performance``/``powersave`` are their own algorithms steered by EPP. On every
other driver the generic ``powersave`` governor pins the minimum frequency."""

_FAMILIES = {
    "intel_pstate": "intel_pstate",
    "intel_cpufreq": "intel_pstate",  # intel_pstate in passive mode
    "amd-pstate": "amd-pstate",
    "amd-pstate-epp": "amd-pstate",
    "acpi-cpufreq": "acpi-cpufreq",
    "cppc_cpufreq": "cppc",
}


def driver_family(driver: str | None) -> str | None:
    """The family of a cpufreq driver: its two modes (active and passive) are one family."""
    if driver is None:
        return None
    return _FAMILIES.get(driver, driver)


def parse_cpu_list(text: str | None) -> tuple[int, ...]:
    """A kernel CPU list (``0-3,8,10-11``; also space-separated as in ``affected_cpus``)."""
    cpus: set[int] = set()
    for part in (text or "").replace(",", " ").split():
        first, sep, last = part.partition("-")
        try:
            if sep:
                cpus.update(range(int(first), int(last) + 1))
            else:
                cpus.add(int(first))
        except ValueError:
            continue
    return tuple(sorted(cpus))


@dataclass(frozen=True)
class CpufreqPolicy:
    """One ``cpufreq/policyN`` directory; frequencies in kHz."""

    path: str
    cpus: tuple[int, ...]
    """``affected_cpus`` (the CPUs a write here governs)."""
    driver: str | None
    governor: str | None
    available_governors: tuple[str, ...]
    epp: str | None
    """``energy_performance_preference`` when the driver has EPP."""
    available_epp: tuple[str, ...]
    cpuinfo_min_khz: int | None
    cpuinfo_max_khz: int | None
    scaling_min_khz: int | None
    scaling_max_khz: int | None
    base_khz: int | None
    """Nominal (non-boost) frequency: ``base_frequency``, the ACPI CPPC nominal, or the top
    non-turbo entry of ``scaling_available_frequencies``."""
    lowest_nonlinear_khz: int | None
    """``amd_pstate_lowest_nonlinear_freq``."""
    boost: bool | None
    """``policyN/boost`` when the driver has per-policy boost."""


@dataclass(frozen=True)
class FreqLandmarks:
    """Node-wide frequency landmarks in kHz (lowest minimum, highest maximum over policies)."""

    min_khz: int | None
    nominal_khz: int | None
    max_khz: int | None
    lowest_nonlinear_khz: int | None


@dataclass(frozen=True)
class BoostControl:
    """The node-wide boost switch: ``intel_pstate/no_turbo`` (1 = boost off, ``inverted``) or
    ``cpufreq/boost`` (1 = boost on)."""

    path: str
    inverted: bool
    enabled: bool | None
    """Whether boost is on now; None when the file cannot be read."""


@dataclass(frozen=True)
class PresetMapping:
    """What one vendor-neutral preset means on this node.

    A writer applies the governor first, then the EPP (never under ``performance``, where the
    kernel refuses EPP), then ``max_freq_khz`` when set. Boost is not part of a preset: the spec
    carries it as its own field, applied through :attr:`GovernorCapabilities.boost`.
    """

    preset: CpuGovernorPreset
    governor: str
    epp: str | None
    max_freq_khz: int | None
    """A ceiling on ``scaling_max_freq`` (the nominal frequency for efficiency on passive
    drivers); None leaves it at ``cpuinfo_max_freq``."""

    @property
    def native(self) -> str:
        """The mapping in the driver's terms, e.g. ``powersave epp=balance_performance``."""
        return _native(self.governor, self.epp, self.max_freq_khz)


@dataclass(frozen=True)
class GovernorCapabilities:
    driver: str | None
    family: str | None
    active: bool
    """The driver runs its own algorithm (intel_pstate, amd-pstate-epp)."""
    governor: str | None
    """Current governor of the first policy."""
    available_governors: tuple[str, ...]
    """Governors every policy offers."""
    epp: str | None
    available_epp: tuple[str, ...]
    boost: BoostControl | None
    writable: bool
    """Every policy has a ``scaling_governor`` file (writable-looking; the kernel decides)."""
    presets: tuple[PresetMapping, ...]
    """Presets this node can express, in the order performance, balanced, efficiency."""

    @property
    def current_native(self) -> str | None:
        """The current setting in the same form as :attr:`PresetMapping.native`."""
        return None if self.governor is None else _native(self.governor, self.epp, None)

    def preset(self, preset: CpuGovernorPreset) -> PresetMapping | None:
        return next((p for p in self.presets if p.preset == preset), None)


@dataclass(frozen=True)
class CpufreqDiscovery:
    policies: tuple[CpufreqPolicy, ...]
    landmarks: FreqLandmarks
    governor: GovernorCapabilities | None
    """None when the node has no cpufreq policy (most VMs)."""
    warnings: tuple[str, ...]


def discover_cpufreq(sysfs: Sysfs) -> CpufreqDiscovery:
    """The node's cpufreq policies, landmarks and governor capabilities. Read-only."""
    warnings: list[str] = []
    policies = _policies(sysfs)
    landmarks = _landmarks(policies)
    governor = _governor(sysfs, policies, landmarks, warnings)
    if not policies:
        warnings.append("no cpufreq policy: frequency landmarks and governor presets unavailable")
    return CpufreqDiscovery(policies, landmarks, governor, tuple(warnings))


# --- cpufreq -------------------------------------------------------------------------------------


def _words(text: str | None) -> tuple[str, ...]:
    return tuple((text or "").split())


def _policies(sysfs: Sysfs) -> tuple[CpufreqPolicy, ...]:
    names = [n for n in sysfs.listdir(CPUFREQ) if n.startswith("policy") and n[6:].isdigit()]
    policies: list[CpufreqPolicy] = []
    for name in sorted(names, key=lambda n: int(n[6:])):
        path = f"{CPUFREQ}/{name}"
        cpus = parse_cpu_list(sysfs.try_read(f"{path}/affected_cpus")) or (int(name[6:]),)
        boost = sysfs.try_read_int(f"{path}/boost")
        policies.append(
            CpufreqPolicy(
                path=path,
                cpus=cpus,
                driver=sysfs.try_read(f"{path}/scaling_driver"),
                governor=sysfs.try_read(f"{path}/scaling_governor"),
                available_governors=_words(sysfs.try_read(f"{path}/scaling_available_governors")),
                epp=sysfs.try_read(f"{path}/energy_performance_preference"),
                available_epp=_words(
                    sysfs.try_read(f"{path}/energy_performance_available_preferences")
                ),
                cpuinfo_min_khz=sysfs.try_read_int(f"{path}/cpuinfo_min_freq"),
                cpuinfo_max_khz=sysfs.try_read_int(f"{path}/cpuinfo_max_freq"),
                scaling_min_khz=sysfs.try_read_int(f"{path}/scaling_min_freq"),
                scaling_max_khz=sysfs.try_read_int(f"{path}/scaling_max_freq"),
                base_khz=_nominal(sysfs, path, cpus),
                lowest_nonlinear_khz=sysfs.try_read_int(f"{path}/amd_pstate_lowest_nonlinear_freq"),
                boost=None if boost is None else boost != 0,
            )
        )
    return tuple(policies)


def _nominal(sysfs: Sysfs, path: str, cpus: tuple[int, ...]) -> int | None:
    base = sysfs.try_read_int(f"{path}/base_frequency")  # intel_pstate with HWP
    if base:
        return base
    if cpus:  # ACPI CPPC nominal frequency, in MHz
        cppc = sysfs.try_read_int(f"{CPU}/cpu{cpus[0]}/acpi_cppc/nominal_freq")
        if cppc:
            return cppc * 1000
    # acpi-cpufreq lists turbo as one bucket 1000 kHz above the highest non-turbo frequency.
    freqs = sorted(
        (
            int(f)
            for f in _words(sysfs.try_read(f"{path}/scaling_available_frequencies"))
            if f.isdigit()
        ),
        reverse=True,
    )
    if len(freqs) >= 2 and freqs[0] - freqs[1] == 1000:
        return freqs[1]
    return None


def _landmarks(policies: tuple[CpufreqPolicy, ...]) -> FreqLandmarks:
    def lowest(values: Iterable[int | None]) -> int | None:
        present = [v for v in values if v]
        return min(present) if present else None

    def highest(values: Iterable[int | None]) -> int | None:
        present = [v for v in values if v]
        return max(present) if present else None

    return FreqLandmarks(
        min_khz=lowest(p.cpuinfo_min_khz for p in policies),
        nominal_khz=lowest(p.base_khz for p in policies),
        max_khz=highest(p.cpuinfo_max_khz for p in policies),
        lowest_nonlinear_khz=highest(p.lowest_nonlinear_khz for p in policies),
    )


def _common(lists: Iterable[tuple[str, ...]]) -> tuple[str, ...]:
    """Entries every list has, in the first list's order."""
    lists = list(lists)
    if not lists:
        return ()
    return tuple(v for v in lists[0] if all(v in other for other in lists[1:]))


def _boost(sysfs: Sysfs, family: str | None) -> BoostControl | None:
    no_turbo = f"{CPU}/intel_pstate/no_turbo"
    if family == "intel_pstate" and sysfs.exists(no_turbo):
        value = sysfs.try_read_int(no_turbo)
        return BoostControl(no_turbo, True, None if value is None else value == 0)
    boost = f"{CPUFREQ}/boost"
    if sysfs.exists(boost):
        value = sysfs.try_read_int(boost)
        return BoostControl(boost, False, None if value is None else value != 0)
    return None


def _governor(
    sysfs: Sysfs,
    policies: tuple[CpufreqPolicy, ...],
    landmarks: FreqLandmarks,
    warnings: list[str],
) -> GovernorCapabilities | None:
    if not policies:
        return None
    drivers = {p.driver for p in policies if p.driver}
    driver = policies[0].driver
    if len(drivers) > 1:
        warnings.append(f"cpufreq policies use different drivers {sorted(drivers)}; using {driver}")
    governors = {p.governor for p in policies if p.governor}
    if len(governors) > 1:
        warnings.append(f"cpufreq policies run different governors {sorted(governors)}")
    family = driver_family(driver)
    active = driver in ACTIVE_DRIVERS
    available = _common(p.available_governors for p in policies)
    epps = _common(p.available_epp for p in policies) if all(p.epp for p in policies) else ()
    presets = _presets(active, available, epps, landmarks.nominal_khz)
    return GovernorCapabilities(
        driver=driver,
        family=family,
        active=active,
        governor=policies[0].governor,
        available_governors=available,
        epp=policies[0].epp,
        available_epp=epps,
        boost=_boost(sysfs, family),
        writable=all(sysfs.exists(f"{p.path}/scaling_governor") for p in policies),
        presets=presets,
    )


def _presets(
    active: bool, governors: tuple[str, ...], epps: tuple[str, ...], nominal_khz: int | None
) -> tuple[PresetMapping, ...]:
    """The vendor-neutral presets this node can express.

    performance: the ``performance`` governor (EPP left alone: the kernel forces 0 there).
    balanced: on active drivers ``powersave`` with EPP ``balance_performance`` (``powersave`` alone
    without EPP); on passive drivers ``schedutil``, else ``ondemand``.
    efficiency: on active drivers ``powersave`` with EPP ``balance_power``, else ``power`` (without
    EPP: ``powersave`` capped at the nominal frequency); on passive drivers ``schedutil`` /
    ``conservative`` / ``ondemand`` capped at the nominal frequency. Never the generic
    ``powersave`` governor of a passive driver, which pins the minimum frequency.
    A preset needing a value the node does not list, or a nominal frequency it does not
    publish, is left out.
    """
    P = CpuGovernorPreset
    out: list[PresetMapping] = []
    if "performance" in governors:
        out.append(PresetMapping(P.PERFORMANCE, "performance", None, None))
    if active:
        if "powersave" not in governors:
            return tuple(out)
        if not epps:
            out.append(PresetMapping(P.BALANCED, "powersave", None, None))
            if nominal_khz:
                out.append(PresetMapping(P.EFFICIENCY, "powersave", None, nominal_khz))
            return tuple(out)
        if "balance_performance" in epps:
            out.append(PresetMapping(P.BALANCED, "powersave", "balance_performance", None))
        saver = next((e for e in ("balance_power", "power") if e in epps), None)
        if saver is not None:
            out.append(PresetMapping(P.EFFICIENCY, "powersave", saver, None))
        return tuple(out)
    dynamic = next((g for g in ("schedutil", "ondemand") if g in governors), None)
    if dynamic is not None:
        out.append(PresetMapping(P.BALANCED, dynamic, None, None))
    frugal = next((g for g in ("schedutil", "conservative", "ondemand") if g in governors), None)
    if frugal is not None and nominal_khz:
        out.append(PresetMapping(P.EFFICIENCY, frugal, None, nominal_khz))
    return tuple(out)


def _native(governor: str, epp: str | None, max_khz: int | None) -> str:
    parts = [governor]
    if epp is not None:
        parts.append(f"epp={epp}")
    if max_khz is not None:
        parts.append(f"max={max_khz // 1000}MHz")
    return " ".join(parts)
