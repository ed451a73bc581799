"""What a finished set of runs tells a reader: the comparison table, CSV series, output folder.

The table has one row per (scenario, baseline), folding the seeds: a single seed shows its value,
several show ``mean ± sd`` (sample standard deviation, n-1), because the spread across workloads
is what says whether a difference between baselines is real.

The saving columns are ``joulie.sim.saving``'s comparison with baseline A of the same scenario
and seed (the same generated workload), taken seed by seed and then folded the same way: per
completed work-hour, and IT and facility energy over the same window, with both runs' energies
over that window beside it so that each saving can be read off the row. Seeds without an A run
are left out of them, and no common seed shows ``-``. The kWh columns without ``w`` are each
run's own, to its own end (or inside its measurement window).

Below it, a second table splits each row's IT energy by workload class, and the overhead no
workload explains (``joulie.sim.workload_energy``), with each class's saving against A
(``joulie.sim.saving.class_savings``: over the window of the IT saving).
"""

from __future__ import annotations

import csv
import math
import re
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import fields
from pathlib import Path

from joulie.api.text_table import aligned
from joulie.sim.result_io import canonical_float, results_json
from joulie.sim.results import ClassResult, LifecycleResult, RunResult, Sample, WorkloadEnergy
from joulie.sim.saving import (
    OVERHEAD,
    REFERENCE_BASELINE,
    Saving,
    class_savings,
    energy_per_work_h,
    pairs,
    savings,
)

MISSING = "-"
SERIES_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(Sample))
"""CSV header: t_s, it_w, facility_w, pue, running, pending, performance_nodes, eco_nodes,
draining_nodes (the ``Sample`` fields, in their order)."""


def fold(values: Sequence[float], decimals: int) -> str:
    """One cell: the value, ``mean ± sd`` over several, ``-`` over none."""
    if not values:
        return MISSING
    if len(values) == 1:
        return f"{values[0]:.{decimals}f}"
    return f"{statistics.fmean(values):.{decimals}f} ± {statistics.stdev(values):.{decimals}f}"


def _fold_counts(values: Sequence[int]) -> str:
    if len(values) == 1:
        return str(values[0])
    return fold([float(v) for v in values], 1)


def groups(results: Iterable[RunResult]) -> dict[tuple[str, str], list[RunResult]]:
    """Runs by (scenario, baseline), sorted by key, each group's runs sorted by seed."""
    grouped: dict[tuple[str, str], list[RunResult]] = {}
    for r in results:
        grouped.setdefault((r.scenario, r.baseline), []).append(r)
    return {key: sorted(grouped[key], key=lambda r: r.seed) for key in sorted(grouped)}


def _measured(run: RunResult) -> tuple[float, float, float]:
    """(IT kWh, facility kWh, completed work-hours) of the run's own span: from 0 to its own
    end, or inside its measurement window when it has one."""
    w = run.window
    if w is not None:
        return w.it_energy_kwh, w.facility_energy_kwh, w.completed_work_h
    return run.it_energy_kwh, run.facility_energy_kwh, run.completed_work_h


def _classes(run: RunResult) -> Mapping[str, ClassResult]:
    """The classes the table reads: with a measurement window, the workloads submitted in it."""
    return run.window.classes if run.window is not None else run.classes


def _p95_slowdown(run: RunResult, cls: str) -> float | None:
    result = _classes(run).get(cls)
    if result is None or result.completed == 0:
        return None
    return result.slowdown.p95


def _present(values: Iterable[float | None]) -> list[float]:
    return [v for v in values if v is not None]


def _makespans_h(runs: Sequence[RunResult]) -> list[float]:
    """Makespans in hours, or none at all when a seed left work unfinished (a mean over the
    seeds that finished would flatter the baseline that failed the others)."""
    spans = [r.makespan_s for r in runs]
    if any(s is None for s in spans):
        return []
    return [s / 3600.0 for s in spans if s is not None]


Compared = Sequence[Saving] | None
"""A row's comparisons, one per seed that has a reference; None: the row is the reference."""
Cell = Callable[[Sequence[RunResult], Compared], str]
Column = tuple[str, Cell]


def _own(value: Callable[[RunResult], float | None], decimals: int) -> Cell:
    """A figure of each run alone, folded over the seeds."""
    return lambda runs, _c: fold(_present(value(r) for r in runs), decimals)


