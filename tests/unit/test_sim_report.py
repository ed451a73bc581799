"""What a finished run set gives a reader: canonical JSON, the comparison table, the CSV series
and the output folder with its charts, from fabricated results, and from a tiny simulation where
the table, results.json and the energy chart must agree on every saving figure."""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.transforms import Bbox

from joulie.api.text_table import header_cell
from joulie.hardware.catalog import Catalog
from joulie.sim.engine import Engine, Scenario
from joulie.sim.plots import (
    DPI,
    SAVE_BBOX,
    class_figure,
    class_saving_label,
    energy_figure,
    saving_label,
)
from joulie.sim.report import (
    COLUMNS,
    LIFECYCLE_COLUMNS,
    class_rows,
    comparison_table,
    table_rows,
    write_outputs,
    write_series_csv,
)
from joulie.sim.result_io import (
    ResultFormatError,
    read_results,
    result_from_dict,
    results_json,
)
from joulie.sim.results import (
    ClassResult,
    Percentiles,
    RunResult,
    Sample,
    WindowResult,
    WorkloadEnergy,
)
from joulie.sim.scenario import DEFAULT_POLICY
from tests.support.sim_builders import TWO_GPU_NODES, gpu_job

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
    simulated_s: float = 7200.0,
    work_h: float = 50.0,
    idle_it_w: float = 0.0,
    energy: WorkloadEnergy | None = None,
) -> RunResult:
    """A plausible result whose numbers the tests choose (IT energy is facility / 1.25, and so
    is the idle draw after the end; ``energy``: its split per workload)."""
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
        simulated_s=simulated_s,
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
        idle_it_w=idle_it_w,
        idle_facility_w=idle_it_w * 1.25,
        completed_work_h=work_h,
        energy_by_workload=energy,
    )


