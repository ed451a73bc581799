"""The one definition of a saving (``joulie.sim.saving``): over the same window, the run that
finished first idling on, or inside a shared measurement window; and per completed work-hour,
each run's own energy over its own work."""

from __future__ import annotations

from dataclasses import replace

import pytest

from joulie.sim.results import RunResult, WindowResult
from joulie.sim.saving import compare, energy_per_work_h, pairs, savings, section
from tests.unit.test_sim_report import make_result


def windowed(run: RunResult, facility_kwh: float, work_h: float) -> RunResult:
    window = WindowResult(
        start_s=3600.0,
        end_s=7200.0,
        it_energy_kwh=facility_kwh / 1.25,
        facility_energy_kwh=facility_kwh,
        completed_work_h=work_h,
        classes=run.classes,
    )
    return replace(run, window=window)


def test_the_run_that_finished_first_idles_on_until_the_other_is_done() -> None:
    a = make_result("s", "A", 1, 100.0, simulated_s=3600.0, idle_it_w=2000.0, work_h=40.0)
    b = make_result("s", "B", 1, 110.0, simulated_s=7200.0, idle_it_w=2000.0, work_h=40.0)
    s = compare(b, a)
    assert (s.window_start_s, s.window_end_s) == (0.0, 7200.0)
    assert s.reference_facility_kwh == pytest.approx(100.0 + 2.5)  # 2.5 kW for an hour
    assert s.reference_it_kwh == pytest.approx(80.0 + 2.0)
    assert (s.facility_kwh, s.it_kwh) == (110.0, 88.0)
    assert s.facility_saving_pct == pytest.approx(100 * (1 - 110 / 102.5))
    assert s.it_saving_pct == pytest.approx(100 * (1 - 88 / 82))
    # Per work-hour nothing idles on: each run's own energy over the same work.
    assert s.kwh_per_work_h == pytest.approx(110 / 40)
    assert s.per_work_h_saving_pct == pytest.approx(-10.0)


def test_runs_that_share_a_measurement_window_are_compared_inside_it() -> None:
    a = windowed(make_result("s", "A", 1, 500.0, work_h=80.0), 100.0, work_h=20.0)
    b = windowed(make_result("s", "B", 1, 400.0, work_h=80.0), 90.0, work_h=15.0)
    s = compare(b, a)
    assert (s.window_start_s, s.window_end_s) == (3600.0, 7200.0)
    assert (s.facility_kwh, s.reference_facility_kwh) == (90.0, 100.0)
    assert s.facility_saving_pct == pytest.approx(10.0)
    # B did less work in the window: per work-hour it used more.
    assert energy_per_work_h(b) == pytest.approx(6.0)
    assert s.per_work_h_saving_pct == pytest.approx(100 * (1 - 6.0 / 5.0))
    # Without the same window on both, the union window of the whole runs.
    s = compare(make_result("s", "B", 1, 400.0), a)
    assert (s.window_start_s, s.reference_facility_kwh) == (0.0, 500.0)


def test_no_completed_work_has_no_energy_per_work_hour() -> None:
    a = make_result("s", "A", 1, 100.0, work_h=0.0)
    s = compare(make_result("s", "B", 1, 90.0), a)
    assert s.reference_kwh_per_work_h is None
    assert s.per_work_h_saving_pct is None
    assert s.facility_saving_pct == pytest.approx(10.0)


def test_each_run_is_paired_with_the_a_of_its_scenario_and_seed() -> None:
    runs = [
        make_result("s", "A", 1),
        make_result("s", "B", 1),
        make_result("s", "B", 2),
        make_result("t", "C", 1),
    ]
    refs = [ref for _, ref in pairs(runs)]
    assert refs == [runs[0], runs[0], None, None]
    assert [s is not None for s in savings(runs)] == [False, True, False, False]
    assert section(runs[0], runs[0])["reference"] == "this run"
    assert section(runs[2], None) == {"reference": None}
    assert section(runs[1], runs[0])["reference"] == {"baseline": "A", "seed": 1}