def _versus(value: Callable[[Saving], float | None], decimals: int, reference: str) -> Cell:
    """A figure of the comparison with A, folded over the seeds; ``reference``: the cell of
    A's own row."""

    def cell(_runs: Sequence[RunResult], compared: Compared) -> str:
        if compared is None:
            return reference
        return fold(_present(value(s) for s in compared), decimals)

    return cell


def _window_h(_runs: Sequence[RunResult], compared: Compared) -> str:
    """The compared window in hours: its end (from 0), folded over the seeds, or ``start-end``
    when every seed shares it (a measurement window)."""
    if compared is None:
        return MISSING
    windows = {(s.window_start_s / 3600.0, s.window_end_s / 3600.0) for s in compared}
    if len(windows) == 1 and (window := windows.pop())[0] > 0.0:
        return f"{window[0]:g}-{window[1]:g}"
    return fold([s.window_end_s / 3600.0 for s in compared], 2)


COLUMNS: tuple[Column, ...] = (
    ("seeds", lambda runs, _c: str(len(runs))),
    ("IT kWh", _own(lambda r: _measured(r)[0], 2)),
    ("fac kWh", _own(lambda r: _measured(r)[1], 2)),
    ("work-h", _own(lambda r: _measured(r)[2], 1)),
    ("fac kWh/work-h", _own(energy_per_work_h, 4)),
    ("saving/work-h %", _versus(lambda s: s.per_work_h_saving_pct, 1, "ref")),
    ("window h", _window_h),
    ("IT kWh w", _versus(lambda s: s.it_kwh, 2, MISSING)),
    ("A IT kWh w", _versus(lambda s: s.reference_it_kwh, 2, MISSING)),
    ("IT saving %", _versus(lambda s: s.it_saving_pct, 1, "ref")),
    ("fac kWh w", _versus(lambda s: s.facility_kwh, 2, MISSING)),
    ("A fac kWh w", _versus(lambda s: s.reference_facility_kwh, 2, MISSING)),
    ("fac saving %", _versus(lambda s: s.facility_saving_pct, 1, "ref")),
    ("makespan h", lambda runs, _c: fold(_makespans_h(runs), 2)),
    ("p95 slowdown perf", _own(lambda r: _p95_slowdown(r, "performance"), 2)),
    ("p95 slowdown std", _own(lambda r: _p95_slowdown(r, "standard"), 2)),
    ("jobs/h", _own(lambda r: r.throughput_per_h, 1)),
    ("preemptions", lambda runs, _c: _fold_counts([r.preemptions for r in runs])),
    ("unfinished", lambda runs, _c: _fold_counts([r.unfinished for r in runs])),
)
"""The saving columns are ``joulie.sim.saving``'s figures, as in results.json and the charts."""


def _lifecycle_cell(value: Callable[[LifecycleResult], float], decimals: int | None = None) -> Cell:
    """A lifecycle figure folded over the runs that had the lifecycle (``-`` for none);
    ``decimals`` None: a count."""

    def cell(runs: Sequence[RunResult], _c: Compared) -> str:
        values = [value(r.lifecycle) for r in runs if r.lifecycle is not None]
        if not values:
            return MISSING
        if decimals is None:
            return _fold_counts([int(v) for v in values])
        return fold(values, decimals)

    return cell


LIFECYCLE_COLUMNS: tuple[Column, ...] = (
    ("nodes off", _lifecycle_cell(lambda life: life.mean_nodes_off, 1)),
    ("off node-h", _lifecycle_cell(lambda life: life.off_node_hours, 0)),
    ("boots", _lifecycle_cell(lambda life: life.boots)),
    ("boot-wait pod-h", _lifecycle_cell(lambda life: life.boot_wait_pod_hours, 1)),
    ("drains", _lifecycle_cell(lambda life: life.drains_started)),
    ("cancelled", _lifecycle_cell(lambda life: life.drains_cancelled)),
    ("shutdowns", _lifecycle_cell(lambda life: life.shutdowns)),
)
"""Shown when a run had the node lifecycle (``--lifecycle``)."""


def _columns(results: Sequence[RunResult]) -> tuple[Column, ...]:
    if any(r.lifecycle is not None for r in results):
        return COLUMNS + LIFECYCLE_COLUMNS
    return COLUMNS


