"""The demo's answer (issue #29 item 4): its summary states energy used, what the same work would
have drawn without Joulie's controls and the saving, per workload class and in all, on a named
clock; its live view shows the saving so far from the manager's counters. Nothing is presented
as a saving when nothing was booked."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from hack.demo.energy import metric_totals, saving
from hack.demo.view import frame_text, summary_text
from joulie.cli.status.energy import energy_report
from joulie.manager.energy import EnergyCounters
from tests.support.demo_figures import KWH, booked_energy, frame, outcome, stored_totals

TOTALS = stored_totals(
    {
        "joulie-demo/standard": 1.5,
        "joulie-demo/performance": 0.8,
        "batch/standard": 0.5,
    },
    saved={"joulie-demo/standard": 0.2, "batch/standard": 0.1, "joulie-demo/performance": 0.01},
    lost={"joulie-demo/performance": 0.05},
    overhead=0.4,
)


def lines_of(text: str, start: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith(start)]


def test_the_summary_gives_used_without_joulie_and_the_saving_per_class_and_in_all() -> None:
    text = summary_text(outcome(booked=booked_energy(TOTALS)))

    # Standard sums its two namespaces: used 2.0, net saved 0.3, so 2.3 without the controls.
    assert lines_of(text, "standard:") == [
        "standard: used 2.000 kWh, without Joulie's controls 2.300 kWh, saved 0.300 kWh (13.0 %)"
    ]
    # A control that cost more than it saved is shown as a cost, never netted into zero.
    assert lines_of(text, "performance:") == [
        "performance: used 0.800 kWh, without Joulie's controls 0.760 kWh, "
        "saved -0.040 kWh (-5.3 %)"
    ]
    assert lines_of(text, "all classes:") == [
        "all classes: used 2.800 kWh, without Joulie's controls 3.060 kWh, saved 0.260 kWh (8.5 %)"
    ]
    assert lines_of(text, "saving:") == [
        "saving: 0.260 kWh (8.5 %) of 3.060 kWh the same work would draw without Joulie's controls"
    ]
    # The overhead is stated, and kept out of the saving's share.
    assert "node overhead, outside the saving (no pod explains it): 0.400 kWh" in text


def test_the_summary_names_the_clock_the_accounts_count_in() -> None:
    text = summary_text(
        outcome(duration_s=45.0, simulated_s=45.0 * 30, booked=booked_energy(TOTALS))
    )
    assert "simulated watts over wall-clock seconds" in text
    assert "on the simulated clock each figure is x30" in text
    # The simulator's own figure says it is on the simulated clock.
    assert "36.1 kWh (the simulator's count, simulated clock)" in text


def test_the_summary_uses_the_status_commands_arithmetic() -> None:
    report = energy_report(TOTALS)
    result = booked_energy(TOTALS)
    assert result.total.saved_kwh == pytest.approx(report.saved_kwh)
    assert result.total.saved_pct == pytest.approx(report.saved_pct)
    assert result.total.used_kwh + result.overhead_kwh == pytest.approx(report.total_kwh)


def test_nothing_booked_is_said_plainly_not_shown_as_a_zero_saving() -> None:
    text = summary_text(outcome(booked=booked_energy(stored_totals({}, overhead=0.2))))
    assert lines_of(text, "saving:") == [
        "saving: none to report: the manager booked no energy to any pod (node overhead 0.200 kWh)"
    ]
    assert "saved 0.000" not in text
    assert "0.0 %" not in text


def test_accounts_that_could_not_be_read_say_why() -> None:
    text = summary_text(outcome(booked_problem="connection refused"))
    assert lines_of(text, "saving:") == [
        "saving: not known: the manager's energy accounts were not read (connection refused)"
    ]


def test_the_summary_shows_what_joulie_status_energy_printed() -> None:
    table = "energy used since the manager began counting\nNAMESPACE  CLASS\n\ntotal: 1 kWh"
    text = summary_text(outcome(booked=booked_energy(TOTALS), status_energy=table))
    assert "  `joulie status --energy` against the demo cluster, before it stopped:" in text
    assert "    NAMESPACE  CLASS" in text
    assert "    total: 1 kWh" in text


def test_the_summary_json_carries_the_saving() -> None:
    result = json.loads(json.dumps(asdict(outcome(booked=booked_energy(TOTALS)))))
    assert result["booked"]["total"]["saved_kwh"] == pytest.approx(0.26)
    assert result["booked"]["by_class"]["standard"]["without_kwh"] == pytest.approx(2.3)
    assert result["booked"]["overhead_kwh"] == pytest.approx(0.4)


def manager_metrics() -> str:
    """The manager's exposition after it booked the demo's energy (its real counters)."""
    registry = CollectorRegistry()
    counters = EnergyCounters.registered(registry)
    counters.workload.labels("joulie-demo", "standard").inc(0.9 * KWH)
    counters.workload.labels("joulie-demo", "performance").inc(0.1 * KWH)
    counters.saved.labels("joulie-demo", "standard").inc(0.12 * KWH)
    counters.lost.labels("joulie-demo", "standard").inc(0.02 * KWH)
    counters.overhead.inc(0.3 * KWH)
    return generate_latest(registry).decode()


def test_the_live_view_reads_the_managers_counters_as_the_stored_totals() -> None:
    totals = metric_totals(manager_metrics())
    assert totals.accounts == pytest.approx(
        {"joulie-demo/standard": 0.9 * KWH, "joulie-demo/performance": 0.1 * KWH}
    )
    assert totals.saved == pytest.approx({"joulie-demo/standard": 0.12 * KWH})
    assert totals.lost == pytest.approx({"joulie-demo/standard": 0.02 * KWH})
    assert totals.overhead == pytest.approx(0.3 * KWH)


def test_the_live_view_shows_the_running_saving() -> None:
    so_far = saving(energy_report(metric_totals(manager_metrics())).accounts)
    text = frame_text(frame(booked=so_far))
    # Net 0.10 kWh of the 1.10 kWh the work would have drawn without the controls.
    assert lines_of(text, "saved so far:") == [
        "saved so far: 0.100 kWh (9.1 %); booked to pods 1.000 kWh "
        "(the manager's books, wall-clock kWh)"
    ]


def test_the_live_view_before_anything_is_booked_or_readable() -> None:
    nothing = saving(energy_report(metric_totals("")).accounts)
    assert "saved so far: nothing booked yet" in frame_text(frame(booked=nothing))
    assert "saved so far: not known" in frame_text(frame(booked=None))
