"""The simulator's three charts as small PNG files.

matplotlib is imported inside each function, so that ``joulie`` and its other subcommands start
without paying for it; the charts are bare ``Figure`` objects rendered by Agg (no display).

A sweep can have many scenarios: the per-scenario charts draw the first ``MAX_PANELS`` (sorted
by name) and say in the title how many were left out, rather than an unreadable wall of panels.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from joulie.sim.results import RunResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI = 100
MAX_PANELS = 6
PROFILES = ("performance", "eco", "draining")
PROFILE_COLOURS = {"performance": "#d62728", "eco": "#2ca02c", "draining": "#7f7f7f"}
MARKERS = "os^Dv<>pPX*h"
OUTSIDE: dict[str, Any] = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0)}
"""Legends go right of the axes, where they cannot hide a point or a bar."""


def _figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    # A bare Figure (no pyplot) draws its PNG with the Agg renderer without selecting a global
    # backend, so it needs no display and leaves a caller's own pyplot backend alone.
    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def _save(fig: Figure, path: str | Path) -> Path:
    path = Path(path)
    # "tight" takes in the legends placed outside the axes, which tight_layout ignores.
    fig.savefig(path, format="png", dpi=DPI, bbox_inches="tight")
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


def energy_vs_makespan(results: Sequence[RunResult], path: str | Path) -> Path:
    """Facility kWh against makespan (h): a marker per run, colour per baseline, marker shape
    per scenario. Runs that left work unfinished have no makespan and are counted, not drawn."""
    fig = _figure(7.0, 4.5)
    ax = fig.add_subplot()
    colours = _baseline_colours(results)
    scenarios = sorted({r.scenario for r in results})
    marker = {s: MARKERS[i % len(MARKERS)] for i, s in enumerate(scenarios)}
    unfinished = 0
    for r in results:
        if r.makespan_s is None:
            unfinished += 1
            continue
        ax.scatter(
            r.makespan_s / 3600.0,
            r.facility_energy_kwh,
            color=colours[r.baseline],
            marker=marker[r.scenario],
            edgecolors="black",
            linewidths=0.4,
        )
    _legends(ax, colours, marker)
    ax.set_xlabel("makespan (h)")
    ax.set_ylabel("facility energy (kWh)")
    title = "Energy against makespan"
    ax.set_title(f"{title} ({unfinished} unfinished runs not drawn)" if unfinished else title)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def _legends(ax: Any, colours: dict[str, Any], marker: dict[str, str]) -> None:
    from matplotlib.lines import Line2D

    def handle(**kw: Any) -> Line2D:
        return Line2D([], [], linestyle="none", markeredgecolor="black", **kw)

    by_baseline = [handle(marker="o", color=c, label=f"baseline {b}") for b, c in colours.items()]
    first = ax.legend(handles=by_baseline, fontsize="small", **OUTSIDE)
    ax.add_artist(first)
    if len(marker) > 1:
        shown = list(marker.items())[:12]
        by_scenario = [handle(marker=m, color="white", label=s) for s, m in shown]
        ax.legend(
            handles=by_scenario, fontsize="small", loc="lower left", bbox_to_anchor=(1.01, 0.0)
        )


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
