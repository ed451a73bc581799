"""The simulator's four charts as small PNG files.

matplotlib is imported inside each function, so that ``joulie`` and its other subcommands start
without paying for it; the charts are bare ``Figure`` objects rendered by Agg (no display).
It comes with the ``plots`` extra (``pip install 'joulie[plots]'``), which the role images leave
out: without it, the first chart ends the command with one line that says so.

A sweep can have many scenarios: the per-scenario charts draw the first ``MAX_PANELS`` (sorted
by name) and say in the title how many were left out, rather than an unreadable wall of panels.
"""

from __future__ import annotations

import csv
import importlib.util
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from joulie.sim.report import class_kwh, groups, own_energy, workload_classes
from joulie.sim.result_io import canonical_float
from joulie.sim.results import RunResult
from joulie.sim.saving import (
    OVERHEAD,
    REFERENCE_BASELINE,
    class_savings,
    energy_per_work_h,
    pairs,
    savings,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI = 100
MAX_PANELS = 6
PROFILES = ("performance", "eco", "draining")
PROFILE_COLOURS = {"performance": "#d62728", "eco": "#2ca02c", "draining": "#7f7f7f"}
CLASS_COLOURS = {"performance": "#d62728", "standard": "#1f77b4", OVERHEAD: "#c7c7c7"}
MARKERS = "os^Dv<>pPX*h"
OUTSIDE: dict[str, Any] = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0)}
"""Legends go right of the axes, where they cannot hide a point or a bar."""


SAVE_BBOX = "tight"
"""Every chart is saved cropped to what it draws ("tight" takes in the legends placed outside
the axes, which tight_layout ignores; an artist clipped to the axes is not taken in)."""


class PlotsExtraMissing(SystemExit):
    """matplotlib is not installed. A SystemExit whose code is the message: the command ends
    with that one line on stderr (status 1), not a traceback, whoever called the chart."""

    def __init__(self) -> None:
        super().__init__(
            "joulie: the simulator's charts need matplotlib, which comes with the plots extra: "
            "pip install 'joulie[plots]' (or pass --no-plots)"
        )


def require_plots() -> None:
    """Raise PlotsExtraMissing now when no chart could be drawn: a command that will write
    charts can say so before a long run rather than after it."""
    if importlib.util.find_spec("matplotlib") is None:
        raise PlotsExtraMissing()


def _figure(width: float, height: float) -> Figure:
    # Every chart starts here, so this is the one import that can find matplotlib missing.
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotsExtraMissing() from None

    # A bare Figure (no pyplot) draws its PNG with the Agg renderer without selecting a global
    # backend, so it needs no display and leaves a caller's own pyplot backend alone.
    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def _save(fig: Figure, path: str | Path) -> Path:
    path = Path(path)
    fig.savefig(path, format="png", dpi=DPI, bbox_inches=SAVE_BBOX)
    return path


def _baseline_colours(results: Sequence[RunResult]) -> dict[str, Any]:
    baselines = sorted({r.baseline for r in results})
    return {b: f"C{i % 10}" for i, b in enumerate(baselines)}


def _scenarios(results: Sequence[RunResult]) -> tuple[list[str], int]:
    """The scenarios drawn and how many were left out."""
    names = sorted({r.scenario for r in results})
    return names[:MAX_PANELS], max(0, len(names) - MAX_PANELS)


def _omitted(title: str, left_out: int) -> str:
    return f"{title} (+{left_out} scenarios not drawn)" if left_out else title


@dataclass(frozen=True, slots=True)
class EnergyPoint:
    """One run's marker on the energy-against-makespan chart (also its CSV row)."""

    scenario: str
    baseline: str
    seed: int
    makespan_h: float
    kwh_per_work_h: float
    """Facility kWh per completed work-hour (``joulie.sim.saving.energy_per_work_h``)."""
    saving_pct: float | None
    """Its saving per work-hour against baseline A of the same scenario and seed (None: the
    run is A, or has no A)."""


ENERGY_TITLE = "Facility energy per completed work-hour against makespan"
ENERGY_SUBTITLE = "labels: saving per work-hour against baseline A of the same seed"
ENERGY_CSV_COLUMNS = tuple(f.name for f in fields(EnergyPoint))


