"""CPU package power interfaces: RAPL zones under powercap, the AMD HSMP hwmon cap, and the
arithmetic that turns two energy-counter readings into watts.

Zones are found through ``/sys/class/powercap`` only and de-duplicated by the directory the class
link resolves to, so a zone is never counted (or written) twice. A zone is kept as a package zone
only when its ``name`` says so (``package-N``, ``package-N-die-M``): the index in the directory
name means nothing (``intel-rapl:1`` is the second socket on a server and the platform zone on a
laptop). Sub-zones (core, uncore, dram), platform zones (psys) and the MMIO copy of a package zone
are reported as excluded, with the reason.

Constraints are found by ``constraint_N_name``, never by N, because the kernel numbers only the
limits a zone supports. A ``constraint_N_max_power_uw`` of 0, or one that cannot be read, is an
unknown maximum; the zone's ``max_power_range_uw`` is a counter range, not a cap range, and is not
read at all.

Everything here reads files except :func:`probe_rapl_locks`, which writes each package limit's
current value back once: a limit locked by the BIOS reads normally and refuses only writes.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from joulie.agent.sysfs import ErrorKind, Sysfs, SysfsError

__all__ = [
    "EXCLUDED_DUPLICATE",
    "EXCLUDED_PLATFORM",
    "EXCLUDED_SUBZONE",
    "ExcludedZone",
    "HsmpCap",
    "Powercap",
    "RaplConstraint",
    "RaplZone",
    "average_power_watts",
    "discover_powercap",
    "energy_delta_uj",
    "probe_rapl_locks",
]

POWERCAP = "/sys/class/powercap"
HWMON = "/sys/class/hwmon"
HSMP_HWMON_NAME = "amd_hsmp_hwmon"

EXCLUDED_DUPLICATE = "duplicate"
"""Another path to a zone already kept (an MMIO copy, or the same directory twice)."""
EXCLUDED_PLATFORM = "platform"
"""A psys zone: the whole platform, not a CPU package."""
EXCLUDED_SUBZONE = "subzone"
"""core / uncore / dram or any other zone that is not a package."""

_PACKAGE = re.compile(r"^package-(\d+)(?:-die-(\d+))?$")
_CONSTRAINT_NAME = re.compile(r"^constraint_(\d+)_name$")
# The control type whose zones are the MSR (or TPMI) package interfaces; intel-rapl-mmio zones
# copy them on client parts.
_PRIMARY_CONTROL_TYPE = "intel-rapl"


@dataclass(frozen=True)
class RaplConstraint:
    """One power limit of a zone, identified by its name (long_term = PL1, short_term = PL2,
    peak_power = PL4). Power in microwatts, windows in microseconds."""

    index: int
    """N of ``constraint_N_*``: where the files are, nothing more."""
    name: str
    limit_path: str
    """``constraint_N_power_limit_uw`` under the class path (what a writer writes)."""
    power_limit_uw: int | None
    """Current limit; None when it cannot be read."""
    max_power_uw: int | None
    """Highest limit the hardware reports; None when it reads 0 or cannot be read (unknown)."""
    min_power_uw: int | None
    """Lowest limit, only where the driver provides the file (intel_rapl does not)."""
    time_window_us: int | None
    window_path: str | None
    """``constraint_N_time_window_us`` when the constraint has one (peak_power has none)."""
    writable: bool
    """The limit file exists. Whether the kernel accepts writes is known only after a write
    (see :func:`probe_rapl_locks`)."""


@dataclass(frozen=True)
class RaplZone:
    """One CPU package zone (or one die of a multi-die package)."""

    path: str
    """Class path as on the node (``/sys/class/powercap/intel-rapl:0``); reads and writes go
    here."""
    real_path: str
    """Directory the class link resolves to, as on the node: the zone's identity for de-duplication,
    baselines and per-zone energy state."""
    name: str
    """``package-N`` or ``package-N-die-M``."""
    package: int
    die: int | None
    enabled: bool | None
    energy_path: str | None
    """``energy_uj`` when the file exists."""
    energy_readable: bool
    """``energy_uj`` could be read (root only since kernel 5.10)."""
    max_energy_range_uj: int | None
    """The energy counter's wrap modulus."""
    constraints: tuple[RaplConstraint, ...]
    locked: bool | None = None
    """True when a write of the long-term limit was refused with EACCES (locked by the BIOS);
    None until :func:`probe_rapl_locks` has tried."""

    def constraint(self, name: str) -> RaplConstraint | None:
        """The constraint called ``name`` (``long_term``, ``short_term``, ``peak_power``)."""
        return next((c for c in self.constraints if c.name == name), None)

    @property
    def long_term(self) -> RaplConstraint | None:
        return self.constraint("long_term")


@dataclass(frozen=True)
class ExcludedZone:
    """A powercap zone seen and deliberately left out of package caps and package energy."""

    path: str
    name: str | None
    reason: str
    """:data:`EXCLUDED_DUPLICATE`, :data:`EXCLUDED_PLATFORM` or :data:`EXCLUDED_SUBZONE`."""


