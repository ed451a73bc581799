"""What a finished set of runs tells a reader: the comparison table, CSV series, output folder.

The table has one row per (scenario, baseline), folding the seeds: a single seed shows its value,
several show ``mean ± sd`` (sample standard deviation, n-1), because the spread across workloads
is what says whether a difference between baselines is real.

The saving of a baseline is ``1 - facility / facility_A`` in percent, taken seed by seed against
baseline A of the same scenario and seed (the same generated workload) and then folded the same
way; seeds without an A run are left out of it, and no common seed shows ``-``. Both energies
run to the same end: the later of the two runs' last completions (see :func:`energy_until`).
"""

from __future__ import annotations

import csv
import math
import re
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import fields
from pathlib import Path

from joulie.sim.result_io import canonical_float, results_json
from joulie.sim.results import LifecycleResult, RunResult, Sample

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


def energy_until(run: RunResult, horizon_s: float) -> float:
    """Facility kWh of ``run`` until ``horizon_s``: after its last completion the cluster idles
    on (it does not vanish), drawing ``idle_facility_w``."""
    extra_s = max(0.0, horizon_s - run.simulated_s)
    return run.facility_energy_kwh + run.idle_facility_w * extra_s / 3.6e6


def savings_pct(runs: Sequence[RunResult], reference: Sequence[RunResult]) -> list[float]:
    """Facility-energy saving of each run against the reference run of the same seed, in %,
    both counted until the later of the two finished: a baseline that finishes sooner still
    has its cluster powered while the other works on, so energy to different end times would
    reward being slow."""
    by_seed = {r.seed: r for r in reference}
    savings = []
    for r in runs:
        a = by_seed.get(r.seed)
        if a is None:
            continue
        horizon = max(r.simulated_s, a.simulated_s)
        reference_kwh = energy_until(a, horizon)
        if reference_kwh > 0.0:
            savings.append(100.0 * (1.0 - energy_until(r, horizon) / reference_kwh))
    return savings


def _p95_slowdown(run: RunResult, cls: str) -> float | None:
    result = run.classes.get(cls)
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


Column = tuple[str, Callable[[Sequence[RunResult], Sequence[RunResult]], str]]

COLUMNS: tuple[Column, ...] = (
    ("seeds", lambda runs, _a: str(len(runs))),
    ("IT kWh", lambda runs, _a: fold([r.it_energy_kwh for r in runs], 2)),
    ("facility kWh", lambda runs, _a: fold([r.facility_energy_kwh for r in runs], 2)),
    ("saving %", lambda runs, a: "ref" if runs is a else fold(savings_pct(runs, a), 1)),
    ("makespan h", lambda runs, _a: fold(_makespans_h(runs), 2)),
    (
        "p95 slowdown perf",
        lambda runs, _a: fold(_present(_p95_slowdown(r, "performance") for r in runs), 2),
    ),
    (
        "p95 slowdown std",
        lambda runs, _a: fold(_present(_p95_slowdown(r, "standard") for r in runs), 2),
    ),
    ("jobs/h", lambda runs, _a: fold([r.throughput_per_h for r in runs], 1)),
    ("preemptions", lambda runs, _a: _fold_counts([r.preemptions for r in runs])),
    ("unfinished", lambda runs, _a: _fold_counts([r.unfinished for r in runs])),
)


def _lifecycle_cell(
    value: Callable[[LifecycleResult], float], decimals: int | None = None
) -> Callable[[Sequence[RunResult], Sequence[RunResult]], str]:
    """A lifecycle figure folded over the runs that had the lifecycle (``-`` for none);
    ``decimals`` None: a count."""

    def cell(runs: Sequence[RunResult], _a: Sequence[RunResult]) -> str:
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
    grouped = groups(results)
    rows = [["scenario", "baseline", *(name for name, _ in columns)]]
    for (scenario, baseline), runs in grouped.items():
        reference = grouped.get((scenario, "A"), [])
        rows.append([scenario, baseline, *(cell(runs, reference) for _, cell in columns)])
    return rows


def comparison_table(results: Iterable[RunResult]) -> str:
    """Aligned plain text: labels left, numbers right, a rule under the header."""
    results = list(results)
    rows = table_rows(results)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]

    def line(row: list[str]) -> str:
        cells = [
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        return "  ".join(cells).rstrip()

    rule = "  ".join("-" * w for w in widths)
    body = [line(row) for row in rows[1:]]
    notes = [
        "",
        "mean ± sd over seeds; saving %: facility energy against baseline A (ref), same",
        "scenario and seed, both until the later one finished; makespan -: work unfinished",
    ]
    if _columns(results) is not COLUMNS:
        notes += [
            "nodes off: mean over the run, powered off by the node lifecycle; cancelled: drains",
            "undone at their re-check (a pending pod could use the node), the rest shut it down",
        ]
    return "\n".join([line(rows[0]), rule, *body, *notes]) + "\n"


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
    """Write results.json, table.txt, a CSV per run and (``plots``) the PNGs; return the paths.

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
        written.append(charts.power_over_time(results, out / "power_over_time.png"))
        written.append(charts.profile_shares(results, out / "profile_shares.png"))
    return written
