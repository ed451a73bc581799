"""The digital twin's formulas: every worked example of the specification to its printed precision,
the edge cases that upstream got wrong, the power trend and the freshness rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from joulie.api.enums import Profile, SchedulableClass
from joulie.api.nodetwin import CpuSpec, GpuPowerCap, GpuSpec, NodeTwinSpec, NodeTwinStatus
from joulie.core.twin import (
    PowerHistory,
    TwinHardware,
    TwinInput,
    ambient_multiplier,
    cap_percentages,
    compute,
    estimated_pue,
    looks_like_energy,
    measurement_failed,
    status_fields,
    twin_is_fresh,
)

EXAMPLES: dict[str, Any] = yaml.safe_load(
    (Path(__file__).resolve().parents[1] / "data/spec/twin-examples.yaml").read_text()
)
REFERENCE = EXAMPLES["reference_node"]
HW = TwinHardware(**REFERENCE["hardware"])


def reference(measured_w: float, **kwargs: Any) -> TwinInput:
    values: dict[str, Any] = {
        "hardware": HW,
        "schedulable_class": SchedulableClass.ECO,
        "cpu_cap_pct": REFERENCE["cpu_cap_pct"],
        "gpu_cap_pct": REFERENCE["gpu_cap_pct"],
        "measured_power_w": measured_w,
        "source": "http",
    }
    values.update(kwargs)
    return TwinInput(**values)


# --- the specification's worked examples ---------------------------------------------------


def test_reference_node_budgets() -> None:
    out = compute(reference(0))
    for name, watts in REFERENCE["expect"].items():
        assert getattr(out, name) == pytest.approx(watts), name


@pytest.mark.parametrize("case", EXAMPLES["cooling_stress"], ids=lambda c: f"{c['ambient_c']}C")
def test_cooling_stress_examples(case: dict[str, Any]) -> None:
    out = compute(reference(case["measured_w"], ambient_c=case["ambient_c"]))
    assert round(out.cooling_stress, case["digits"]) == case["expect"]


@pytest.mark.parametrize("case", EXAMPLES["headroom"], ids=lambda c: f"{c['measured_w']}W")
def test_headroom_examples(case: dict[str, Any]) -> None:
    out = compute(reference(case["measured_w"]))
    assert round(out.power_headroom, case["digits"]) == case["expect"]


def test_psu_stress_example() -> None:
    (case,) = EXAMPLES["psu_stress"]
    out = compute(reference(0, rack_power_w=case["rack_power_w"], cluster_power_w=90_000))
    assert round(out.psu_stress, case["digits"]) == case["expect"]


def test_density_example() -> None:
    (case,) = EXAMPLES["density"]
    out = compute(reference(0))
    assert (HW.physical_cores, HW.gpu_count) == (case["physical_cores"], case["gpu_count"])
    assert round(out.hardware_density, case["digits"]) == case["expect"]


def test_pue_example_and_the_reference_node_at_25c() -> None:
    (case,) = EXAMPLES["pue"]
    assert round(estimated_pue(case["cooling_stress"]), case["digits"]) == case["expect"]
    out = compute(reference(1160, ambient_c=25))
    assert round(out.estimated_pue, case["digits"]) == case["expect"]


@pytest.mark.parametrize("case", EXAMPLES["ambient_multiplier"], ids=lambda c: f"{c['ambient_c']}C")
def test_ambient_multiplier_table(case: dict[str, Any]) -> None:
    assert round(ambient_multiplier(case["ambient_c"]), case["digits"]) == case["expect"]


def test_written_status_shows_the_examples_at_their_printed_precision() -> None:
    fields = status_fields(compute(reference(1160, ambient_c=25)))
    assert fields["predictedCoolingStressScore"] == 55.6
    assert fields["predictedPowerHeadroomScore"] == 16.7
    assert fields["estimatedPUE"] == 1.24
    assert fields["hardwareDensityScore"] == 75.0
    assert fields["schedulableClass"] == "eco"
    assert fields["effectiveCapState"] == {"cpuPct": 60.0, "gpuPct": 60.0}
    assert fields["powerMeasurement"] == {
        "source": "http",
        "measuredNodePowerW": 1160,
        "cpuCappedPowerW": 432,
        "gpuCappedPowerW": 960,
        "nodeCappedPowerW": 1392,
        "cpuTdpW": 720,
        "gpuTdpW": 1600,
        "nodeTdpW": 2320,
        "powerTrendWPerMin": 0.0,
    }
    over = status_fields(compute(reference(1600)))
    assert over["predictedPowerHeadroomScore"] == -14.9
    # The status fits the CRD's model (scores within their declared ranges).
    NodeTwinStatus.model_validate(fields)
    NodeTwinStatus.model_validate(over)


# --- edge cases ------------------------------------------------------------------------------


def test_unknown_socket_count_assumes_one_socket_not_zero() -> None:
    for sockets in (None, 0):
        hw = TwinHardware(cpu_max_watts_per_socket=360, sockets=sockets, physical_cores=96)
        out = compute(reference(300, hardware=hw, cpu_cap_pct=None, gpu_cap_pct=None))
        assert out.cpu_tdp_w == 360
        # A busy node looks busy instead of infinitely free.
        assert round(out.power_headroom, 1) == 16.7


def test_no_hardware_is_neutral() -> None:
    out = compute(reference(800, hardware=TwinHardware()))
    assert out.node_tdp_w == 0
    assert out.node_capped_power_w == 0
    assert out.power_headroom == 100.0
    assert out.cooling_stress == 0.0
    assert out.estimated_pue == 1.05
    assert out.hardware_density == 0.0


def test_zero_budget_reads_100_even_with_a_tdp() -> None:
    # A GPU-only budget with GPUs of unknown power and no CPU figure: budget 0, headroom 100.
    hw = TwinHardware(gpu_count=4, gpu_max_watts=None)
    assert compute(reference(500, hardware=hw)).power_headroom == 100.0


def test_headroom_is_capped_at_100_only_at_the_top() -> None:
    assert compute(reference(0)).power_headroom == 100.0
    assert compute(reference(10_000)).power_headroom < -600


@pytest.mark.parametrize("ambient", [0.0, -10.0, None])
def test_zero_negative_and_missing_ambient_are_unknown(ambient: float | None) -> None:
    assert round(compute(reference(1160, ambient_c=ambient)).cooling_stress, 1) == 50.0


def test_cooling_stress_clamps_at_100_and_the_multiplier_floors_at_half() -> None:
    assert compute(reference(2320, ambient_c=45)).cooling_stress == 100.0
    assert ambient_multiplier(80) == 2.0


def test_psu_stress_falls_back_to_the_cluster_total_then_zero() -> None:
    assert compute(reference(0, cluster_power_w=25_000)).psu_stress == 50.0
    assert compute(reference(0, rack_power_w=0, cluster_power_w=25_000)).psu_stress == 50.0
    assert compute(reference(0)).psu_stress == 0.0
    assert compute(reference(0, rack_power_w=80_000)).psu_stress == 100.0


def test_density_without_gpus_and_above_the_reference() -> None:
    assert compute(reference(0, hardware=TwinHardware(physical_cores=96))).hardware_density == 50.0
    big = TwinHardware(physical_cores=384, gpu_count=16)
    assert compute(reference(0, hardware=big)).hardware_density == 100.0


def test_cap_percentages_default_to_100_when_unset_or_not_positive() -> None:
    for pct in (None, 0.0, -5.0):
        out = compute(reference(0, cpu_cap_pct=pct, gpu_cap_pct=pct))
        assert (out.cpu_cap_pct, out.gpu_cap_pct) == (100.0, 100.0)
        assert out.node_capped_power_w == out.node_tdp_w


def intent(
    cpu_watts: float | None = None,
    cpu_pct: float | None = None,
    gpu_watts: float | None = None,
    gpu_pct: float | None = None,
) -> NodeTwinSpec:
    return NodeTwinSpec(
        node_name="n",
        profile=Profile.ECO,
        cpu=CpuSpec(package_power_cap_watts=cpu_watts, package_power_cap_pct_of_max=cpu_pct),
        gpu=GpuSpec(power_cap=GpuPowerCap(cap_watts_per_gpu=gpu_watts, cap_pct_of_max=gpu_pct)),
    )


def test_cap_percentages_of_an_intent() -> None:
    assert cap_percentages(intent(cpu_pct=60, gpu_pct=60), HW) == (60, 60)
    # A GPU node's CPU is capped at 5000 W a package, far above its TDP: uncapped.
    assert cap_percentages(intent(cpu_watts=5000), HW) == (100, None)
    # CPU watts are per package: 180 W of a 360 W package is 50 %, on one socket or two.
    assert cap_percentages(intent(cpu_watts=180), HW)[0] == 50
    assert cap_percentages(intent(), HW) == (None, None)
    # Watts win over the percentage when both are written.
    assert cap_percentages(intent(cpu_watts=180, cpu_pct=60, gpu_watts=300, gpu_pct=60), HW) == (
        50,
        75,
    )


def test_a_w7900_at_eco_is_budgeted_at_the_200_w_its_agent_enforces() -> None:
    # Radeon PRO W7900 (catalog: 200-295 W). At eco the manager writes 60 % and 200 W per GPU
    # (60 % of 295 W is below the board's floor); the agent applies the 200 W.
    hw = TwinHardware(gpu_count=4, gpu_max_watts=295, gpu_min_watts=200)
    cpu_pct, gpu_pct = cap_percentages(intent(gpu_watts=200, gpu_pct=60), hw)
    assert gpu_pct is not None
    assert round(gpu_pct, 1) == 67.8
    out = compute(reference(0, hardware=hw, cpu_cap_pct=cpu_pct, gpu_cap_pct=gpu_pct))
    assert out.gpu_capped_power_w == pytest.approx(800)
    # A percentage alone is clamped into the board's range as the agent clamps it.
    assert cap_percentages(intent(gpu_pct=60), hw) == (None, gpu_pct)


def test_cpu_budget_counts_the_per_package_cap_once_per_socket() -> None:
    cpu_pct, _ = cap_percentages(intent(cpu_watts=250), HW)
    out = compute(reference(0, cpu_cap_pct=cpu_pct))
    assert out.cpu_capped_power_w == pytest.approx(2 * 250)


def test_bad_measurements_count_as_zero() -> None:
    for value in (float("nan"), float("inf"), -50.0):
        out = compute(reference(value))
        assert out.measured_power_w == 0.0
        assert out.power_headroom == 100.0


def test_joules_counter_signature() -> None:
    assert looks_like_energy(4641, 2320)
    assert not looks_like_energy(4640, 2320)
    assert not looks_like_energy(1e9, 0)


@given(
    measured=st.floats(0, 1e5),
    per_socket=st.floats(1, 1000),
    sockets=st.integers(0, 8),
    gpus=st.integers(0, 16),
    gpu_w=st.floats(1, 1500),
    cpu_pct=st.floats(0, 100),
    gpu_pct=st.floats(0, 100),
    ambient=st.none() | st.floats(-50, 80),
)
def test_invariants(
    measured: float,
    per_socket: float,
    sockets: int,
    gpus: int,
    gpu_w: float,
    cpu_pct: float,
    gpu_pct: float,
    ambient: float | None,
) -> None:
    hw = TwinHardware(per_socket, sockets, 64, gpus, gpu_w)
    out = compute(reference(measured, hardware=hw, cpu_cap_pct=cpu_pct, gpu_cap_pct=gpu_pct))
    assert out.node_capped_power_w <= out.node_tdp_w + 1e-6
    assert out.power_headroom <= 100.0
    assert 0.0 <= out.cooling_stress <= 100.0
    assert 1.05 <= out.estimated_pue <= 1.40 + 1e-9
    # More power never means more headroom.
    more = compute(reference(measured + 100, hardware=hw, cpu_cap_pct=cpu_pct, gpu_cap_pct=gpu_pct))
    assert more.power_headroom <= out.power_headroom
    NodeTwinStatus.model_validate(status_fields(out))


# --- trend -----------------------------------------------------------------------------------


def test_trend_is_watts_per_minute_over_the_window() -> None:
    history = PowerHistory(window_s=300)
    history.record("n", 0, 1000)
    assert history.trend("n") == 0.0  # one reading is no rate
    history.record("n", 60, 1100)
    assert history.trend("n") == pytest.approx(100.0)
    history.record("n", 120, 1200)
    assert history.trend("n") == pytest.approx(100.0)
    # Older readings leave the window: only the flat tail counts.
    for t in (400, 460, 520):
        history.record("n", t, 1200)
    assert history.trend("n") == pytest.approx(0.0)


def test_trend_resists_one_outlier_better_than_endpoints() -> None:
    history = PowerHistory(window_s=300)
    for t, w in ((0, 1000), (60, 1000), (120, 1000), (180, 1000), (240, 1300)):
        history.record("n", t, w)
    assert 0 < history.trend("n") < 300 / 4


def test_trend_needs_readings_spread_in_time_and_ignores_repeats() -> None:
    history = PowerHistory(window_s=300)
    history.record("n", 0, 1000)
    history.record("n", 1, 2000)
    assert not history.known("n")
    assert history.trend("n") == 0.0
    history.record("n", 1, 9999)  # same instant again: kept out
    history.record("n", 7, 2000)
    assert history.known("n")
    assert history.trend("n") > 0


def test_vanished_nodes_are_forgotten() -> None:
    history = PowerHistory(window_s=300)
    for node in ("a", "b", "c"):
        history.record(node, 0, 1)
    history.forget({"a", "c"})
    assert len(history) == 2
    assert not history.known("b")


# --- freshness -------------------------------------------------------------------------------


def test_fresh_while_the_lease_is_renewed_and_the_read_succeeded() -> None:
    assert twin_is_fresh("prometheus", lease_renewed_at=100, lease_duration_s=15, now=110)
    assert twin_is_fresh("static", 100, 15, 115)


def test_stale_when_the_manager_stopped_renewing() -> None:
    assert not twin_is_fresh("http", 100, 15, 116)
    assert not twin_is_fresh("http", None, 15, 100)


@pytest.mark.parametrize(
    "source", ["http-error", "prometheus-error", "prometheus-no-data", "unmanaged", None]
)
def test_stale_when_the_nodes_read_failed(source: str | None) -> None:
    assert measurement_failed(source)
    assert not twin_is_fresh(source, 100, 15, 101)
