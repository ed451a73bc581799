"""CPU discovery on fake procfs/sysfs trees: what a node's NodeHardware would say about its CPUs
(counts, model, presets, cap range, quality, warnings), which RAPL zones are cap targets, and the
energy-counter arithmetic the agent's telemetry rests on."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from joulie.agent.cpu_discovery import (
    CpuDiscovery,
    discover_cpu,
    parse_cpu_list,
    probe_cpu_locks,
)
from joulie.agent.cpu_hardware_status import cpu_hardware_status
from joulie.agent.powercap_discovery import (
    EXCLUDED_DUPLICATE,
    EXCLUDED_PLATFORM,
    EXCLUDED_SUBZONE,
    average_power_watts,
    energy_delta_uj,
)
from joulie.api.base import ObjectMeta
from joulie.api.crd import NODE_HARDWARE_CRD, crd_manifest
from joulie.api.enums import CpuGovernorPreset, DiscoveryQuality
from joulie.api.nodehardware import NodeHardware, NodeHardwareSpec, NodeHardwareStatus, Quality
from joulie.hardware.catalog import Catalog
from tests.structural import schema_errors
from tests.support import sysfs_trees as trees
from tests.support.fake_sysfs import FakeSysfs

CPU = trees.CPU


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.load()


def natives(discovery: CpuDiscovery) -> dict[str, str]:
    assert discovery.governor is not None
    return {p.preset.value: p.native for p in discovery.governor.presets}


@pytest.mark.parametrize(
    "build",
    [
        trees.intel_xeon_8260,
        trees.amd_epyc_9654,
        trees.vm_without_power_interfaces,
        trees.intel_bios_locked,
    ],
    ids=["intel", "amd", "vm", "locked"],
)
def test_the_published_cpu_status_is_accepted_by_the_crd(
    tmp_path: Path, catalog: Catalog, build: Callable[[Path], FakeSysfs]
) -> None:
    fake = build(tmp_path)
    status = cpu_hardware_status(probe_cpu_locks(fake, discover_cpu(fake)), catalog)
    obj = NodeHardware(
        metadata=ObjectMeta(name="node-a"),
        spec=NodeHardwareSpec(node_name="node-a"),
        status=NodeHardwareStatus(
            cpu=status.cpu,
            quality=Quality(overall=status.quality, warnings=list(status.quality_warnings) or None),
        ),
    ).to_wire()
    schema: dict[str, Any] = crd_manifest(NODE_HARDWARE_CRD)["spec"]["versions"][0]["schema"][
        "openAPIV3Schema"
    ]
    assert schema_errors(schema, obj) == []


# --- A: two-socket Intel Xeon 8260, intel_pstate + RAPL ------------------------------------------


def test_intel_node_counts_sockets_cores_and_threads(tmp_path: Path, catalog: Catalog) -> None:
    fake = trees.intel_xeon_8260(tmp_path)
    status = cpu_hardware_status(discover_cpu(fake), catalog)
    cpu = status.cpu
    assert (cpu.sockets, cpu.physical_cores, cpu.total_cores, cpu.cores_per_socket) == (2, 4, 8, 4)
    assert cpu.vendor == "GenuineIntel"
    assert cpu.raw_model == trees.INTEL_MODEL
    assert cpu.model == "INTEL_XEON_PLATINUM_8260"
    assert status.quality is DiscoveryQuality.EXACT
    assert status.quality_warnings == ()
    assert cpu.warnings is None
    assert fake.writes == []  # discovery only reads


def test_intel_package_zones_are_found_by_name_and_duplicates_left_out(tmp_path: Path) -> None:
    power = discover_cpu(trees.intel_xeon_8260(tmp_path)).powercap
    assert [(z.name, z.path) for z in power.zones] == [
        ("package-0", "/sys/class/powercap/intel-rapl:0"),
        ("package-1", "/sys/class/powercap/intel-rapl:1"),
    ]
    assert power.zones[0].real_path == "/sys/devices/virtual/powercap/intel-rapl/intel-rapl:0"
    excluded = {(z.path.rsplit("/", 1)[1], z.name, z.reason) for z in power.excluded}
    assert excluded == {
        ("intel-rapl:0:0", "dram", EXCLUDED_SUBZONE),
        ("intel-rapl:1:0", "dram", EXCLUDED_SUBZONE),
        ("intel-rapl:2", "psys", EXCLUDED_PLATFORM),
        ("intel-rapl-mmio:0", "package-0", EXCLUDED_DUPLICATE),
    }
    zone = power.zones[1]
    assert [c.name for c in zone.constraints] == ["long_term", "short_term"]
    assert zone.long_term is not None
    assert zone.long_term.max_power_uw == 165_000_000
    assert zone.long_term.limit_path.endswith("intel-rapl:1/constraint_0_power_limit_uw")
    short = zone.constraint("short_term")
    assert short is not None
    assert short.power_limit_uw == 198_000_000
    assert short.max_power_uw is None  # reads 0: unknown, not a 0 W ceiling
    assert zone.energy_readable
    assert zone.max_energy_range_uj == trees.INTEL_PACKAGE_ENERGY_RANGE_UJ


def test_intel_cap_range_is_the_long_term_maximum_per_socket(
    tmp_path: Path, catalog: Catalog
) -> None:
    discovery = discover_cpu(trees.intel_xeon_8260(tmp_path))
    cpu = cpu_hardware_status(discovery, catalog).cpu
    assert cpu.cap_range is not None
    assert cpu.cap_range.type == "rapl"
    assert cpu.cap_range.max_watts_per_socket == 165
    assert cpu.cap_range.min_watts_per_socket is None  # intel_rapl publishes no minimum
    assert cpu.control_available
    assert cpu.telemetry_available


def test_constraints_are_matched_by_name_not_index(tmp_path: Path) -> None:
    fake = trees.intel_xeon_8260(tmp_path)
    zone = "/sys/devices/virtual/powercap/intel-rapl/intel-rapl:0"
    fake.put(f"{zone}/constraint_0_name", "short_term")
    fake.put(f"{zone}/constraint_1_name", "long_term")
    fake.put(f"{zone}/constraint_1_max_power_uw", 150_000_000)
    package0 = discover_cpu(fake).powercap.zones[0]
    assert package0.long_term is not None
    assert package0.long_term.index == 1
    assert package0.long_term.limit_path.endswith("constraint_1_power_limit_uw")
    # The tighter package sets the node's per-socket range.
    assert discover_cpu(fake).cap_range_uw == (None, 150_000_000)


def test_a_second_zone_named_psys_is_not_a_second_socket(tmp_path: Path) -> None:
    # On client parts intel-rapl:1 is the platform zone; only the name tells.
    fake = trees.intel_xeon_8260(tmp_path)
    fake.put("/sys/devices/virtual/powercap/intel-rapl/intel-rapl:1/name", "psys")
    power = discover_cpu(fake).powercap
    assert [z.name for z in power.zones] == ["package-0"]
    assert any(
        z.path.endswith("intel-rapl:1") and z.reason == EXCLUDED_PLATFORM for z in power.excluded
    )


def test_die_scoped_limits_add_up_to_the_socket_range(tmp_path: Path) -> None:
    fake = trees.intel_xeon_8260(tmp_path)
    devices = "/sys/devices/virtual/powercap/intel-rapl"
    for socket in (0, 1):
        fake.put(f"{devices}/intel-rapl:{socket}/name", f"package-0-die-{socket}")
        fake.put(f"{devices}/intel-rapl:{socket}/constraint_0_max_power_uw", 100_000_000)
    discovery = discover_cpu(fake)
    assert [(z.package, z.die) for z in discovery.powercap.zones] == [(0, 0), (0, 1)]
    assert discovery.cap_range_uw == (None, 200_000_000)


def test_unknown_long_term_maximum_means_no_cap(tmp_path: Path, catalog: Catalog) -> None:
    fake = trees.intel_xeon_8260(tmp_path)
    for socket in (0, 1):
        fake.put(
            f"/sys/devices/virtual/powercap/intel-rapl/intel-rapl:{socket}/constraint_0_max_power_uw",
            0,
        )
    discovery = discover_cpu(fake)
    assert not discovery.control_available
    assert cpu_hardware_status(discovery, catalog).cpu.cap_range is None
    assert any("long_term maximum is unknown" in w for w in discovery.warnings)


def test_intel_pstate_offers_the_three_presets_in_its_own_terms(tmp_path: Path) -> None:
    discovery = discover_cpu(trees.intel_xeon_8260(tmp_path))
    assert natives(discovery) == {
        "performance": "performance",
        "balanced": "powersave epp=balance_performance",
        "efficiency": "powersave epp=balance_power",
    }
    gov = discovery.governor
    assert gov is not None
    assert (gov.driver, gov.family, gov.active, gov.writable) == (
        "intel_pstate",
        "intel_pstate",
        True,
        True,
    )
    assert gov.current_native == "powersave epp=balance_performance"
    assert gov.boost is not None
    assert gov.boost.path.endswith("intel_pstate/no_turbo")
    assert gov.boost.inverted
    assert gov.boost.enabled
    assert len(discovery.policies) == 8  # policies, not policies plus their cpuN/cpufreq links


def test_intel_landmarks_in_megahertz(tmp_path: Path, catalog: Catalog) -> None:
    cpu = cpu_hardware_status(discover_cpu(trees.intel_xeon_8260(tmp_path)), catalog).cpu
    assert cpu.landmarks is not None
    assert (
        cpu.landmarks.min_freq_m_hz,
        cpu.landmarks.nominal_freq_m_hz,
        cpu.landmarks.max_boost_m_hz,
    ) == (1000, 2400, 3900)
    assert cpu.driver_family == "intel_pstate"
    assert cpu.governor is not None
    assert [p.preset for p in cpu.governor.presets or []] == [
        "performance",
        "balanced",
        "efficiency",
    ]


def test_passive_driver_never_maps_efficiency_to_the_powersave_governor(tmp_path: Path) -> None:
    fake = trees.intel_xeon_8260(tmp_path)
    for n in range(8):
        policy = f"{CPU}/cpufreq/policy{n}"
        fake.put(f"{policy}/scaling_driver", "intel_cpufreq")
        fake.put(
            f"{policy}/scaling_available_governors",
            "conservative ondemand userspace powersave performance schedutil",
        )
        fake.put(f"{policy}/scaling_governor", "schedutil")
        for name in ("energy_performance_preference", "energy_performance_available_preferences"):
            fake.path(f"{policy}/{name}").unlink()
    discovery = discover_cpu(fake)
    assert discovery.governor is not None
    assert not discovery.governor.active
    assert discovery.governor.family == "intel_pstate"
    assert natives(discovery) == {
        "performance": "performance",
        "balanced": "schedutil",
        "efficiency": "schedutil max=2400MHz",
    }
    efficiency = discovery.governor.preset(CpuGovernorPreset.EFFICIENCY)
    assert efficiency is not None
    assert efficiency.max_freq_khz == 2_400_000


def test_acpi_cpufreq_nominal_from_the_turbo_bucket_and_shared_policy(tmp_path: Path) -> None:
    fake = trees.vm_without_power_interfaces(tmp_path)
    policy = f"{CPU}/cpufreq/policy0"
    settings: dict[str, str | int] = {
        "scaling_driver": "acpi-cpufreq",
        "scaling_available_governors": "performance powersave ondemand",
        "scaling_governor": "ondemand",
        "scaling_available_frequencies": "2401000 2400000 2000000 1600000",
        "cpuinfo_min_freq": 1_600_000,
        "cpuinfo_max_freq": 2_401_000,
        "affected_cpus": "0 1",
    }
    for name, value in settings.items():
        fake.put(f"{policy}/{name}", value)
    fake.put(f"{CPU}/cpufreq/boost", 1)
    discovery = discover_cpu(fake)
    assert [p.cpus for p in discovery.policies] == [(0, 1)]
    assert discovery.landmarks.nominal_khz == 2_400_000
    assert natives(discovery) == {
        "performance": "performance",
        "balanced": "ondemand",
        "efficiency": "ondemand max=2400MHz",
    }
    gov = discovery.governor
    assert gov is not None
    assert gov.boost is not None
    assert not gov.boost.inverted


def test_efficiency_is_left_out_where_no_nominal_frequency_is_known(tmp_path: Path) -> None:
    fake = trees.vm_without_power_interfaces(tmp_path)
    policy = f"{CPU}/cpufreq/policy0"
    fake.put(f"{policy}/scaling_driver", "acpi-cpufreq")
    fake.put(f"{policy}/scaling_available_governors", "performance schedutil")
    assert natives(discover_cpu(fake)) == {"performance": "performance", "balanced": "schedutil"}


# --- B: AMD EPYC 9654, amd-pstate-epp, energy-only RAPL, HSMP cap ------------------------------


def test_amd_node_counts_cores_from_non_adjacent_siblings(tmp_path: Path, catalog: Catalog) -> None:
    status = cpu_hardware_status(discover_cpu(trees.amd_epyc_9654(tmp_path)), catalog)
    cpu = status.cpu
    assert (cpu.sockets, cpu.physical_cores, cpu.total_cores) == (1, 2, 4)
    assert cpu.model == "AMD_EPYC_9654"
    assert cpu.vendor == "AuthenticAMD"
    assert status.quality is DiscoveryQuality.EXACT


def test_amd_rapl_reports_energy_only_and_the_cap_comes_from_hsmp(
    tmp_path: Path, catalog: Catalog
) -> None:
    discovery = discover_cpu(trees.amd_epyc_9654(tmp_path))
    power = discovery.powercap
    assert [z.name for z in power.zones] == ["package-0"]
    assert power.zones[0].constraints == ()
    assert not power.rapl_has_limits
    assert [c.cap_path for c in power.hsmp] == ["/sys/class/hwmon/hwmon3/power1_cap"]
    cpu = cpu_hardware_status(discovery, catalog).cpu
    assert cpu.cap_range is not None
    assert (cpu.cap_range.type, cpu.cap_range.max_watts_per_socket) == ("hsmp", 400)
    assert cpu.control_available
    assert cpu.telemetry_available
    assert any("energy only" in w for w in cpu.warnings or [])


def test_amd_without_hsmp_cannot_cap_the_cpu(tmp_path: Path, catalog: Catalog) -> None:
    discovery = discover_cpu(trees.amd_epyc_9654(tmp_path, hsmp=False))
    cpu = cpu_hardware_status(discovery, catalog).cpu
    assert cpu.control_available is False
    assert cpu.cap_range is None
    assert cpu.telemetry_available  # the package energy counter still works
    assert any("cannot be capped" in w for w in discovery.warnings)


def test_amd_pstate_epp_presets_and_landmarks(tmp_path: Path) -> None:
    discovery = discover_cpu(trees.amd_epyc_9654(tmp_path))
    assert natives(discovery) == {
        "performance": "performance",
        "balanced": "powersave epp=balance_performance",
        "efficiency": "powersave epp=balance_power",
    }
    assert discovery.governor is not None
    assert discovery.governor.family == "amd-pstate"
    boost = discovery.governor.boost
    assert boost is not None
    assert boost.path == f"{CPU}/cpufreq/boost"
    assert boost.enabled
    lm = discovery.landmarks
    # The CPPC nominal frequency is published in MHz.
    assert (lm.min_khz, lm.nominal_khz, lm.max_khz, lm.lowest_nonlinear_khz) == (
        400_000,
        2_400_000,
        3_709_000,
        1_500_000,
    )


# --- C: a VM without powercap or cpufreq -------------------------------------------------------


def test_vm_reports_no_control_no_presets_and_says_why(tmp_path: Path, catalog: Catalog) -> None:
    fake = trees.vm_without_power_interfaces(tmp_path)
    discovery = discover_cpu(fake)
    status = cpu_hardware_status(discovery, catalog)
    cpu = status.cpu
    assert (cpu.sockets, cpu.physical_cores, cpu.total_cores) == (1, 2, 2)
    assert discovery.topology.virtualized
    assert discovery.governor is None
    assert cpu.governor is None
    assert cpu.landmarks is None
    assert cpu.control_available is False
    assert cpu.telemetry_available is False
    assert cpu.cap_range is None
    assert cpu.driver_family is None
    warnings = cpu.warnings or []
    assert any("no cpufreq policy" in w for w in warnings)
    assert any("no RAPL package zone" in w for w in warnings)
    # A generic virtual model name is present but names no catalog model.
    assert status.quality is DiscoveryQuality.HEURISTIC
    assert cpu.model is None
    assert status.quality_warnings
    assert fake.writes == []


def test_no_model_at_all_is_unavailable_and_sysfs_less_topology_falls_back(
    tmp_path: Path, catalog: Catalog
) -> None:
    fake = FakeSysfs(tmp_path)
    fake.put(
        "/proc/cpuinfo",
        "processor\t: 0\nphysical id\t: 0\ncore id\t: 0\n\nprocessor\t: 1\n"
        "physical id\t: 0\ncore id\t: 1\n",
    )
    status = cpu_hardware_status(discover_cpu(fake), catalog)
    assert status.quality is DiscoveryQuality.UNAVAILABLE
    assert (status.cpu.sockets, status.cpu.physical_cores, status.cpu.total_cores) == (1, 2, 2)
    assert any("/proc/cpuinfo" in w for w in status.cpu.warnings or [])


def test_unknown_model_is_heuristic(tmp_path: Path, catalog: Catalog) -> None:
    fake = trees.intel_xeon_8260(tmp_path)
    text = fake.read("/proc/cpuinfo").replace("Platinum 8260", "Platinum 9999")
    fake.put("/proc/cpuinfo", text)
    status = cpu_hardware_status(discover_cpu(fake), catalog)
    assert status.quality is DiscoveryQuality.HEURISTIC
    assert status.cpu.model is None
    assert "9999" in (status.cpu.raw_model or "")


# --- D: RAPL locked by the BIOS ------------------------------------------------------------------


def test_bios_locked_limits_leave_no_cpu_cap_and_a_warning(
    tmp_path: Path, catalog: Catalog
) -> None:
    fake = trees.intel_bios_locked(tmp_path)
    before = discover_cpu(fake)
    assert before.control_available  # the files look writable until a write is refused
    probed = probe_cpu_locks(fake, before)
    assert [z.locked for z in probed.powercap.zones] == [True, True]
    cpu = cpu_hardware_status(probed, catalog).cpu
    assert cpu.control_available is False
    assert cpu.cap_range is None
    assert sum("locked by the BIOS" in w for w in cpu.warnings or []) == 2
    # The probe wrote each limit's own value back, nothing else.
    assert fake.writes == [
        (f"/sys/class/powercap/intel-rapl:{s}/constraint_0_power_limit_uw", "165000000")
        for s in (0, 1)
    ]


def test_probe_on_an_unlocked_node_changes_nothing(tmp_path: Path) -> None:
    fake = trees.intel_xeon_8260(tmp_path)
    probed = probe_cpu_locks(fake, discover_cpu(fake))
    assert [z.locked for z in probed.powercap.zones] == [False, False]
    assert probed.control_available
    limit = "/sys/class/powercap/intel-rapl:0/constraint_0_power_limit_uw"
    assert fake.read_int(limit) == trees.INTEL_LONG_TERM_UW
    assert probed.warnings == ()


# --- E: energy counters and wrap-around ----------------------------------------------------------


def test_counter_read_across_its_wrap(tmp_path: Path) -> None:
    fake = trees.energy_near_wrap(tmp_path)
    zone = discover_cpu(fake).powercap.zones[0]
    assert zone.energy_path is not None
    assert zone.max_energy_range_uj is not None
    first = fake.read_int(zone.energy_path)
    trees.wrap_counter(fake)
    second = fake.read_int(zone.energy_path)
    assert second < first
    assert energy_delta_uj(first, second, zone.max_energy_range_uj) == 329_850
    watts = average_power_watts(first, second, 0.5, zone.max_energy_range_uj, 400)
    assert watts == pytest.approx(0.6597)


def test_power_samples_that_cannot_be_trusted_are_dropped() -> None:
    span = trees.INTEL_PACKAGE_ENERGY_RANGE_UJ
    assert average_power_watts(0, 1_000_000, 0, span) is None  # no time passed
    assert average_power_watts(0, span + 1, 1, span) is None  # not this counter
    # Long enough for two wraps at 400 W: the count is ambiguous.
    assert average_power_watts(0, 1_000, 700, span, 400) is None
    # 100 J in 0.1 s is 1000 W, beyond a 400 W package: a reset, not energy.
    assert average_power_watts(0, 100_000_000, 0.1, span, 400) is None
    assert average_power_watts(0, 100_000_000, 1.0, span, 400) == pytest.approx(100)


@given(
    span=st.integers(min_value=1, max_value=2**64),
    data=st.data(),
)
def test_energy_delta_is_exact_across_at_most_one_wrap(span: int, data: st.DataObject) -> None:
    previous = data.draw(st.integers(min_value=0, max_value=span - 1))
    used = data.draw(st.integers(min_value=0, max_value=span - 1))
    current = (previous + used) % span
    delta = energy_delta_uj(previous, current, span)
    assert delta >= 0
    assert delta == used


@given(
    span=st.integers(min_value=1, max_value=2**40),
    data=st.data(),
)
def test_energy_delta_is_never_negative(span: int, data: st.DataObject) -> None:
    readings = st.integers(min_value=0, max_value=span)
    assert energy_delta_uj(data.draw(readings), data.draw(readings), span) >= 0


def test_cpu_lists_in_every_kernel_spelling() -> None:
    assert parse_cpu_list("0-3,8,10-11") == (0, 1, 2, 3, 8, 10, 11)
    assert parse_cpu_list("0 2") == (0, 2)
    assert parse_cpu_list("0,2") == (0, 2)
    assert parse_cpu_list("") == ()
    assert parse_cpu_list(None) == ()
