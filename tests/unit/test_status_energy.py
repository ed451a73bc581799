"""`joulie status --energy` as a reader sees it: the accounts largest first in kWh with their
share and net saving, the overhead, the total and the cluster's saving."""

from __future__ import annotations

import json

from joulie.cli.status.command import render
from joulie.cli.status.energy import ROWS_SHOWN, energy_report
from joulie.manager.energy_store import StoredTotals

KWH = 3.6e6


def totals() -> StoredTotals:
    return StoredTotals(
        accounts={"team-a/standard": 2 * KWH, "team-b/performance": 6 * KWH},
        overhead=2 * KWH,
        through=1_790_000_000.0,
        # team-a's capped work saved 1 kWh gross and its controls cost 0.5 elsewhere: net 0.5.
        saved={"team-a/standard": 1.0 * KWH},
        lost={"team-a/standard": 0.5 * KWH},
    )


def test_the_table_lists_the_largest_consumer_first_with_its_share() -> None:
    text = render(energy_report(totals()), "table")
    lines = text.splitlines()
    assert lines[0].endswith("through 2026-09-21T14:13:20Z")
    rows = [line.split() for line in lines[2:4]]
    assert rows[0] == ["team-b", "performance", "6.000", "60.0", "%", "0.000", "0.0", "%"]
    # 0.5 kWh net of the 2.5 the same work would have drawn without the controls: 20 %.
    assert rows[1] == ["team-a", "standard", "2.000", "20.0", "%", "0.500", "20.0", "%"]
    assert "node overhead (no pod explains it): 2.000 kWh" in text
    assert "total: 10.000 kWh" in text
    assert "saved: 0.500 kWh (5.9 % of what the same work would have drawn" in text


def test_json_has_every_account_with_its_net_saving() -> None:
    data = json.loads(render(energy_report(totals()), "json"))
    assert data["total_kwh"] == 10.0
    assert data["accounts"][1] == {
        "namespace": "team-a",
        "class": "standard",
        "kwh": 2.0,
        "saved_kwh": 0.5,
        "saved_pct": 20.0,
    }
    assert data["saved_kwh"] == 0.5


def test_a_long_list_is_cut_with_a_count_of_the_rest() -> None:
    many = StoredTotals(accounts={f"ns-{i:03d}/standard": float(i + 1) for i in range(45)})
    text = render(energy_report(many), "table")
    assert f"... and {45 - ROWS_SHOWN} more accounts" in text
    assert len(json.loads(render(energy_report(many), "json"))["accounts"]) == 45


def test_before_the_first_reading_the_table_says_so() -> None:
    text = render(energy_report(StoredTotals()), "table")
    assert "no reading counted yet" in text
    assert "total: 0.000 kWh" in text


def test_podgroups_are_listed_largest_first_after_the_classes() -> None:
    gangs = StoredTotals(
        accounts={"ml/standard": 4 * KWH},
        groups=(("ml/small", (1 * KWH, 0.0, 0.0)), ("ml/big", (3 * KWH, 1 * KWH, 0.0))),
    )
    text = render(energy_report(gangs), "table")
    after = text.split("PodGroups")[1].splitlines()
    assert after[2].split() == ["ml", "big", "3.000", "75.0", "%", "1.000", "25.0", "%"]
    assert after[3].split()[:3] == ["ml", "small", "1.000"]
    data = json.loads(render(energy_report(gangs), "json"))
    assert [g["podgroup"] for g in data["podgroups"]] == ["big", "small"]