def energy_points(results: Sequence[RunResult]) -> tuple[list[EnergyPoint], int]:
    """The markers of :func:`energy_vs_makespan`, and how many runs are not drawn (work left
    unfinished: no makespan; or no completed work: no energy per work-hour)."""
    points: list[EnergyPoint] = []
    left_out = 0
    for r, s in zip(results, savings(results), strict=True):
        per_work = energy_per_work_h(r)
        if r.makespan_s is None or per_work is None:
            left_out += 1
            continue
        pct = s.per_work_h_saving_pct if s is not None else None
        points.append(
            EnergyPoint(r.scenario, r.baseline, r.seed, r.makespan_s / 3600.0, per_work, pct)
        )
    return points, left_out


def saving_label(pct: float) -> str:
    """How a marker's saving per work-hour is written next to it."""
    return f"saving {pct:.1f} %"


def energy_vs_makespan(results: Sequence[RunResult], path: str | Path) -> Path:
    """:func:`energy_figure` as a PNG at ``path``."""
    return _save(energy_figure(results), path)


def energy_figure(results: Sequence[RunResult]) -> Figure:
    """Facility kWh per completed work-hour (the per-work-hour figure of
    ``joulie.sim.saving``) against makespan (h): a marker per run, colour per baseline, marker
    shape per scenario, each run other than A labelled with its saving per work-hour against A
    (as in the table, one decimal).
    Runs that left work unfinished have no makespan and are counted, not drawn."""
    fig = _figure(7.0, 4.5)
    ax = fig.add_subplot()
    colours = _baseline_colours(results)
    scenarios = sorted({r.scenario for r in results})
    marker = {s: MARKERS[i % len(MARKERS)] for i, s in enumerate(scenarios)}
    points, unfinished = energy_points(results)
    for p in points:
        ax.scatter(
            p.makespan_h,
            p.kwh_per_work_h,
            color=colours[p.baseline],
            marker=marker[p.scenario],
            edgecolors="black",
            linewidths=0.4,
        )
        if p.saving_pct is not None:
            ax.annotate(
                saving_label(p.saving_pct),
                (p.makespan_h, p.kwh_per_work_h),
                xytext=(4, 4),
                textcoords="offset points",
                fontsize="x-small",
            )
    _legends(fig, colours, marker)
    ax.set_xlabel("makespan (h)")
    inside = " (in the window)" if any(r.window is not None for r in results) else ""
    ax.set_ylabel(f"facility kWh per completed work-hour{inside}")
    title = f"{ENERGY_TITLE} ({unfinished} runs not drawn)" if unfinished else ENERGY_TITLE
    ax.set_title(f"{title}\n{ENERGY_SUBTITLE}", fontsize="medium")
    ax.margins(0.12)  # room for the labels inside the axes
    ax.grid(alpha=0.3)
    return fig


def write_energy_csv(results: Sequence[RunResult], path: str | Path) -> Path:
    """The energy chart's markers as CSV (``ENERGY_CSV_COLUMNS``), the figures it draws."""
    path = Path(path)
    points, _ = energy_points(results)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(ENERGY_CSV_COLUMNS)
        for p in points:
            writer.writerow(
                [
                    "" if v is None else repr(canonical_float(v)) if isinstance(v, float) else v
                    for v in (getattr(p, c) for c in ENERGY_CSV_COLUMNS)
                ]
            )
    return path


def _legends(fig: Figure, colours: dict[str, Any], marker: dict[str, str]) -> None:
    """Legends right of the axes, as figure legends: the constrained layout makes room for
    them and the saved (tight) figure takes them in (an axes' extra artist would be clipped to
    the axes)."""
    from matplotlib.lines import Line2D

    def handle(**kw: Any) -> Line2D:
        return Line2D([], [], linestyle="none", markeredgecolor="black", **kw)

    by_baseline = [handle(marker="o", color=c, label=f"baseline {b}") for b, c in colours.items()]
    fig.legend(handles=by_baseline, fontsize="small", loc="outside right upper")
    if len(marker) > 1:
        shown = list(marker.items())[:12]
        by_scenario = [handle(marker=m, color="white", label=s) for s, m in shown]
        fig.legend(handles=by_scenario, fontsize="small", loc="outside right lower")


def _first_seed(results: Sequence[RunResult], scenario: str) -> dict[str, RunResult]:
    """For each baseline of the scenario, its run with the lowest seed."""
    chosen: dict[str, RunResult] = {}
    for r in results:
        if r.scenario == scenario and (
            r.baseline not in chosen or r.seed < chosen[r.baseline].seed
        ):
            chosen[r.baseline] = r
    return dict(sorted(chosen.items()))