@dataclass(frozen=True)
class HsmpCap:
    """The AMD HSMP socket power cap exposed through hwmon (``name`` = amd_hsmp_hwmon), in
    microwatts."""

    path: str
    """The hwmon directory as on the node."""
    cap_path: str | None
    """``power1_cap`` when present (what a writer writes)."""
    cap_uw: int | None
    cap_max_uw: int | None
    input_path: str | None
    """``power1_input``: the socket's current power, when present."""


@dataclass(frozen=True)
class Powercap:
    """Everything discovery found about package power on one node."""

    zones: tuple[RaplZone, ...]
    """Package zones, de-duplicated, ordered by (package, die)."""
    excluded: tuple[ExcludedZone, ...]
    hsmp: tuple[HsmpCap, ...]
    """One entry per socket the HSMP hwmon driver registered, in hwmon order."""
    warnings: tuple[str, ...]

    @property
    def rapl_has_limits(self) -> bool:
        """Some package zone has a long-term limit file (absent on AMD: energy-only RAPL)."""
        return any(z.long_term is not None and z.long_term.writable for z in self.zones)


def discover_powercap(sysfs: Sysfs) -> Powercap:
    """RAPL package zones from the powercap class directory and HSMP caps from hwmon."""
    warnings: list[str] = []
    kept: dict[str, tuple[str, str]] = {}  # real path -> (class path, control type)
    named: list[tuple[str, str, str, str]] = []  # (class path, real path, control type, name)
    for entry in sysfs.listdir(POWERCAP):
        path = f"{POWERCAP}/{entry}"
        name = sysfs.try_read(f"{path}/name")
        if name is None:
            continue  # a control type directory (intel-rapl), not a zone
        named.append((path, _real(sysfs, path), entry.split(":", 1)[0], name))

    zones: list[RaplZone] = []
    excluded: list[ExcludedZone] = []
    # The primary control type first, so an MMIO copy is the one found to be a duplicate: a
    # zone of another control type counts only for a package the primary type does not cover.
    named.sort(key=lambda item: (item[2] != _PRIMARY_CONTROL_TYPE, item[0]))
    package_names: set[str] = set()
    primary_packages: set[str] = set()
    for path, real, control_type, name in named:
        if real in kept:
            excluded.append(ExcludedZone(path, name, EXCLUDED_DUPLICATE))
            continue
        kept[real] = (path, control_type)
        match = _PACKAGE.match(name)
        if match is not None and control_type == _PRIMARY_CONTROL_TYPE:
            primary_packages.add(match.group(1))
        if name == "psys" or name.startswith("psys-"):
            excluded.append(ExcludedZone(path, name, EXCLUDED_PLATFORM))
        elif match is None:
            excluded.append(ExcludedZone(path, name, EXCLUDED_SUBZONE))
        elif name in package_names or (
            control_type != _PRIMARY_CONTROL_TYPE and match.group(1) in primary_packages
        ):
            excluded.append(ExcludedZone(path, name, EXCLUDED_DUPLICATE))
        else:
            package_names.add(name)
            die = match.group(2)
            zones.append(
                _zone(
                    sysfs, path, real, name, int(match.group(1)), None if die is None else int(die)
                )
            )
    zones.sort(key=lambda z: (z.package, z.die or 0))

    for zone in zones:
        if zone.energy_path is not None and not zone.energy_readable:
            warnings.append(
                f"RAPL {zone.name}: energy_uj cannot be read (root only since Linux 5.10); "
                "CPU power is not measured"
            )
        long_term = zone.long_term
        if long_term is not None and long_term.max_power_uw is None:
            warnings.append(
                f"RAPL {zone.name}: the long_term maximum is unknown (constraint max reads 0 or "
                "cannot be read), so no package cap is written there"
            )
    hsmp = _hsmp(sysfs)
    if zones and not any(z.constraints for z in zones):
        tail = "the HSMP socket cap is used instead" if hsmp else "CPU power cannot be capped"
        warnings.append(f"RAPL reports energy only on this CPU (no power limits); {tail}")
    return Powercap(tuple(zones), tuple(excluded), hsmp, tuple(warnings))


def probe_rapl_locks(sysfs: Sysfs, powercap: Powercap) -> Powercap:
    """Find package limits the BIOS has locked by writing each long-term limit's current value
    back once (a no-op for the hardware). EACCES marks the zone locked, with a warning; a
    locked zone is never a cap target. The only function of discovery that writes."""
    zones: list[RaplZone] = []
    warnings = list(powercap.warnings)
    for zone in powercap.zones:
        lt = zone.long_term
        if lt is None or not lt.writable or lt.power_limit_uw is None:
            zones.append(zone)
            continue
        try:
            sysfs.write(lt.limit_path, str(lt.power_limit_uw))
        except SysfsError as exc:
            if exc.kind is ErrorKind.PERMISSION:
                warnings.append(
                    f"RAPL {zone.name}: the long_term limit refuses writes ({exc.detail}): locked "
                    "by the BIOS or a read-only /sys; CPU power capping is unavailable there"
                )
                zones.append(replace(zone, locked=True))
            else:
                warnings.append(f"RAPL {zone.name}: writing the current limit back failed: {exc}")
                zones.append(zone)
            continue
        zones.append(replace(zone, locked=False))
    return replace(powercap, zones=tuple(zones), warnings=tuple(warnings))


