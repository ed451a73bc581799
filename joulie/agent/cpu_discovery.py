"""What a node's CPUs are and which of their power and frequency knobs exist: read from procfs and
sysfs through a :class:`~joulie.agent.sysfs.Sysfs` (so tests run on fake trees), returned as frozen
data. Nothing here writes, logs or retries; problems become ``warnings`` in the result.

- Topology: sockets are distinct ``physical_package_id``; physical cores distinct
  ``core_cpus_list`` (else (package, die, core_id)); logical CPUs the online ones. ``/proc/cpuinfo``
  gives the vendor and model name, and the counts when sysfs has no topology.
- cpufreq (policies, landmarks, governor state, presets): :mod:`joulie.agent.cpufreq_discovery`,
  whose names are re-exported here.
- Package power: :mod:`joulie.agent.powercap_discovery`.

Frequencies are kHz here, as in sysfs; the NodeHardware status converts them to MHz.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from joulie.agent.cpufreq_discovery import (
    ACTIVE_DRIVERS,
    CPU,
    BoostControl,
    CpufreqPolicy,
    FreqLandmarks,
    GovernorCapabilities,
    PresetMapping,
    discover_cpufreq,
    driver_family,
    parse_cpu_list,
)
from joulie.agent.powercap_discovery import Powercap, discover_powercap, probe_rapl_locks
from joulie.agent.sysfs import Sysfs

__all__ = [
    "ACTIVE_DRIVERS",
    "BoostControl",
    "CpuDiscovery",
    "CpufreqPolicy",
    "FreqLandmarks",
    "GovernorCapabilities",
    "PresetMapping",
    "Topology",
    "discover_cpu",
    "driver_family",
    "parse_cpu_list",
    "probe_cpu_locks",
]

CPUINFO = "/proc/cpuinfo"
CPUINFO_LIMIT = 16 * 1024**2
"""About 1.5 KiB a logical CPU: room for thousands."""


@dataclass(frozen=True)
class Topology:
    vendor: str | None
    """``vendor_id`` (GenuineIntel, AuthenticAMD, HygonGenuine)."""
    raw_model: str | None
    """``model name`` as the kernel reports it."""
    sockets: int | None
    physical_cores: int | None
    """Cores of the whole node, SMT siblings counted once."""
    logical_cpus: int | None
    """Online hardware threads."""
    online: tuple[int, ...]
    virtualized: bool
    """``/proc/cpuinfo`` shows the ``hypervisor`` flag."""


@dataclass(frozen=True)
class CpuDiscovery:
    """Everything CPU discovery found on one node."""

    topology: Topology
    policies: tuple[CpufreqPolicy, ...]
    landmarks: FreqLandmarks
    governor: GovernorCapabilities | None
    """None when the node has no cpufreq policy (most VMs)."""
    powercap: Powercap
    warnings: tuple[str, ...]
    """Every discovery problem worth a human's attention, the power-cap ones included."""

    @property
    def cap_mechanism(self) -> str | None:
        """``rapl`` when some package has a long-term limit with a known maximum and is not
        locked, else ``hsmp`` when the HSMP cap exists, else None (CPU cap unsupported)."""
        for zone in self.powercap.zones:
            lt = zone.long_term
            if lt is not None and lt.writable and lt.max_power_uw and zone.locked is not True:
                return "rapl"
        if any(c.cap_path is not None and c.cap_max_uw for c in self.powercap.hsmp):
            return "hsmp"
        return None

    @property
    def cap_range_uw(self) -> tuple[int | None, int] | None:
        """(min, max) package cap in microwatts per package, the tightest over packages; the
        minimum is None where the driver publishes none (intel_rapl). Where a package's limits
        are per die (``package-N-die-M``), its range is the sum over its dies."""
        mechanism = self.cap_mechanism
        if mechanism == "rapl":
            maxima: dict[int, int] = {}
            minima: dict[int, int] = {}
            for zone in self.powercap.zones:
                lt = zone.long_term
                if lt is None or not lt.max_power_uw or zone.locked is True:
                    continue
                maxima[zone.package] = maxima.get(zone.package, 0) + lt.max_power_uw
                if lt.min_power_uw:
                    minima[zone.package] = minima.get(zone.package, 0) + lt.min_power_uw
            return (max(minima.values()) if minima else None, min(maxima.values()))
        if mechanism == "hsmp":
            hsmp = [c.cap_max_uw for c in self.powercap.hsmp if c.cap_max_uw]
            return (None, min(hsmp))
        return None

    @property
    def control_available(self) -> bool:
        return self.cap_mechanism is not None

    @property
    def telemetry_available(self) -> bool:
        """Package energy can be read (RAPL), or the HSMP driver reports socket power."""
        return any(z.energy_readable for z in self.powercap.zones) or any(
            c.input_path is not None for c in self.powercap.hsmp
        )