def split(performance: float, standard: float, overhead: float) -> WorkloadEnergy:
    """A split per workload: one kind per class, all in ``default``."""
    return WorkloadEnergy(
        by_class={"performance": performance, "standard": standard},
        by_kind={"inference": performance, "training": standard},
        by_namespace={"default": performance + standard},
        overhead_kwh=overhead,
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


def test_each_run_carries_its_saving_and_a_window_only_when_it_had_one() -> None:
    a, b = make_result(), make_result(baseline="B", facility_kwh=80.0)
    window = WindowResult(3600.0, 7200.0, 8.0, 10.0, 4.0, a.classes)
    text = results_json([a, replace(b, window=window)])
    loaded = json.loads(text)
    assert "window" not in loaded[0]
    assert loaded[1]["window"]["completed_work_h"] == 4.0
    assert loaded[0]["saving"]["reference"] == "this run"
    # A over its whole run, B over its window: not the same window, so the union window.
    assert loaded[1]["saving"]["facility_saving_pct"] == 20.0
    assert loaded[1]["saving"]["per_work_h_saving_pct"] == pytest.approx(100 * (1 - 2.5 / 2.0))
    assert [result_from_dict(d) for d in loaded] == [a, replace(b, window=window)]


def test_the_split_per_workload_reads_back_and_is_left_out_when_there_is_none() -> None:
    a = make_result(energy=split(20.0, 40.0, 20.0))
    b = make_result(baseline="B", facility_kwh=75.0, energy=split(25.0, 20.0, 15.0))
    window = WindowResult(3600.0, 7200.0, 8.0, 10.0, 4.0, a.classes, split(2.0, 4.0, 2.0))
    results = [a, replace(b, window=window), make_result(seed=2)]
    loaded = json.loads(results_json(results))
    assert loaded[0]["energy_by_workload"]["by_kind"] == {"inference": 20.0, "training": 40.0}
    assert loaded[1]["window"]["energy_by_workload"]["overhead_kwh"] == 2.0
    assert "energy_by_workload" not in loaded[2]
    assert [result_from_dict(d) for d in loaded] == results
    # B's classes against A over the same window (both end at 2 h): 1 - 25 / 20, 1 - 20 / 40.
    by_class = loaded[1]["saving"]["by_class"]
    assert list(by_class) == ["overhead", "performance", "standard"]  # JSON keys sorted
    assert by_class["standard"] == {
        "run_kwh": 20.0,
        "reference_kwh": 40.0,
        "saving_kwh": 20.0,
        "saving_pct": 50.0,
    }
    assert by_class["performance"]["saving_pct"] == -25.0
    assert by_class["overhead"]["saving_kwh"] == 5.0
    assert "by_class" not in loaded[0]["saving"]  # A is the reference


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
    assert row_of(results, "s1", "B")["fac saving %"] == "20.0"
    assert row_of(results, "s1", "B")["IT saving %"] == "20.0"
    assert row_of(results, "s1", "B")["saving/work-h %"] == "20.0"
    assert row_of(results, "s2", "C")["fac saving %"] == "25.0"
    a = row_of(results, "s1", "A")
    assert (a["fac saving %"], a["IT saving %"], a["saving/work-h %"]) == ("ref",) * 3
    assert row_of(results, "s1", "B")["fac kWh"] == "80.00"
    assert row_of(results, "s1", "B")["IT kWh"] == "64.00"
    assert row_of(results, "s1", "B")["fac kWh/work-h"] == "1.6000"


def test_the_earlier_finisher_idles_on_in_the_window_and_the_row_shows_both_energies() -> None:
    """A finishes after 2 h, B after 3 h: over B's 3 h A draws 1 kW IT more (1.25 kW at the
    facility), so the window's saving is not the ratio of the own-end figures."""
    a = make_result("s", "A", 1, 100.0, simulated_s=7200.0, idle_it_w=1000.0)
    b = make_result("s", "B", 1, 95.0, simulated_s=10800.0, idle_it_w=1000.0)
    row = row_of([a, b], "s", "B")
    assert row["window h"] == "3.00"
    assert (row["fac kWh w"], row["A fac kWh w"]) == ("95.00", "101.25")
    assert (row["IT kWh w"], row["A IT kWh w"]) == ("76.00", "81.00")
    assert row["fac saving %"] == "6.2"  # 1 - 95 / 101.25
    assert row["IT saving %"] == "6.2"  # 1 - 76 / 81
    assert row["saving/work-h %"] == "5.0"  # own energy, the same work: 1 - 95 / 100
    assert row_of([a, b], "s", "A")["fac kWh w"] == "-"


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
    assert b["fac saving %"] == "20.0 ± 14.1"
    assert b["saving/work-h %"] == "20.0 ± 14.1"
    assert b["fac kWh"] == "115.00 ± 35.36"
    assert b["preemptions"] == "2.5 ± 2.1"
    assert row_of(results, "s", "A")["p95 slowdown perf"] == "2.00 ± 1.41"
    assert b["makespan h"] == "2.00 ± 0.00"


def test_a_seed_without_reference_or_with_unfinished_work_shows_a_dash() -> None:
    results = [make_result("s", "B", 1, 90.0, makespan_s=None)]
    row = row_of(results, "s", "B")
    assert row["fac saving %"] == "-"
    assert row["saving/work-h %"] == "-"
    assert row["window h"] == "-"
    assert row["makespan h"] == "-"
    assert row["unfinished"] == "2"


def test_table_is_aligned_text_with_one_row_per_scenario_and_baseline() -> None:
    results = [make_result("s", b, seed, 100.0) for b in ("C", "A") for seed in (1, 2)]
    lines = comparison_table(results).splitlines()
    assert lines[0].startswith("SCENARIO  BASELINE")  # the one table style (text_table)
    assert [line.split()[:2] for line in lines[1:3]] == [["s", "A"], ["s", "C"]]
    assert len({len(line) for line in lines[:3]}) == 1  # every cell padded to its column
    assert max(len(line) for line in lines) <= 120  # blocks of column groups, not one wide line


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


# --- one saving, read the same everywhere ------------------------------------------------------


def _tiny_runs() -> list[RunResult]:
    """Two GPU nodes filled with one-GPU jobs: in B one node is eco, so B finishes later and
    A's cluster idles on in the window they share."""
    catalog = Catalog.load()
    workloads = [gpu_job(f"j{i}", 0.0, 1) for i in range(16)]
    return [
        Engine(
            Scenario(
                name="tiny",
                baseline=baseline,
                seed=1,
                inventory=TWO_GPU_NODES,
                workloads=workloads,
                catalog=catalog,
                policy=None if baseline == "A" else DEFAULT_POLICY,
            )
        ).simulate()
        for baseline in ("A", "B")
    ]


_COLUMN_NAMES = {
    header_cell(name): name
    for name in (
        "scenario",
        "baseline",
        *(name for name, _ in (*COLUMNS, *LIFECYCLE_COLUMNS)),
        *(
            f"{c} {unit}"
            for c in ("performance", "standard", "overhead")
            for unit in ("kWh", "saving %")
        ),
    )
}
"""A header as the table shows it -> the column's name (what ``table_rows`` holds)."""


def _table_cells(text: str) -> dict[str, dict[str, str]]:
    """table.txt as baseline -> column name -> cell (cells are two or more spaces apart), its
    blocks (each a header and rows, a blank line apart) read as one table."""
    lines = text.splitlines()
    rows: dict[str, dict[str, str]] = {}
    start = 0
    while start < len(lines) and lines[start].startswith("SCENARIO  BASELINE"):
        header = [_COLUMN_NAMES[h] for h in re.split(r"\s{2,}", lines[start].strip())]
        end = start + 1
        while end < len(lines) and lines[end].strip():
            cells = re.split(r"\s{2,}", lines[end].strip())
            rows.setdefault(cells[1], {}).update(zip(header, cells, strict=True))
            end += 1
        start = end + 1
    return rows


def test_table_json_and_chart_agree_on_every_saving_figure(tmp_path: Path) -> None:
    a, b = _tiny_runs()
    assert b.simulated_s > a.simulated_s  # the case where A idles on in the shared window
    write_outputs([a, b], tmp_path)

    table = _table_cells((tmp_path / "table.txt").read_text())["B"]
    saving = json.loads((tmp_path / "results.json").read_text())[1]["saving"]
    with (tmp_path / "energy_vs_makespan.csv").open() as f:
        points = {row["baseline"]: row for row in csv.DictReader(f)}
    labels = [t.get_text() for t in energy_figure([a, b]).axes[0].texts]

    # The window: 0 to B's end, A drawing its idle power after its own end.
    assert saving["reference"] == {"baseline": "A", "seed": 1}
    assert saving["window_s"] == [0.0, pytest.approx(b.simulated_s)]
    assert table["window h"] == f"{b.simulated_s / 3600:.2f}"
    idle_kwh = a.idle_facility_w * (b.simulated_s - a.simulated_s) / 3.6e6
    assert saving["facility_kwh"]["reference"] == pytest.approx(a.facility_energy_kwh + idle_kwh)
    assert saving["facility_kwh"]["run"] == pytest.approx(b.facility_energy_kwh)
    for name, kind in (("IT", "it"), ("fac", "facility")):
        run, ref = saving[f"{kind}_kwh"]["run"], saving[f"{kind}_kwh"]["reference"]
        assert table[f"{name} kWh w"] == f"{run:.2f}"
        assert table[f"A {name} kWh w"] == f"{ref:.2f}"
        assert saving[f"{kind}_saving_pct"] == pytest.approx(100 * (1 - run / ref))
        assert table[f"{name} saving %"] == f"{saving[f'{kind}_saving_pct']:.1f}"
    # Per work-hour: each run's own energy over the same completed work.
    per_work = saving["facility_kwh_per_work_h"]
    assert per_work["run"] == pytest.approx(b.facility_energy_kwh / b.completed_work_h)
    assert per_work["reference"] == pytest.approx(a.facility_energy_kwh / a.completed_work_h)
    assert a.completed_work_h == b.completed_work_h == 16.0  # sixteen one-pod hour-long jobs
    pct = saving["per_work_h_saving_pct"]
    assert pct == pytest.approx(100 * (1 - per_work["run"] / per_work["reference"]))
    assert table["saving/work-h %"] == f"{pct:.1f}"
    assert float(points["B"]["saving_pct"]) == pytest.approx(pct)
    assert float(points["B"]["kwh_per_work_h"]) == pytest.approx(per_work["run"])
    assert float(points["A"]["kwh_per_work_h"]) == pytest.approx(per_work["reference"])
    assert points["A"]["saving_pct"] == ""
    assert labels == [saving_label(pct)]
    assert labels[0] == f"saving {table['saving/work-h %']} %"
    assert table["fac kWh/work-h"] == f"{per_work['run']:.4f}"
    # A's own section says it is the reference; its row says so in every saving column.
    a_saving = json.loads((tmp_path / "results.json").read_text())[0]["saving"]
    assert a_saving["reference"] == "this run"
    a_row = _table_cells((tmp_path / "table.txt").read_text())["A"]
    assert {a_row[c] for c in ("IT saving %", "fac saving %", "saving/work-h %")} == {"ref"}


def _legends(fig: Figure) -> list[Legend]:
    found = [*fig.legends]
    for ax in fig.axes:
        found += [a for a in ax.get_children() if isinstance(a, Legend)]
    return found


def test_the_energy_chart_s_legends_lie_inside_the_saved_figure() -> None:
    results = [
        make_result(s, b, 1, 100.0 - 5 * i) for s in ("s1", "s2") for i, b in enumerate("AB")
    ]
    fig = energy_figure(results)
    canvas = FigureCanvasAgg(fig)  # the renderer the PNG is drawn with
    fig.savefig(io.BytesIO(), format="png", dpi=DPI, bbox_inches=SAVE_BBOX)  # lays it out
    renderer = canvas.get_renderer()  # type: ignore[no-untyped-call]
    saved = fig.get_tightbbox(renderer).transformed(fig.dpi_scale_trans)  # what the PNG keeps
    legends = _legends(fig)
    assert len(legends) == 2  # baselines and scenarios
    for legend in legends:
        box = legend.get_window_extent(renderer)
        assert _inside(box, saved), (box, saved)
        clip = legend.get_clip_box()
        if legend.get_clip_on() and clip is not None:
            assert _inside(box, clip), "cut off by the axes"
    assert any(t.get_text() == "baseline B" for t in legends[0].get_texts())


def _inside(box: Bbox, outer: Bbox) -> bool:
    return bool(
        outer.x0 <= box.x0 <= box.x1 <= outer.x1 and outer.y0 <= box.y0 <= box.y1 <= outer.y1
    )


# --- energy per workload class, read the same everywhere ----------------------------------------


def _class_cells(text: str) -> dict[str, dict[str, str]]:
    """The energy-per-class block of table.txt as baseline -> column -> cell."""
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if "PERFORMANCE kWh" in line)
    return _table_cells("\n".join(lines[first:]))