def power_over_time(results: Sequence[RunResult], path: str | Path) -> Path:
    """IT power (kW) against simulated hours, a line per baseline, a panel per scenario, each
    from the scenario's first seed (the seeds share a workload shape, so one is representative
    and several would only hide each other)."""
    shown, left_out = _scenarios(results)
    colours = _baseline_colours(results)
    fig = _figure(8.0, 1.2 + 2.3 * max(1, len(shown)))
    for i, scenario in enumerate(shown or [""]):
        ax = fig.add_subplot(max(1, len(shown)), 1, i + 1)
        for baseline, run in _first_seed(results, scenario).items():
            hours = [s.t_s / 3600.0 for s in run.series]
            kw = [s.it_w / 1000.0 for s in run.series]
            ax.plot(hours, kw, color=colours[baseline], linewidth=1.0, label=f"{baseline}")
        ax.set_title(f"{scenario} (seed {_lowest_seed(results, scenario)})", fontsize="medium")
        ax.set_ylabel("IT power (kW)")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(title="baseline", fontsize="small", **OUTSIDE)
        ax.set_ylim(bottom=0)
    fig.axes[-1].set_xlabel("simulated time (h)")
    fig.suptitle(_omitted("IT power over time", left_out))
    return _save(fig, path)


def _lowest_seed(results: Sequence[RunResult], scenario: str) -> int | str:
    seeds = [r.seed for r in results if r.scenario == scenario]
    return min(seeds) if seeds else "-"


def _mean_shares(runs: Sequence[RunResult]) -> dict[str, dict[str, float]]:
    """Family -> profile -> share of node-time, averaged over the runs (seeds)."""
    totals: dict[str, dict[str, float]] = {}
    for r in runs:
        for family, shares in r.profile_shares.items():
            acc = totals.setdefault(family, dict.fromkeys(PROFILES, 0.0))
            for profile in PROFILES:
                acc[profile] += shares.get(profile, 0.0) / len(runs)
    return totals


def profile_shares(results: Sequence[RunResult], path: str | Path) -> Path:
    """Per hardware family, the share of node-time in performance / eco / draining: a stacked
    bar per baseline, grouped by family, a panel per scenario (shares averaged over seeds)."""
    shown, left_out = _scenarios(results)
    families = {f for r in results for f in r.profile_shares}
    fig = _figure(
        max(8.0, 2.0 + 0.3 * len(families) * len(_baseline_colours(results))),
        1.2 + 3.2 * max(1, len(shown)),
    )
    for i, scenario in enumerate(shown or [""]):
        ax = fig.add_subplot(max(1, len(shown)), 1, i + 1)
        _share_panel(ax, [r for r in results if r.scenario == scenario])
        ax.set_title(scenario, fontsize="medium")
    fig.suptitle(_omitted("Share of node-time per profile", left_out))
    return _save(fig, path)


def _share_panel(ax: Any, runs: Sequence[RunResult]) -> None:
    baselines = sorted({r.baseline for r in runs})
    shares = {b: _mean_shares([r for r in runs if r.baseline == b]) for b in baselines}
    families = sorted({f for s in shares.values() for f in s})
    width = 0.8 / max(1, len(baselines))
    for j, baseline in enumerate(baselines):
        xs = [k + (j - (len(baselines) - 1) / 2) * width for k in range(len(families))]
        bottom = [0.0] * len(families)
        for profile in PROFILES:
            heights = [shares[baseline].get(f, {}).get(profile, 0.0) for f in families]
            ax.bar(
                xs,
                heights,
                width * 0.9,
                bottom=bottom,
                color=PROFILE_COLOURS[profile],
                edgecolor="black",
                linewidth=0.3,
                label=profile if j == 0 else None,
            )
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
        for x, top in zip(xs, bottom, strict=True):
            ax.text(x, top, baseline, ha="center", va="bottom", fontsize="x-small")
    # Family names (``gpu:NVIDIA_H100_NVL``) are long: slanted, they do not run into each other.
    ax.set_xticks(range(len(families)), families, fontsize="small", rotation=30, ha="right")
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("share of node-time")
    if families:
        ax.legend(fontsize="small", **OUTSIDE)


# --- energy per workload class ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClassBar:
    """One segment of the energy-per-class chart (also its CSV row): a workload class (or the
    overhead) of one scenario and baseline, over the seeds."""

    scenario: str
    baseline: str
    workload_class: str
    kwh: float
    """IT kWh of the class over each run's own span, the mean over the seeds (as the table)."""
    saving_pct: float | None
    """Its saving against baseline A of the same seed over the window of the IT saving, the
    mean over the seeds compared (None: the row is A, or no seed has an A)."""