def discover_cpu(sysfs: Sysfs) -> CpuDiscovery:
    """Discover the node's CPUs under ``sysfs``'s root. Read-only."""
    warnings: list[str] = []
    topology = _topology(sysfs, warnings)
    cpufreq = discover_cpufreq(sysfs)
    warnings.extend(cpufreq.warnings)
    powercap = discover_powercap(sysfs)
    if not powercap.zones and not powercap.hsmp:
        warnings.append("no RAPL package zone: CPU power can be neither capped nor measured")
    warnings.extend(powercap.warnings)
    return CpuDiscovery(
        topology,
        cpufreq.policies,
        cpufreq.landmarks,
        cpufreq.governor,
        powercap,
        tuple(dict.fromkeys(warnings)),
    )


# --- topology ------------------------------------------------------------------------------------


def _cpuinfo(sysfs: Sysfs) -> list[dict[str, str]]:
    stanzas: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in (sysfs.try_read(CPUINFO, CPUINFO_LIMIT) or "").splitlines():
        if not line.strip():
            if current:
                stanzas.append(current)
            current = {}
            continue
        key, sep, value = line.partition(":")
        if sep:
            current[key.strip()] = value.strip()
    if current:
        stanzas.append(current)
    return stanzas


def _topology(sysfs: Sysfs, warnings: list[str]) -> Topology:
    stanzas = _cpuinfo(sysfs)
    first = stanzas[0] if stanzas else {}
    vendor = first.get("vendor_id") or None
    raw_model = first.get("model name") or None
    virtualized = "hypervisor" in first.get("flags", "").split()
    if not stanzas:
        warnings.append("/proc/cpuinfo could not be read: CPU vendor and model unknown")
    elif raw_model is None:
        warnings.append("/proc/cpuinfo names no CPU model")

    online = parse_cpu_list(sysfs.try_read(f"{CPU}/online"))
    packages: set[int] = set()
    cores: set[object] = set()
    seen = 0
    for cpu in online:
        base = f"{CPU}/cpu{cpu}/topology"
        package = sysfs.try_read_int(f"{base}/physical_package_id")
        if package is None:
            continue
        seen += 1
        packages.add(max(package, 0))  # -1 (unknown) on some arm systems: one package
        siblings = sysfs.try_read(f"{base}/core_cpus_list") or sysfs.try_read(
            f"{base}/thread_siblings_list"
        )
        if siblings:
            cores.add(parse_cpu_list(siblings))
        else:
            cores.add(
                (
                    package,
                    sysfs.try_read_int(f"{base}/die_id"),
                    sysfs.try_read_int(f"{base}/core_id"),
                )
            )
    if online and seen == len(online):
        return Topology(
            vendor, raw_model, len(packages), len(cores), len(online), online, virtualized
        )

    # No (or partial) sysfs topology: count from /proc/cpuinfo, one stanza per online CPU.
    if stanzas:
        warnings.append("CPU topology counted from /proc/cpuinfo (sysfs topology missing)")
        sockets = {s.get("physical id", "0") for s in stanzas}
        phys = {(s.get("physical id", "0"), s.get("core id", s.get("processor"))) for s in stanzas}
        procs = tuple(
            sorted(int(s["processor"]) for s in stanzas if s.get("processor", "").isdigit())
        )
        return Topology(
            vendor, raw_model, len(sockets), len(phys), len(stanzas), online or procs, virtualized
        )
    warnings.append("CPU topology unknown: neither sysfs nor /proc/cpuinfo could be read")
    return Topology(vendor, raw_model, None, None, len(online) or None, online, virtualized)


def probe_cpu_locks(sysfs: Sysfs, discovery: CpuDiscovery) -> CpuDiscovery:
    """``discovery`` with locked RAPL package limits found (see
    :func:`joulie.agent.powercap_discovery.probe_rapl_locks`, which writes each long-term limit's
    current value back once). A locked zone is no cap target; when every zone is locked the node
    has no CPU cap control."""
    probed = probe_rapl_locks(sysfs, discovery.powercap)
    added = [w for w in probed.warnings if w not in discovery.warnings]
    return replace(discovery, powercap=probed, warnings=(*discovery.warnings, *added))
