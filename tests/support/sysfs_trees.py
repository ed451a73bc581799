"""Fake procfs/sysfs trees of the machines the agent must handle, built file by file under a
temporary root, with real symbolic links where the kernel has them (``/sys/class/powercap/*`` ->
``/sys/devices/virtual/powercap/...``; ``cpuN/cpufreq`` -> ``../cpufreq/policyN``) so a reader that
walks both trees, or globs links and their targets, counts things twice here as it would on a node.

Where the numbers come from: the kernel's documented file layout and units (powercap, intel_rapl,
intel_pstate, amd-pstate, amd_hsmp hwmon), the public specifications of the two CPUs (Xeon
Platinum 8260: 2.4 GHz base, 3.9 GHz turbo, 165 W TDP; EPYC 9654: 2.4 GHz base, 3.7 GHz boost,
360 W default TDP, 400 W top of its configurable range), and counter ranges recomputed from the
kernel's unit arithmetic (0xFFFFFFFF energy units: 262143328850 uJ for an Intel package, 65532610987
uJ for an AMD one). They are the figures of the project's hardware-interface notes; none was
taken from another project's inventory or fixtures. Both machines are shrunk (fewer cores) so a
tree stays small; the file contents are otherwise what such a node shows.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from pathlib import Path

from tests.support.fake_sysfs import FakeSysfs

CPU = "/sys/devices/system/cpu"
POWERCAP_DEVICES = "/sys/devices/virtual/powercap"
POWERCAP_CLASS = "/sys/class/powercap"

INTEL_MODEL = "Intel(R) Xeon(R) Platinum 8260 CPU @ 2.40GHz"
AMD_MODEL = "AMD EPYC 9654 96-Core Processor"
VM_MODEL = "Intel(R) Xeon(R) Processor"

INTEL_PACKAGE_ENERGY_RANGE_UJ = 262_143_328_850
INTEL_DRAM_ENERGY_RANGE_UJ = 65_712_999_613
AMD_ENERGY_RANGE_UJ = 65_532_610_987
INTEL_LONG_TERM_UW = 165_000_000
INTEL_SHORT_TERM_UW = 198_000_000

EPP_CHOICES = "default performance balance_performance balance_power power"


def _link(fake: FakeSysfs, link: str, target: str) -> None:
    """A relative symbolic link at ``link`` pointing at ``target`` (both paths as on the node)."""
    where = fake.path(link)
    where.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(fake.path(target), where.parent), where)


def _cpuinfo(stanzas: Iterable[dict[str, object]]) -> str:
    return "\n\n".join("\n".join(f"{k}\t: {v}" for k, v in s.items()) for s in stanzas)


def _cpu_lists(fake: FakeSysfs, count: int, smt: str) -> None:
    last = f"0-{count - 1}" if count > 1 else "0"
    for name in ("online", "present", "possible"):
        fake.put(f"{CPU}/{name}", last)
    fake.put(f"{CPU}/smt/control", smt)


def _zone(fake: FakeSysfs, path: str, files: dict[str, str | int]) -> None:
    for name, value in files.items():
        fake.put(f"{path}/{name}", value)


def intel_xeon_8260(root: Path, *, locked: bool = False) -> FakeSysfs:
    """Tree A: two Xeon Platinum 8260 sockets shrunk to 2 cores x 2 threads each (8 CPUs),
    intel_pstate active with HWP and EPP, RAPL package-0/1 with long_term and short_term limits and
    a dram sub-zone each, plus two zones that must not count: an intel-rapl-mmio copy of package-0
    and a platform (psys) zone. ``locked`` is tree D: the BIOS locked the package limits, so every
    write to them fails with EACCES while reads still work."""
    fake = FakeSysfs(root)
    cpus = 8
    flags = "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge rapl hwp hwp_epp avx512f"
    fake.put(
        "/proc/cpuinfo",
        _cpuinfo(
            {
                "processor": n,
                "vendor_id": "GenuineIntel",
                "cpu family": 6,
                "model": 85,
                "model name": INTEL_MODEL,
                "stepping": 7,
                "physical id": n // 4,
                "siblings": 4,
                "core id": (n % 4) // 2,
                "cpu cores": 2,
                "flags": flags,
            }
            for n in range(cpus)
        ),
    )
    _cpu_lists(fake, cpus, "on")
    for n in range(cpus):
        topo = f"{CPU}/cpu{n}/topology"
        pair = n - n % 2
        fake.put(f"{topo}/physical_package_id", n // 4)
        fake.put(f"{topo}/die_id", 0)
        fake.put(f"{topo}/core_id", (n % 4) // 2)
        fake.put(f"{topo}/core_cpus_list", f"{pair}-{pair + 1}")
        fake.put(f"{topo}/thread_siblings_list", f"{pair}-{pair + 1}")
        fake.put(f"{topo}/package_cpus_list", "0-3" if n < 4 else "4-7")
        policy = f"{CPU}/cpufreq/policy{n}"
        _zone(
            fake,
            policy,
            {
                "scaling_driver": "intel_pstate",
                "scaling_available_governors": "performance powersave",
                "scaling_governor": "powersave",
                "energy_performance_available_preferences": EPP_CHOICES,
                "energy_performance_preference": "balance_performance",
                "cpuinfo_min_freq": 1_000_000,
                "cpuinfo_max_freq": 3_900_000,
                "base_frequency": 2_400_000,
                "scaling_min_freq": 1_000_000,
                "scaling_max_freq": 3_900_000,
                "scaling_cur_freq": 2_400_000,
                "affected_cpus": n,
                "related_cpus": n,
            },
        )
        _link(fake, f"{CPU}/cpu{n}/cpufreq", policy)
    _zone(
        fake,
        f"{CPU}/intel_pstate",
        {
            "status": "active",
            "no_turbo": 0,
            "max_perf_pct": 100,
            "min_perf_pct": 26,
            "turbo_pct": 51,
            "num_pstates": 30,
        },
    )

    rapl = f"{POWERCAP_DEVICES}/intel-rapl"
    fake.put(f"{rapl}/enabled", 1)
    _link(fake, f"{POWERCAP_CLASS}/intel-rapl", rapl)
    for socket in (0, 1):
        zone = f"{rapl}/intel-rapl:{socket}"
        _zone(
            fake,
            zone,
            {
                "name": f"package-{socket}",
                "enabled": 1,
                "energy_uj": 123_456_789,
                "max_energy_range_uj": INTEL_PACKAGE_ENERGY_RANGE_UJ,
                "max_power_range_uw": 0,  # a counter range: never a cap range
                "constraint_0_name": "long_term",
                "constraint_0_power_limit_uw": INTEL_LONG_TERM_UW,
                "constraint_0_time_window_us": 999_424,
                "constraint_0_max_power_uw": INTEL_LONG_TERM_UW,
                "constraint_1_name": "short_term",
                "constraint_1_power_limit_uw": INTEL_SHORT_TERM_UW,
                "constraint_1_time_window_us": 7_808,
                "constraint_1_max_power_uw": 0,  # the kernel's "unknown"
            },
        )
        _zone(
            fake,
            f"{zone}/intel-rapl:{socket}:0",
            {
                "name": "dram",
                "enabled": 0,
                "energy_uj": 5_550_000,
                "max_energy_range_uj": INTEL_DRAM_ENERGY_RANGE_UJ,
                "constraint_0_name": "long_term",
                "constraint_0_power_limit_uw": 0,
                "constraint_0_time_window_us": 976,
            },
        )
        _link(fake, f"{POWERCAP_CLASS}/intel-rapl:{socket}", zone)
        _link(fake, f"{POWERCAP_CLASS}/intel-rapl:{socket}:0", f"{zone}/intel-rapl:{socket}:0")
        if locked:
            for path in (zone, f"{POWERCAP_CLASS}/intel-rapl:{socket}"):
                for n in (0, 1):
                    fake.refuse(f"{path}/constraint_{n}_power_limit_uw", errno.EACCES)
    # Platform zone: the whole board, with limits of its own; never a package cap.
    psys = f"{rapl}/intel-rapl:2"
    _zone(
        fake,
        psys,
        {
            "name": "psys",
            "enabled": 0,
            "energy_uj": 99_000_000,
            "max_energy_range_uj": INTEL_PACKAGE_ENERGY_RANGE_UJ,
            "constraint_0_name": "long_term",
            "constraint_0_power_limit_uw": 0,
            "constraint_0_time_window_us": 27_983_872,
            "constraint_0_max_power_uw": 0,
        },
    )
    _link(fake, f"{POWERCAP_CLASS}/intel-rapl:2", psys)
    # The MMIO copy of package-0 (processor_thermal): same package, another interface.
    mmio = f"{POWERCAP_DEVICES}/intel-rapl-mmio/intel-rapl-mmio:0"
    _zone(
        fake,
        mmio,
        {
            "name": "package-0",
            "enabled": 0,
            "energy_uj": 123_456_000,
            "max_energy_range_uj": INTEL_PACKAGE_ENERGY_RANGE_UJ,
            "constraint_0_name": "long_term",
            "constraint_0_power_limit_uw": INTEL_LONG_TERM_UW,
            "constraint_0_time_window_us": 999_424,
            "constraint_0_max_power_uw": INTEL_LONG_TERM_UW,
        },
    )
    _link(fake, f"{POWERCAP_CLASS}/intel-rapl-mmio", f"{POWERCAP_DEVICES}/intel-rapl-mmio")
    _link(fake, f"{POWERCAP_CLASS}/intel-rapl-mmio:0", mmio)
    return fake


def intel_bios_locked(root: Path) -> FakeSysfs:
    """Tree D: tree A whose package limits the BIOS has locked (writes fail with EACCES)."""
    return intel_xeon_8260(root, locked=True)


def amd_epyc_9654(root: Path, *, hsmp: bool = True) -> FakeSysfs:
    """Tree B: one EPYC 9654 socket shrunk to 2 cores x 2 threads (SMT siblings N and N+2, as on
    most servers), amd-pstate-epp active, RAPL that reports energy only (no constraint files), and
    with ``hsmp`` the HSMP hwmon socket cap."""
    fake = FakeSysfs(root)
    cpus = 4
    fake.put(
        "/proc/cpuinfo",
        _cpuinfo(
            {
                "processor": n,
                "vendor_id": "AuthenticAMD",
                "cpu family": 25,
                "model": 17,
                "model name": AMD_MODEL,
                "physical id": 0,
                "siblings": 4,
                "core id": n % 2,
                "cpu cores": 2,
                "flags": "fpu vme de pse tsc msr pae mce cx8 apic sep cppc rapl",
            }
            for n in range(cpus)
        ),
    )
    _cpu_lists(fake, cpus, "on")
    for n in range(cpus):
        topo = f"{CPU}/cpu{n}/topology"
        fake.put(f"{topo}/physical_package_id", 0)
        fake.put(f"{topo}/die_id", 0)
        fake.put(f"{topo}/core_id", n % 2)
        fake.put(f"{topo}/core_cpus_list", "0,2" if n % 2 == 0 else "1,3")
        fake.put(f"{topo}/package_cpus_list", "0-3")
        _zone(
            fake,
            f"{CPU}/cpu{n}/acpi_cppc",
            {"nominal_freq": 2400, "nominal_perf": 166, "lowest_perf": 18, "highest_perf": 255},
        )
        policy = f"{CPU}/cpufreq/policy{n}"
        _zone(
            fake,
            policy,
            {
                "scaling_driver": "amd-pstate-epp",
                "scaling_available_governors": "performance powersave",
                "scaling_governor": "powersave",
                "energy_performance_available_preferences": EPP_CHOICES,
                "energy_performance_preference": "balance_performance",
                "cpuinfo_min_freq": 400_000,
                "cpuinfo_max_freq": 3_709_000,
                "scaling_min_freq": 400_000,
                "scaling_max_freq": 3_709_000,
                "amd_pstate_max_freq": 3_709_000,
                "amd_pstate_lowest_nonlinear_freq": 1_500_000,
                "amd_pstate_highest_perf": 255,
                "boost": 1,
                "affected_cpus": n,
                "related_cpus": n,
            },
        )
        _link(fake, f"{CPU}/cpu{n}/cpufreq", policy)
    fake.put(f"{CPU}/cpufreq/boost", 1)
    _zone(fake, f"{CPU}/amd_pstate", {"status": "active", "prefcore": "enabled"})

    zone = f"{POWERCAP_DEVICES}/intel-rapl/intel-rapl:0"
    fake.put(f"{POWERCAP_DEVICES}/intel-rapl/enabled", 0)
    _zone(
        fake,
        zone,
        {
            "name": "package-0",
            "enabled": 0,
            "energy_uj": 424_242,
            "max_energy_range_uj": AMD_ENERGY_RANGE_UJ,
        },
    )
    _zone(
        fake,
        f"{zone}/intel-rapl:0:0",
        {"name": "core", "energy_uj": 12_345, "max_energy_range_uj": AMD_ENERGY_RANGE_UJ},
    )
    _link(fake, f"{POWERCAP_CLASS}/intel-rapl", f"{POWERCAP_DEVICES}/intel-rapl")
    _link(fake, f"{POWERCAP_CLASS}/intel-rapl:0", zone)
    _link(fake, f"{POWERCAP_CLASS}/intel-rapl:0:0", f"{zone}/intel-rapl:0:0")
    if hsmp:
        # hwmon class entries are links to the device that registered them.
        device = "/sys/devices/platform/amd_hsmp/hwmon/hwmon3"
        _zone(
            fake,
            device,
            {
                "name": "amd_hsmp_hwmon",
                "power1_input": 180_000_000,
                "power1_cap": 360_000_000,
                "power1_cap_max": 400_000_000,
            },
        )
        _link(fake, "/sys/class/hwmon/hwmon3", device)
    return fake


def vm_without_power_interfaces(root: Path) -> FakeSysfs:
    """Tree C: a 2-vCPU KVM guest with a generic model name, the hypervisor flag, topology, an
    empty cpufreq directory and neither powercap nor hwmon."""
    fake = FakeSysfs(root)
    fake.put(
        "/proc/cpuinfo",
        _cpuinfo(
            {
                "processor": n,
                "vendor_id": "GenuineIntel",
                "cpu family": 6,
                "model": 85,
                "model name": VM_MODEL,
                "physical id": 0,
                "siblings": 2,
                "core id": n,
                "cpu cores": 2,
                "flags": "fpu vme de pse tsc msr pae mce cx8 apic sep hypervisor",
            }
            for n in range(2)
        ),
    )
    _cpu_lists(fake, 2, "notsupported")
    for n in range(2):
        topo = f"{CPU}/cpu{n}/topology"
        fake.put(f"{topo}/physical_package_id", 0)
        fake.put(f"{topo}/die_id", 0)
        fake.put(f"{topo}/core_id", n)
        fake.put(f"{topo}/core_cpus_list", n)
        fake.put(f"{topo}/package_cpus_list", "0-1")
    fake.path(f"{CPU}/cpufreq").mkdir(parents=True)
    fake.put(f"{CPU}/cpuidle/current_driver", "haltpoll")
    return fake


WRAP_PREVIOUS_UJ = 262_143_000_000
"""Tree E: package-0's counter just below its wrap (the range is INTEL_PACKAGE_ENERGY_RANGE_UJ)."""
WRAP_CURRENT_UJ = 1_000
"""Tree E: the reading after the wrap; 329850 uJ were used in between."""