CLASS_TITLE = "IT energy per workload class"
CLASS_SUBTITLE = "labels: saving against A of the same seed"
CLASS_CSV_COLUMNS = tuple(f.name for f in fields(ClassBar))


def class_bars(results: Sequence[RunResult]) -> list[ClassBar]:
    """The segments of :func:`energy_by_class`: per scenario and baseline (sorted), per class
    and then the overhead, the figures of the table's energy-per-class block."""
    names = workload_classes(results)
    compared = {
        id(r): class_savings(r, ref) if ref is not None else None for r, ref in pairs(results)
    }
    bars: list[ClassBar] = []
    for (scenario, baseline), runs in groups(results).items():
        energies = [e for r in runs if (e := own_energy(r)) is not None]
        if not energies:
            continue
        for name in names:
            kwh = statistics.fmean(class_kwh(e, name) for e in energies)
            pcts = [
                c[name].saving_pct for r in runs if (c := compared[id(r)]) is not None and name in c
            ]
            shown = [p for p in pcts if p is not None]
            pct = statistics.fmean(shown) if shown and baseline != REFERENCE_BASELINE else None
            bars.append(ClassBar(scenario, baseline, name, kwh, pct))
    return bars


def class_saving_label(pct: float) -> str:
    """How a segment's saving is written on it (one decimal, as in the table)."""
    return f"{pct:.1f} %"


def energy_by_class(results: Sequence[RunResult], path: str | Path) -> Path:
    """:func:`class_figure` as a PNG at ``path``."""
    return _save(class_figure(results), path)


def class_figure(results: Sequence[RunResult]) -> Figure:
    """IT kWh per workload class and the overhead: a stacked bar per baseline, a panel per
    scenario (the mean over seeds), each segment of a run other than A labelled with its saving
    against A. The stacks' heights are the runs' own IT energy."""
    bars = class_bars(results)
    shown, left_out = _scenarios(results)
    fig = _figure(7.0, 1.2 + 3.0 * max(1, len(shown)))
    names = list(dict.fromkeys(b.workload_class for b in bars))
    for i, scenario in enumerate(shown or [""]):
        ax = fig.add_subplot(max(1, len(shown)), 1, i + 1)
        mine = [b for b in bars if b.scenario == scenario]
        baselines = list(dict.fromkeys(b.baseline for b in mine))
        bottom = dict.fromkeys(baselines, 0.0)
        for name in names:
            segment = [b for b in mine if b.workload_class == name]
            xs = [baselines.index(b.baseline) for b in segment]
            heights = [b.kwh for b in segment]
            lows = [bottom[b.baseline] for b in segment]
            ax.bar(
                xs,
                heights,
                0.6,
                bottom=lows,
                color=CLASS_COLOURS.get(name, "#9467bd"),
                edgecolor="black",
                linewidth=0.3,
            )
            for x, b, low in zip(xs, segment, lows, strict=True):
                bottom[b.baseline] = low + b.kwh
                if b.saving_pct is not None:
                    ax.text(
                        x,
                        low + b.kwh / 2,
                        class_saving_label(b.saving_pct),
                        ha="center",
                        va="center",
                        fontsize="x-small",
                    )
        ax.set_xticks(range(len(baselines)), [f"baseline {b}" for b in baselines])
        ax.set_ylabel("IT kWh")
        ax.set_title(scenario, fontsize="medium")
        ax.grid(axis="y", alpha=0.3)
    _class_legend(fig, names)
    inside = " (in the window)" if any(r.window is not None for r in results) else ""
    fig.suptitle(_omitted(f"{CLASS_TITLE}{inside}\n{CLASS_SUBTITLE}", left_out))
    return fig


def _class_legend(fig: Figure, names: Sequence[str]) -> None:
    from matplotlib.patches import Patch

    # Top to bottom, as the segments are stacked.
    handles = [
        Patch(facecolor=CLASS_COLOURS.get(n, "#9467bd"), edgecolor="black", label=n)
        for n in reversed(names)
    ]
    if handles:
        fig.legend(handles=handles, fontsize="small", loc="outside right center")


def write_class_csv(results: Sequence[RunResult], path: str | Path) -> Path:
    """The energy-per-class chart's segments as CSV (``CLASS_CSV_COLUMNS``)."""
    path = Path(path)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(CLASS_CSV_COLUMNS)
        for bar in class_bars(results):
            writer.writerow(
                [
                    "" if v is None else repr(canonical_float(v)) if isinstance(v, float) else v
                    for v in (getattr(bar, c) for c in CLASS_CSV_COLUMNS)
                ]
            )
    return path
