"""The saving of a run against its reference: one definition, read by every output (the table,
``results.json``, the charts).

A run's reference is baseline A of the same scenario and seed: the same workload, no Joulie.
Two figures compare them, each as raw energies of both runs and a saving in percent
(``100 x (1 - run / reference)``):

**Same-window energy.** IT and facility energy of both runs over one window. Without a
measurement window that is the union window: from 0 to the later of the two runs' ends, the
run that finished first idling on after its end at the draw it had then (``idle_it_w``,
``idle_facility_w``): its cluster does not vanish when its work is done. With a measurement
window (``--warmup-hours``, the same in both runs) it is that window: what each run drew
between the end of the warm-up and the end of arrivals.

**Energy per completed work-hour.** Facility energy over the work the run completed, a
work-hour being one pod running one hour at full speed on the reference hardware (pods x
``work_s``, whatever the caps made of it). The energy is the run's own, from 0 to its own end
(with a measurement window: the energy and the completions inside it).

Why both: a saving can be decided by something that is not Joulie's doing. Over the same
window the run that finished first is charged for idling until the other is done, so on a
cluster that is mostly idle the idle draw over the difference fills both energies and pulls the
saving towards 0, whatever happened while work ran. Per work-hour each run pays only for its
own span, and runs that completed different work (a time limit, a measurement window) still
compare, but the idle nodes of a run's longer tail are charged to its work. The first is what a
meter reads while the cluster stays on; the second is what the work cost. Where the two agree,
neither the tail nor the idle cluster decided the result; where they differ, the gap says how
much did, so every output shows both.

**Per workload class** (``class_savings``): the same-window IT energy split by
``joulie.sim.workload_energy`` (the split of ``joulie.core.energy_accounting``): each class's
kWh in the reference less its kWh in the run, over the same window as the IT saving, and that
as a percentage of the reference's kWh. After a run's end its cluster's draw is overhead (its
work is done; a run stopped at its time limit is compared with a reference stopped at the
same limit), so over the union window a class's energy is the run's own and the idling-on goes
to the overhead, which is reported beside the classes: the classes' and the overhead's savings
in kWh add up to the IT saving in kWh.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from joulie.sim.results import RunResult

__all__ = [
    "OVERHEAD",
    "REFERENCE_BASELINE",
    "ClassSaving",
    "Saving",
    "class_savings",
    "compare",
    "energy_per_work_h",
    "is_reference",
    "pairs",
    "saving_pct",
    "savings",
    "section",
]

REFERENCE_BASELINE = "A"
"""The baseline every run is compared with (no Joulie)."""

_J_PER_KWH = 3.6e6


@dataclass(frozen=True, slots=True)
class Saving:
    """A run against its reference (see the module docstring for the definition)."""

    reference_baseline: str
    seed: int
    window_start_s: float
    window_end_s: float
    it_kwh: float
    """The run's IT energy over the window."""
    reference_it_kwh: float
    facility_kwh: float
    reference_facility_kwh: float
    it_saving_pct: float | None
    facility_saving_pct: float | None
    kwh_per_work_h: float | None
    """The run's facility kWh per completed work-hour (None: it completed no work)."""
    reference_kwh_per_work_h: float | None
    per_work_h_saving_pct: float | None


def saving_pct(value: float | None, reference: float | None) -> float | None:
    """``100 x (1 - value / reference)``; None when either is missing or the reference is 0."""
    if value is None or reference is None or reference <= 0.0:
        return None
    return 100.0 * (1.0 - value / reference)


def _measured(run: RunResult) -> tuple[float, float]:
    """(facility kWh, completed work-hours) the run's per-work-hour figure divides."""
    if run.window is not None:
        return run.window.facility_energy_kwh, run.window.completed_work_h
    return run.facility_energy_kwh, run.completed_work_h


def energy_per_work_h(run: RunResult) -> float | None:
    """Facility kWh per completed work-hour: the run's own energy to its own end (or inside its
    measurement window) over the work it completed there; None without completed work."""
    kwh, work_h = _measured(run)
    return kwh / work_h if work_h > 0.0 else None


def _same_windows(run: RunResult, reference: RunResult) -> bool:
    a, b = run.window, reference.window
    return a is not None and b is not None and (a.start_s, a.end_s) == (b.start_s, b.end_s)


def _until(run: RunResult, end_s: float) -> tuple[float, float]:
    """(IT kWh, facility kWh) of ``run`` from 0 to ``end_s``: after its end it draws on at
    ``idle_it_w`` / ``idle_facility_w``."""
    extra_s = max(0.0, end_s - run.simulated_s)
    return (
        run.it_energy_kwh + run.idle_it_w * extra_s / _J_PER_KWH,
        run.facility_energy_kwh + run.idle_facility_w * extra_s / _J_PER_KWH,
    )