def energy_near_wrap(root: Path) -> FakeSysfs:
    """Tree E: tree A with package-0's energy counter just below its wrap; :func:`wrap_counter`
    moves it past the wrap, as the kernel's counter would between two samples."""
    fake = intel_xeon_8260(root)
    fake.put(f"{POWERCAP_DEVICES}/intel-rapl/intel-rapl:0/energy_uj", WRAP_PREVIOUS_UJ)
    return fake


def wrap_counter(fake: FakeSysfs) -> None:
    fake.put(f"{POWERCAP_DEVICES}/intel-rapl/intel-rapl:0/energy_uj", WRAP_CURRENT_UJ)


# --- GPUs through DRM and hwmon ----------------------------------------------------------------

MI300X_SCLK_MHZ = (500, 1300, 2100)
"""Graphics clock levels an MI300X lists in pp_dpm_sclk (its 2100 MHz peak engine clock)."""


def pci_device(fake: FakeSysfs, slot: str, vendor: str, device: str, pci_class: str) -> str:
    """A PCI function under ``/sys/devices`` linked from ``/sys/bus/pci/devices``; its path."""
    base = f"/sys/devices/pci0000:00/{slot}"
    fake.put(f"{base}/vendor", vendor)
    fake.put(f"{base}/device", device)
    fake.put(f"{base}/class", pci_class)
    fake.put(f"{base}/uevent", f"DRIVER=x\nPCI_SLOT_NAME={slot}")
    _link(fake, f"/sys/bus/pci/devices/{slot}", base)
    return base