def test_table_json_and_chart_agree_on_the_energy_per_class(tmp_path: Path) -> None:
    a, b = _tiny_runs()
    write_outputs([a, b], tmp_path)
    table = _class_cells((tmp_path / "table.txt").read_text())
    loaded = json.loads((tmp_path / "results.json").read_text())
    with (tmp_path / "energy_by_class.csv").open() as f:
        bars = {(row["baseline"], row["workload_class"]): row for row in csv.DictReader(f)}
    labels = [t.get_text() for t in class_figure([a, b]).axes[0].texts]
    assert (tmp_path / "energy_by_class.png").read_bytes().startswith(PNG_SIGNATURE)

    by_class = loaded[1]["saving"]["by_class"]
    for baseline, run_json in zip("AB", loaded, strict=True):
        energy = run_json["energy_by_workload"]
        # The run's own split adds up to its own IT energy, as its IT kWh cell reads it.
        total = sum(energy["by_class"].values()) + energy["overhead_kwh"]
        assert total == pytest.approx(run_json["it_energy_kwh"], rel=1e-9)
        for name in ("performance", "standard", "overhead"):
            kwh = energy["overhead_kwh"] if name == "overhead" else energy["by_class"][name]
            assert table[baseline][f"{name} kWh"] == f"{kwh:.2f}"
            assert float(bars[baseline, name]["kwh"]) == pytest.approx(kwh)
    # Only standard work ran: the performance class has no energy, so no saving either.
    assert table["B"]["performance kWh"] == "0.00"
    assert by_class["performance"]["saving_pct"] is None
    assert table["B"]["performance saving %"] == "-"
    for name in ("standard", "overhead"):
        pct = by_class[name]["saving_pct"]
        assert pct == pytest.approx(
            100 * (1 - by_class[name]["run_kwh"] / by_class[name]["reference_kwh"])
        )
        assert table["B"][f"{name} saving %"] == f"{pct:.1f}"
        assert float(bars["B", name]["saving_pct"]) == pytest.approx(pct)
        assert bars["A", name]["saving_pct"] == ""
        assert table["A"][f"{name} saving %"] == "ref"
    # The classes are the run's own; A idling on in the shared window is A's overhead.
    assert by_class["standard"]["run_kwh"] == pytest.approx(
        loaded[1]["energy_by_workload"]["by_class"]["standard"]
    )
    assert by_class["overhead"]["reference_kwh"] > loaded[0]["energy_by_workload"]["overhead_kwh"]
    # The chart labels B's segments with the savings the table shows.
    assert labels == [
        class_saving_label(by_class[n]["saving_pct"]) for n in ("standard", "overhead")
    ]
    assert labels[0] == f"{table['B']['standard saving %']} %"


