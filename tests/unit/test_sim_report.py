"""What a finished run set gives a reader: canonical JSON, the comparison table, the CSV series
and the output folder with its charts, all from fabricated results (no engine needed)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from joulie.sim.report import comparison_table, table_rows, write_outputs, write_series_csv
from joulie.sim.result_io import (
    ResultFormatError,
    read_results,
    result_from_dict,
    results_json,
)
from joulie.sim.results import ClassResult, Percentiles, RunResult, Sample

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def make_result(
    scenario: str = "s1",
    baseline: str = "A",
    seed: int = 1,
    facility_kwh: float = 100.0,
    *,
    makespan_s: float | None = 7200.0,
    p95_perf: float = 1.5,
    preemptions: int = 0,
) -> RunResult:
    """A plausible result whose numbers the tests choose (IT energy is facility / 1.25)."""
    series = tuple(
        Sample(
            t_s=600.0 * i,
            it_w=1000.0 + 10.0 * i,
            facility_w=1250.0 + 12.5 * i,
            pue=1.25,
            running=i,
            pending=3 - i,
            performance_nodes=2,
            eco_nodes=1,
            draining_nodes=0,
        )
        for i in range(4)
    )
    flat = Percentiles(1.0, 1.2, 1.4)
    return RunResult(
        scenario=scenario,
        baseline=baseline,
        seed=seed,
        nodes=3,
        workloads=10,
        simulated_s=7200.0,
        it_energy_kwh=facility_kwh / 1.25,
        facility_energy_kwh=facility_kwh,
        makespan_s=makespan_s,
        completed=10 if makespan_s is not None else 8,
        unfinished=0 if makespan_s is not None else 2,
        throughput_per_h=5.0,
        preemptions=preemptions,
        preempted_pods=2 * preemptions,
        classes={
            "performance": ClassResult(
                4, 4, Percentiles(60.0, 90.0, 99.0), Percentiles(1.0, p95_perf, 2.0), flat
            ),
            "standard": ClassResult(6, 6, Percentiles(80.0, 120.0, 130.0), flat, flat),
        },
        profile_shares={
            "cpu-x86": {"performance": 0.5, "eco": 0.4, "draining": 0.1},
            "gpu-h100": {"performance": 1.0, "eco": 0.0, "draining": 0.0},
        },
        series=series,
    )


def row_of(results: list[RunResult], scenario: str, baseline: str) -> dict[str, str]:
    header, *rows = table_rows(results)
    for row in rows:
        if row[:2] == [scenario, baseline]:
            return dict(zip(header, row, strict=True))
    raise AssertionError(f"no row for {scenario}/{baseline}")


# --- canonical JSON --------------------------------------------------------------------------


def test_same_results_give_byte_identical_json_that_reads_back_equal() -> None:
    results = [make_result(), make_result(baseline="B", facility_kwh=80.0, makespan_s=None)]
    text = results_json(results)
    assert text == results_json([replace(r) for r in results])
    assert text.endswith("}\n]\n")
    assert [result_from_dict(d) for d in json.loads(text)] == results


def test_json_keys_are_sorted_and_floats_rounded_to_ten_significant_digits() -> None:
    text = results_json([make_result(facility_kwh=1 / 3)])
    loaded = json.loads(text)[0]
    assert list(loaded) == sorted(loaded)
    assert loaded["facility_energy_kwh"] == 0.3333333333
    assert '\n  {\n    "baseline": "A",' in text


def test_a_nan_is_refused_where_it_is_written() -> None:
    with pytest.raises(ValueError, match=r"\$\[0\]\.facility_energy_kwh"):
        results_json([replace(make_result(), facility_energy_kwh=float("nan"))])


def test_another_schema_version_or_a_missing_field_is_named(tmp_path: Path) -> None:
    d = json.loads(results_json([make_result()]))[0]
    with pytest.raises(ResultFormatError, match="schema_version 99"):
        result_from_dict({**d, "schema_version": 99})
    del d["classes"]["standard"]["slowdown"]
    path = tmp_path / "results.json"
    path.write_text(json.dumps([d]))
    with pytest.raises(ResultFormatError, match=r"results\.json: result\.classes\.standard"):
        read_results(path)


def test_read_results_takes_a_list_or_one_result(tmp_path: Path) -> None:
    (tmp_path / "many.json").write_text(results_json([make_result(), make_result(seed=2)]))
    (tmp_path / "one.json").write_text(json.dumps(make_result(seed=3).to_dict()))
    assert [r.seed for r in read_results(tmp_path / "many.json")] == [1, 2]
    assert [r.seed for r in read_results(tmp_path / "one.json")] == [3]


# --- the comparison table --------------------------------------------------------------------


def test_saving_is_against_baseline_a_of_the_same_scenario_and_seed() -> None:
    results = [
        make_result("s1", "A", 1, 100.0),
        make_result("s1", "B", 1, 80.0),
        make_result("s2", "A", 1, 200.0),
        make_result("s2", "C", 1, 150.0),
    ]
    assert row_of(results, "s1", "B")["saving %"] == "20.0"
    assert row_of(results, "s2", "C")["saving %"] == "25.0"
    assert row_of(results, "s1", "A")["saving %"] == "ref"
    assert row_of(results, "s1", "B")["facility kWh"] == "80.00"
    assert row_of(results, "s1", "B")["IT kWh"] == "64.00"


def test_several_seeds_show_mean_and_sample_standard_deviation() -> None:
    # Paired savings: 1 - 90/100 = 10 %, 1 - 140/200 = 30 % -> mean 20, sd sqrt(200) = 14.14.
    results = [
        make_result("s", "A", 1, 100.0, p95_perf=1.0),
        make_result("s", "A", 2, 200.0, p95_perf=3.0),
        make_result("s", "B", 1, 90.0, preemptions=1),
        make_result("s", "B", 2, 140.0, preemptions=4),
    ]
    b = row_of(results, "s", "B")
    assert b["seeds"] == "2"
    assert b["saving %"] == "20.0 ± 14.1"
    assert b["facility kWh"] == "115.00 ± 35.36"
    assert b["preemptions"] == "2.5 ± 2.1"
    assert row_of(results, "s", "A")["p95 slowdown perf"] == "2.00 ± 1.41"
    assert b["makespan h"] == "2.00 ± 0.00"


def test_a_seed_without_reference_or_with_unfinished_work_shows_a_dash() -> None:
    results = [make_result("s", "B", 1, 90.0, makespan_s=None)]
    row = row_of(results, "s", "B")
    assert row["saving %"] == "-"
    assert row["makespan h"] == "-"
    assert row["unfinished"] == "2"


def test_table_is_aligned_text_with_one_row_per_scenario_and_baseline() -> None:
    results = [make_result("s", b, seed, 100.0) for b in ("C", "A") for seed in (1, 2)]
    lines = comparison_table(results).splitlines()
    assert lines[0].startswith("scenario  baseline")
    assert set(lines[1]) == {"-", " "}
    assert [line.split()[:2] for line in lines[2:4]] == [["s", "A"], ["s", "C"]]
    assert len({len(line) for line in lines[:4]}) == 1  # every cell padded to its column


# --- CSV and the output folder ---------------------------------------------------------------


def test_series_csv_has_the_header_and_a_row_per_sample(tmp_path: Path) -> None:
    path = write_series_csv(make_result(), tmp_path / "s.csv")
    lines = path.read_text().splitlines()
    assert lines[0] == (
        "t_s,it_w,facility_w,pue,running,pending,performance_nodes,eco_nodes,draining_nodes"
    )
    assert lines[2] == "600.0,1010.0,1262.5,1.25,1,2,2,1,0"
    assert len(lines) == 5


def test_write_outputs_writes_every_file_and_valid_pngs(tmp_path: Path) -> None:
    results = [
        make_result("sweep/a", b, seed, 100.0 - 10 * i)
        for i, b in enumerate("ABC")
        for seed in (1, 2)
    ]
    results.append(make_result("b", "A", 1, makespan_s=None))
    paths = write_outputs(results, tmp_path)
    names = sorted(p.name for p in paths)
    assert "sweep_a-B-seed2.csv" in names
    assert {"results.json", "table.txt", "b-A-seed1.csv"} <= set(names)
    pngs = [p for p in paths if p.suffix == ".png"]
    assert {p.name for p in pngs} == {
        "energy_vs_makespan.png",
        "power_over_time.png",
        "profile_shares.png",
    }
    for png in pngs:
        data = png.read_bytes()
        assert data.startswith(PNG_SIGNATURE)
        assert len(data) > 5000, png.name
    assert read_results(tmp_path / "results.json") == results


def test_runs_sharing_a_name_do_not_overwrite_each_other(tmp_path: Path) -> None:
    paths = write_outputs([make_result(), make_result()], tmp_path, plots=False)
    assert sorted(p.name for p in paths if p.suffix == ".csv") == [
        "s1-A-seed1-2.csv",
        "s1-A-seed1.csv",
    ]