def drm_card(fake: FakeSysfs, card: str, device_dir: str) -> None:
    """``/sys/class/drm/<card>`` whose ``device`` links to ``device_dir``."""
    fake.path(f"/sys/class/drm/{card}").mkdir(parents=True, exist_ok=True)
    _link(fake, f"/sys/class/drm/{card}/device", device_dir)


def amd_board(
    fake: FakeSysfs,
    card: str,
    slot: str,
    *,
    device_id: str = "0x74a1",
    cap_uw: int | None = 750_000_000,
    cap_min_uw: int = 350_000_000,
    cap_max_uw: int = 750_000_000,
    power_file: str = "power1_input",
    level: str | None = "auto",
    sclk_mhz: tuple[int, ...] = MI300X_SCLK_MHZ,
) -> str:
    """An amdgpu board (by default an MI300X: cap 350-750 W) with its hwmon directory, clock
    policy ``level`` (None: no such file) and graphics clock levels; its hwmon path as the
    agent reaches it (through ``/sys/class/drm``)."""
    base = pci_device(fake, slot, "0x1002", device_id, "0x038000")
    hwmon = f"{base}/hwmon/hwmon{card[-1]}"
    fake.put(f"{hwmon}/name", "amdgpu")
    fake.put(f"{hwmon}/{power_file}", 182_000_000)
    if cap_uw is not None:
        fake.put(f"{hwmon}/power1_cap", cap_uw)
        fake.put(f"{hwmon}/power1_cap_min", cap_min_uw)
        fake.put(f"{hwmon}/power1_cap_max", cap_max_uw)
        fake.put(f"{hwmon}/power1_cap_default", cap_max_uw)
    if level is not None:
        fake.put(f"{base}/power_dpm_force_performance_level", level)
    if sclk_mhz:
        current = len(sclk_mhz) // 2
        fake.put(
            f"{base}/pp_dpm_sclk",
            "\n".join(
                f"{i}: {mhz}Mhz{' *' if i == current else ''}" for i, mhz in enumerate(sclk_mhz)
            ),
        )
    drm_card(fake, card, base)
    return f"/sys/class/drm/{card}/device/hwmon/hwmon{card[-1]}"


def mi300x_node(fake: FakeSysfs) -> list[str]:
    """Two MI300X boards, a display connector and a render node, and the BMC's VGA; the
    boards' hwmon paths."""
    hwmons = [
        amd_board(fake, "card1", "0000:c1:00.0"),
        amd_board(fake, "card2", "0000:c2:00.0"),
    ]
    drm_card(fake, "card0", pci_device(fake, "0000:03:00.0", "0x1a03", "0x2000", "0x030000"))
    fake.path("/sys/class/drm/card1-DP-1").mkdir(parents=True)
    fake.path("/sys/class/drm/renderD128").mkdir(parents=True)
    return hwmons