def compare(run: RunResult, reference: RunResult) -> Saving:
    """``run`` against ``reference`` over the same window (their measurement window when both
    have the same one, else the union window), and per completed work-hour."""
    mine, theirs = run.window, reference.window
    if mine is not None and theirs is not None and _same_windows(run, reference):
        start, end = mine.start_s, mine.end_s
        it, fac = mine.it_energy_kwh, mine.facility_energy_kwh
        ref_it, ref_fac = theirs.it_energy_kwh, theirs.facility_energy_kwh
    else:
        start, end = 0.0, max(run.simulated_s, reference.simulated_s)
        it, fac = _until(run, end)
        ref_it, ref_fac = _until(reference, end)
    per_work, ref_per_work = energy_per_work_h(run), energy_per_work_h(reference)
    return Saving(
        reference_baseline=reference.baseline,
        seed=reference.seed,
        window_start_s=start,
        window_end_s=end,
        it_kwh=it,
        reference_it_kwh=ref_it,
        facility_kwh=fac,
        reference_facility_kwh=ref_fac,
        it_saving_pct=saving_pct(it, ref_it),
        facility_saving_pct=saving_pct(fac, ref_fac),
        kwh_per_work_h=per_work,
        reference_kwh_per_work_h=ref_per_work,
        per_work_h_saving_pct=saving_pct(per_work, ref_per_work),
    )


OVERHEAD = "overhead"
"""The row of ``class_savings`` for the energy no workload explains."""


@dataclass(frozen=True, slots=True)
class ClassSaving:
    """One workload class (or the overhead) of a run against its reference, over the window of
    the run's IT saving (see the module docstring)."""

    kwh: float
    reference_kwh: float
    saving_kwh: float
    """``reference_kwh - kwh``."""
    saving_pct: float | None
    """``saving_kwh`` as a percentage of ``reference_kwh`` (None: the reference used none)."""

    @classmethod
    def of(cls, kwh: float, reference_kwh: float) -> ClassSaving:
        return cls(kwh, reference_kwh, reference_kwh - kwh, saving_pct(kwh, reference_kwh))


def _by_class(run: RunResult, end_s: float, windowed: bool) -> dict[str, float] | None:
    """kWh per class and, under ``OVERHEAD``, the overhead of ``run``: inside its window, or
    from 0 to ``end_s`` with its end draw as overhead after its end; None: not accounted."""
    if windowed:
        assert run.window is not None
        energy = run.window.energy_by_workload
        if energy is None:
            return None
        return {**energy.by_class, OVERHEAD: energy.overhead_kwh}
    energy = run.energy_by_workload
    if energy is None:
        return None
    idle_on = run.idle_it_w * max(0.0, end_s - run.simulated_s) / _J_PER_KWH
    return {**energy.by_class, OVERHEAD: energy.overhead_kwh + idle_on}


def class_savings(run: RunResult, reference: RunResult) -> dict[str, ClassSaving] | None:
    """Per workload class, and the overhead last, ``run`` against ``reference`` over the window
    ``compare`` uses; None when either run has no energy per workload."""
    windowed = _same_windows(run, reference)
    end = max(run.simulated_s, reference.simulated_s)
    mine = _by_class(run, end, windowed)
    theirs = _by_class(reference, end, windowed)
    if mine is None or theirs is None:
        return None
    names = [*sorted((set(mine) | set(theirs)) - {OVERHEAD}), OVERHEAD]
    return {n: ClassSaving.of(mine.get(n, 0.0), theirs.get(n, 0.0)) for n in names}


def is_reference(run: RunResult) -> bool:
    return run.baseline == REFERENCE_BASELINE


def pairs(results: Iterable[RunResult]) -> list[tuple[RunResult, RunResult | None]]:
    """Each run with its reference: the first A run of the same scenario and seed (None: there
    is none; an A run is its own reference)."""
    results = list(results)
    references: dict[tuple[str, int], RunResult] = {}
    for r in results:
        if is_reference(r):
            references.setdefault((r.scenario, r.seed), r)
    return [(r, references.get((r.scenario, r.seed))) for r in results]


def savings(results: Sequence[RunResult]) -> list[Saving | None]:
    """For each run in order, its saving against its reference (None: it is the reference, or
    it has none)."""
    return [
        compare(r, ref) if ref is not None and not is_reference(r) else None
        for r, ref in pairs(results)
    ]


def section(run: RunResult, reference: RunResult | None) -> dict[str, Any]:
    """The ``saving`` object of ``run`` in ``results.json``."""
    if is_reference(run):
        return {
            "reference": "this run",
            "facility_kwh_per_work_h": {"run": energy_per_work_h(run)},
        }
    if reference is None:
        return {"reference": None}
    s = compare(run, reference)
    by_class = class_savings(run, reference)
    extra: dict[str, Any] = {}
    if by_class is not None:
        extra["by_class"] = {
            name: {
                "run_kwh": c.kwh,
                "reference_kwh": c.reference_kwh,
                "saving_kwh": c.saving_kwh,
                "saving_pct": c.saving_pct,
            }
            for name, c in by_class.items()
        }
    return {
        **extra,
        "reference": {"baseline": s.reference_baseline, "seed": s.seed},
        "window_s": [s.window_start_s, s.window_end_s],
        "it_kwh": {"run": s.it_kwh, "reference": s.reference_it_kwh},
        "facility_kwh": {"run": s.facility_kwh, "reference": s.reference_facility_kwh},
        "it_saving_pct": s.it_saving_pct,
        "facility_saving_pct": s.facility_saving_pct,
        "facility_kwh_per_work_h": {
            "run": s.kwh_per_work_h,
            "reference": s.reference_kwh_per_work_h,
        },
        "per_work_h_saving_pct": s.per_work_h_saving_pct,
    }