def test_runs_without_the_split_print_no_class_block_and_draw_no_class_chart(
    tmp_path: Path,
) -> None:
    results = [make_result(), make_result(baseline="B", facility_kwh=80.0)]
    assert class_rows(results) == []
    assert "performance kWh" not in comparison_table(results)
    names = {p.name for p in write_outputs(results, tmp_path)}
    assert "energy_by_class.png" not in names


def test_the_class_block_folds_seeds_and_leaves_the_main_table_as_it_was() -> None:
    results = [
        make_result("s", "A", 1, 100.0, energy=split(20.0, 40.0, 20.0)),
        make_result("s", "A", 2, 100.0, energy=split(20.0, 40.0, 20.0)),
        make_result("s", "B", 1, 90.0, energy=split(20.0, 30.0, 22.0)),
        make_result("s", "B", 2, 90.0, energy=split(20.0, 36.0, 16.0)),
    ]
    header, *rows = class_rows(results)
    b = dict(zip(header, rows[1], strict=True))
    assert b["standard kWh"] == "33.00 ± 4.24"
    assert b["standard saving %"] == "17.5 ± 10.6"  # 25 % and 10 %
    assert b["performance saving %"] == "0.0 ± 0.0"
    plain = [replace(r, energy_by_workload=None) for r in results]
    assert comparison_table(results).startswith(comparison_table(plain))


def test_the_class_chart_s_legend_lies_inside_the_saved_figure() -> None:
    results = [
        make_result(s, b, 1, 100.0 - 5 * i, energy=split(10.0, 20.0 - i, 30.0))
        for s in ("s1", "s2")
        for i, b in enumerate("AB")
    ]
    fig = class_figure(results)
    canvas = FigureCanvasAgg(fig)
    fig.savefig(io.BytesIO(), format="png", dpi=DPI, bbox_inches=SAVE_BBOX)
    renderer = canvas.get_renderer()  # type: ignore[no-untyped-call]
    saved = fig.get_tightbbox(renderer).transformed(fig.dpi_scale_trans)
    legends = _legends(fig)
    assert len(legends) == 1
    assert [t.get_text() for t in legends[0].get_texts()] == ["overhead", "standard", "performance"]
    assert _inside(legends[0].get_window_extent(renderer), saved)