def _real(sysfs: Sysfs, path: str) -> str:
    """The resolved directory of ``path``, as a path on the node when it lies inside the root."""
    root = Path(os.path.realpath(sysfs.root))
    real = Path(os.path.realpath(sysfs.path(path)))
    try:
        return "/" + str(real.relative_to(root))
    except ValueError:
        return str(real)


def _positive(value: int | None) -> int | None:
    return value if value is not None and value > 0 else None


def _zone(sysfs: Sysfs, path: str, real: str, name: str, package: int, die: int | None) -> RaplZone:
    constraints: list[RaplConstraint] = []
    for entry in sysfs.listdir(path):
        match = _CONSTRAINT_NAME.match(entry)
        if match is None:
            continue
        cname = sysfs.try_read(f"{path}/{entry}")
        if not cname:
            continue
        prefix = f"{path}/constraint_{match.group(1)}"
        window = f"{prefix}_time_window_us"
        constraints.append(
            RaplConstraint(
                index=int(match.group(1)),
                name=cname,
                limit_path=f"{prefix}_power_limit_uw",
                power_limit_uw=sysfs.try_read_int(f"{prefix}_power_limit_uw"),
                max_power_uw=_positive(sysfs.try_read_int(f"{prefix}_max_power_uw")),
                min_power_uw=sysfs.try_read_int(f"{prefix}_min_power_uw"),
                time_window_us=sysfs.try_read_int(window),
                window_path=window if sysfs.exists(window) else None,
                writable=sysfs.exists(f"{prefix}_power_limit_uw"),
            )
        )
    constraints.sort(key=lambda c: c.index)
    energy = f"{path}/energy_uj"
    has_energy = sysfs.exists(energy)
    enabled = sysfs.try_read_int(f"{path}/enabled")
    return RaplZone(
        path=path,
        real_path=real,
        name=name,
        package=package,
        die=die,
        enabled=None if enabled is None else enabled != 0,
        energy_path=energy if has_energy else None,
        energy_readable=has_energy and sysfs.try_read_int(energy) is not None,
        max_energy_range_uj=_positive(sysfs.try_read_int(f"{path}/max_energy_range_uj")),
        constraints=tuple(constraints),
    )


def _hsmp(sysfs: Sysfs) -> tuple[HsmpCap, ...]:
    caps: list[HsmpCap] = []
    for entry in sysfs.listdir(HWMON):
        path = f"{HWMON}/{entry}"
        if sysfs.try_read(f"{path}/name") != HSMP_HWMON_NAME:
            continue
        cap = f"{path}/power1_cap"
        current = f"{path}/power1_input"
        caps.append(
            HsmpCap(
                path=path,
                cap_path=cap if sysfs.exists(cap) else None,
                cap_uw=sysfs.try_read_int(cap),
                cap_max_uw=_positive(sysfs.try_read_int(f"{path}/power1_cap_max")),
                input_path=current if sysfs.exists(current) else None,
            )
        )
    return tuple(caps)


# --- energy counters -----------------------------------------------------------------------------


def energy_delta_uj(previous_uj: int, current_uj: int, max_energy_range_uj: int) -> int:
    """Energy used between two readings of one counter, across at most one wrap.

    The counter runs from 0 up to ``max_energy_range_uj`` and starts again at 0, so a reading
    below the previous one means it wrapped once. Readings outside the range are a ValueError:
    they come from another counter (or a reset), not from this one.
    """
    if max_energy_range_uj <= 0:
        raise ValueError(f"max_energy_range_uj must be positive, got {max_energy_range_uj}")
    for reading in (previous_uj, current_uj):
        if not 0 <= reading <= max_energy_range_uj:
            raise ValueError(f"reading {reading} is outside [0, {max_energy_range_uj}]")
    if current_uj >= previous_uj:
        return current_uj - previous_uj
    return current_uj + (max_energy_range_uj - previous_uj)


def average_power_watts(
    previous_uj: int,
    current_uj: int,
    elapsed_s: float,
    max_energy_range_uj: int,
    max_plausible_watts: float | None = None,
) -> float | None:
    """Mean power between two readings taken ``elapsed_s`` apart, or None when the pair cannot
    be trusted: no time passed, a reading outside the counter's range, or (with
    ``max_plausible_watts``) an interval long enough for the counter to have wrapped more than
    once, or more energy than that power could have used (a counter reset by a driver reload)."""
    if elapsed_s <= 0:
        return None
    try:
        delta = energy_delta_uj(previous_uj, current_uj, max_energy_range_uj)
    except ValueError:
        return None
    if max_plausible_watts is not None and max_plausible_watts > 0:
        wrap_period_s = max_energy_range_uj / 1e6 / max_plausible_watts
        if elapsed_s >= wrap_period_s or delta / 1e6 > max_plausible_watts * elapsed_s:
            return None
    return delta / 1e6 / elapsed_s