def table_rows(results: Iterable[RunResult]) -> list[list[str]]:
    """The table's cells, header first (what ``comparison_table`` aligns)."""
    results = list(results)
    columns = _columns(results)
    saving_of = {id(r): s for r, s in zip(results, savings(results), strict=True)}
    rows = [["scenario", "baseline", *(name for name, _ in columns)]]
    for (scenario, baseline), runs in groups(results).items():
        compared: Compared = None
        if baseline != REFERENCE_BASELINE:
            compared = [s for r in runs if (s := saving_of[id(r)]) is not None]
        rows.append([scenario, baseline, *(cell(runs, compared) for _, cell in columns)])
    return rows


TABLE_WIDTH = 120
"""The widest a table's line gets: wider tables are cut into blocks of whole column groups, each
block repeating the scenario and baseline (a 325-column line wrapped into noise in a terminal)."""
GROUP_STARTS = frozenset({"window h", "makespan h", LIFECYCLE_COLUMNS[0][0]})
"""The columns that start a group kept together in a block where it fits: the run's own energy
and work; the comparison over the window; time and outcomes; the node lifecycle."""


def _blocks(rows: list[list[str]], width: int = TABLE_WIDTH) -> list[list[list[str]]]:
    """``rows`` (header first) as several tables of about ``width`` characters a line: column
    groups (:data:`GROUP_STARTS`) side by side while they fit. A group is never cut (the window
    comparison reads across its columns), so one with several seeds' ``mean ± sd`` may be a
    few characters wider."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    labels = widths[0] + 2 + widths[1]
    groups: list[list[int]] = []
    for i in range(2, len(widths)):
        if not groups or rows[0][i] in GROUP_STARTS:
            groups.append([])
        groups[-1].append(i)
    blocks: list[list[int]] = []
    used = width + 1
    for group in groups:
        size = sum(widths[i] + 2 for i in group)
        if used + size > width:
            blocks.append([])
            used = labels
        blocks[-1] += group
        used += size
    return [[[row[0], row[1], *(row[i] for i in block)] for row in rows] for block in blocks]


def comparison_table(results: Iterable[RunResult]) -> str:
    """Aligned plain text: labels left, numbers right, a rule under the header, in blocks of at
    most :data:`TABLE_WIDTH` characters; then, where the runs have it, the energy per workload
    class (:func:`class_table`)."""
    results = list(results)
    lines: list[str] = []
    for block in _blocks(table_rows(results)):
        lines += [*([""] if lines else []), *aligned(block, labels=2)]
    notes = ["", *NOTES]
    if any(r.window is not None for r in results):
        notes += WINDOW_NOTES
    if _columns(results) is not COLUMNS:
        notes += [
            "nodes off: mean over the run, powered off by the node lifecycle; cancelled: drains",
            "undone at their re-check (a pending pod could use the node), the rest shut it down",
        ]
    by_class = class_table(results)
    return "\n".join([*lines, *notes]) + "\n" + ("\n" + by_class if by_class else "")


# --- energy per workload class ------------------------------------------------------------------


def own_energy(run: RunResult) -> WorkloadEnergy | None:
    """The run's energy per workload over its own span (as ``IT kWh``): inside its measurement
    window, else from 0 to its end."""
    if run.window is not None:
        return run.window.energy_by_workload
    return run.energy_by_workload


def workload_classes(results: Iterable[RunResult]) -> list[str]:
    """The classes the runs report energy for, sorted, then ``overhead``."""
    names = {name for r in results if (e := own_energy(r)) is not None for name in e.by_class}
    return [*sorted(names), OVERHEAD] if names else []


def class_kwh(energy: WorkloadEnergy, name: str) -> float:
    return energy.overhead_kwh if name == OVERHEAD else energy.by_class.get(name, 0.0)


def class_rows(results: Iterable[RunResult]) -> list[list[str]]:
    """The cells of :func:`class_table`, header first (no rows when no run has the split)."""
    results = list(results)
    names = workload_classes(results)
    if not names:
        return []
    by_run = {
        id(r): class_savings(r, ref) if ref is not None else None for r, ref in pairs(results)
    }
    rows = [
        [
            "scenario",
            "baseline",
            *(f"{n} kWh" for n in names),
            *(f"{n} saving %" for n in names),
        ]
    ]
    for (scenario, baseline), runs in groups(results).items():
        energies = [e for r in runs if (e := own_energy(r)) is not None]
        kwh = [fold([class_kwh(e, n) for e in energies], 2) for n in names]
        if baseline == REFERENCE_BASELINE:
            pct = ["ref"] * len(names)
        else:
            compared = [c for r in runs if (c := by_run[id(r)]) is not None]
            pct = [fold(_present(c[n].saving_pct for c in compared if n in c), 1) for n in names]
        rows.append([scenario, baseline, *kwh, *pct])
    return rows


def class_table(results: Iterable[RunResult]) -> str:
    """The IT energy of each row per workload class and the overhead, and each one's saving
    against A; empty when no run has the split."""
    rows = class_rows(results)
    if not rows:
        return ""
    return "\n".join([*aligned(rows, labels=2), "", *CLASS_NOTES]) + "\n"


CLASS_NOTES = (
    "<class> kWh: the run's own IT energy (as IT kWh) used by the workloads of that class, split",
    "  per node by requests (idle draw) and modelled pod power (the rest); overhead: what no",
    "  workload explains (idle nodes, unrequested capacity); the columns add up to IT kWh",
    "saving %: 1 - run / A for that class over the window of IT saving % (after a run's end its",
    "  cluster's draw is overhead)",
)


NOTES = (
    "mean ± sd over seeds; - : none, or not compared",
    "IT kWh, fac kWh, work-h: each run's own, from 0 to its own end; work-h: completed work,",
    "  pods x run time at full speed; fac kWh/work-h: facility energy per work-hour",
    "window h: the same window for the run and baseline A of its scenario and seed, from 0 to",
    "  the later end, the cluster that finished first idling on; ... w: energy over it, the",
    "  run's and A's",
    "saving %: 1 - run / A, per work-hour and over the window (ref: A itself); makespan -:",
    "  work unfinished",
)
"""Under the table: what each figure is (``joulie.sim.saving`` has the definition)."""
WINDOW_NOTES = (
    "with a warm-up (--warmup-hours): own figures and the window are the measurement window",
    "  (warm-up end to end of arrivals); p95 slowdown of the workloads submitted in it",
)


def _csv_cell(value: float | int) -> str:
    if isinstance(value, float):
        return repr(canonical_float(value)) if math.isfinite(value) else str(value)
    return str(value)


def write_series_csv(result: RunResult, path: str | Path) -> Path:
    """The run's time series as CSV (``SERIES_COLUMNS`` header, one row per sample, floats
    rounded as in the JSON so the file is byte-stable)."""
    path = Path(path)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(SERIES_COLUMNS)
        for sample in result.series:
            writer.writerow([_csv_cell(getattr(sample, c)) for c in SERIES_COLUMNS])
    return path


def _safe(label: str) -> str:
    """A label as a file-name part: anything but letters, digits and ``.=_+-`` becomes ``_``."""
    return re.sub(r"[^A-Za-z0-9.=_+-]", "_", label) or "_"


def series_name(result: RunResult) -> str:
    """``<scenario>-<baseline>-seed<seed>.csv``, the scenario made file-name safe."""
    return f"{_safe(result.scenario)}-{_safe(result.baseline)}-seed{result.seed}.csv"


def write_outputs(
    results: Sequence[RunResult], out_dir: str | Path, plots: bool = True
) -> list[Path]:
    """Write results.json, table.txt, a CSV per run and (``plots``) the PNGs, with the energy
    chart's markers as ``energy_vs_makespan.csv`` and, where the runs split their energy per
    workload, the energy-per-class chart's segments as ``energy_by_class.csv``; return the
    paths.

    Two runs with the same scenario, baseline and seed (a sweep that varied something it did
    not put in the label) would share a CSV name: the later ones get ``-2``, ``-3`` ... so no
    series overwrites another.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "results.json", out / "table.txt"]
    written[0].write_text(results_json(results), encoding="utf-8")
    written[1].write_text(comparison_table(results), encoding="utf-8")
    used: set[str] = set()
    for result in results:
        name = series_name(result)
        stem, n = name.removesuffix(".csv"), 1
        while name in used:
            n += 1
            name = f"{stem}-{n}.csv"
        used.add(name)
        written.append(write_series_csv(result, out / name))
    if plots:
        from joulie.sim import plots as charts

        written.append(charts.energy_vs_makespan(results, out / "energy_vs_makespan.png"))
        written.append(charts.write_energy_csv(results, out / "energy_vs_makespan.csv"))
        written.append(charts.power_over_time(results, out / "power_over_time.png"))
        written.append(charts.profile_shares(results, out / "profile_shares.png"))
        if workload_classes(results):
            written.append(charts.energy_by_class(results, out / "energy_by_class.png"))
            written.append(charts.write_class_csv(results, out / "energy_by_class.csv"))
    return written
