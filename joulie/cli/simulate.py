"""``joulie simulate``: run scenarios and sweeps, print the comparison, write the outputs.

Runs are reproducible: the same options print the same JSON byte for byte. What depends on the
host (wall time) only goes to standard error with the progress.
"""

from __future__ import annotations

import argparse
import errno
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from joulie.sim.generator_options import GeneratorOptions
from joulie.sim.results import RunResult
from joulie.sim.run_spec import ALL_BASELINES, PRESETS, RunSpec, preset

__all__ = ["run"]

EXIT_USAGE = 2


class UsageError(ValueError):
    pass


def _pairs(items: Sequence[str], what: str) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{what} {item!r}: expected KEY=VALUE")
        if key in values:
            raise UsageError(f"{what} {key} is given more than once; give each key once")
        values[key] = _scalar(raw)
        if isinstance(values[key], float) and not math.isfinite(values[key]):
            raise UsageError(f"{what} {item}: not a finite number")
    return values


def _scalar(raw: str) -> Any:
    for convert in (int, float):
        try:
            return convert(raw)
        except (ValueError, OverflowError):
            pass
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    return raw


def _list(text: str, what: str, convert: Callable[[str], Any], valid: str) -> list[Any]:
    """A comma list: every value converted, none repeated (the runs would be duplicates that
    a table reports as separate seeds or baselines). ``valid`` says what may be listed."""
    items = [v.strip() for v in text.split(",") if v.strip()]
    if not items:
        raise UsageError(f"{what}: give at least one value ({valid})")
    values = []
    for item in items:
        try:
            values.append(convert(item))
        except ValueError:
            raise UsageError(f"{what} {text!r}: {item!r} is not one of {valid}") from None
    repeated = [str(v) for v in dict.fromkeys(values) if values.count(v) > 1]
    if repeated:
        raise UsageError(
            f"{what} {text!r}: {', '.join(repeated)} given more than once; name each once"
        )
    return values


def _baseline(value: str) -> str:
    if value not in ALL_BASELINES:
        raise ValueError(value)
    return value


def _seed(value: str) -> int:
    seed = int(value)
    if seed < 0:
        raise ValueError(value)
    return seed


BASELINE_CHOICES = ", ".join(ALL_BASELINES)
SEED_CHOICES = "the integers 0 and up, e.g. 1,2,3"


def specs_from_args(args: argparse.Namespace) -> list[RunSpec]:
    """The runs the top-level options ask for: every baseline for every seed, from the
    embedded scenario ``--scenario`` names (the default one for a plain label)."""
    base = preset(args.scenario)
    baselines = _list(args.baselines, "--baselines", _baseline, BASELINE_CHOICES)
    seeds = (
        list(base.seeds)
        if args.seeds is None
        else _list(args.seeds, "--seeds", _seed, SEED_CHOICES)
    )
    generator = {**base.generator, **_pairs(args.gen, "--gen")}
    try:
        GeneratorOptions.from_mapping(generator)
    except ValueError as exc:
        raise UsageError(f"--gen {exc}") from None
    hours = base.hours if args.hours is None else args.hours
    warmup = base.warmup_hours if args.warmup_hours is None else args.warmup_hours
    params = _pairs(args.param, "--param")
    lifecycles = {"off": [False], "on": [True], "both": [False, True]}[args.lifecycle]
    # With both, the lifecycle's knobs are for the runs that have it.
    plain = {k: v for k, v in params.items() if not k.startswith("lifecycle_")}
    scenario = args.scenario
    if args.inventory != "default" and scenario in PRESETS:
        # A preset's name labels its runs; on another inventory the label says which (the
        # table read "default" for exp02-5k runs). A label of the user's own is kept as given.
        stem = Path(args.inventory).stem  # an embedded name is its own stem
        scenario = stem if scenario == "default" else f"{scenario}-{stem}"
    try:
        return [
            RunSpec(
                scenario=scenario,
                inventory=args.inventory,
                trace=args.trace,
                generator=generator,
                baseline=baseline,
                seed=seed,
                hours=hours,
                limit_hours=args.limit_hours,
                governors=args.governors,
                lifecycle=lifecycle,
                params=params if lifecycle or args.lifecycle == "off" else plain,
                warmup_hours=warmup,
            )
            for seed in seeds
            for baseline in baselines
            for lifecycle in lifecycles
        ]
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(map(str, first["loc"])) or "options"
        flag = _FLAG_OF_FIELD.get(where, where)
        raise UsageError(f"{flag}: {first['msg']}") from None


_FLAG_OF_FIELD = {
    "hours": "--hours",
    "limit_hours": "--limit-hours",
    "warmup_hours": "--warmup-hours",
    "seed": "--seeds",
}


def check_specs(specs: Sequence[RunSpec], what: str = "--param ") -> None:
    """Refuse, before anything runs, params the controller manager would refuse as
    environment variables (the same bounds, read from its settings)."""
    from joulie.cli.sim_params import first_problem

    problem = first_problem((spec.params for spec in specs), what)
    if problem:
        raise UsageError(problem)
    # The generator's options too, before any run (a sweep's worker would fail each run).
    seen: list[dict[str, Any]] = []
    for spec in specs:
        if spec.trace is not None or spec.generator in seen:
            continue
        seen.append(spec.generator)
        try:
            GeneratorOptions.from_mapping(spec.generator)
        except (TypeError, ValueError) as exc:
            where = "--gen " if what == "--param " else what.replace("params.", "generator.")
            raise UsageError(f"{where}{exc}") from None


class _Progress:
    """One line on stderr, redrawn: which run, how far, how long so far. Each run's time is
    its own (from the moment its label was shown), not the command's running total."""

    REDRAW_S = 0.5

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.live = not quiet and sys.stderr.isatty()
        """Redraw only on a terminal: a log file gets the one line per finished run."""
        self.started = time.perf_counter()
        self._drawn = 0.0

    def __call__(self, label: str) -> Callable[[float], None]:
        self.started = time.perf_counter()

        def show(fraction: float) -> None:
            now = time.perf_counter()
            if self.live and now - self._drawn >= self.REDRAW_S:
                self._drawn = now
                sys.stderr.write(f"\r{label}: {fraction:6.1%} ({now - self.started:.0f} s)   ")
                sys.stderr.flush()

        return show

    def done(self, label: str) -> None:
        if not self.quiet:
            elapsed = time.perf_counter() - self.started
            start = "\r" if self.live else ""
            sys.stderr.write(f"{start}{label}: done in {elapsed:.1f} s wall time\n")


def run_label(spec: RunSpec) -> str:
    """A run as its table row names it: scenario, baseline with its +gov / +L, seed."""
    baseline: str = spec.baseline
    if spec.governors and baseline != "A":
        baseline += "+gov"
    if spec.lifecycle:
        baseline += "+L"
    return f"{spec.scenario} {baseline} seed {spec.seed}"


def _run_specs(specs: Sequence[RunSpec], workers: int, quiet: bool) -> list[RunResult]:
    from joulie.sim import sweep
    from joulie.sim.scenario import run as run_one

    _warn_unknown_models(specs)
    _check_traces(specs)
    progress = _Progress(quiet)
    if workers > 1 and len(specs) > 1:
        results = sweep.run_all(specs, workers, progress=progress(f"{len(specs)} runs"))
        progress.done(f"{len(specs)} runs")
        return results
    results = []
    for spec in specs:
        label = run_label(spec)
        results.append(run_one(spec, progress(label)))
        progress.done(label)
    return results


def _check_traces(specs: Sequence[RunSpec]) -> None:
    """Before any run: a trace with no workload, or none that any node of the inventory can
    hold, is refused (the runs would report a row of zeros and exit 0); a trace with some
    workloads that fit nowhere gets a warning naming how many (they stay pending to the end of
    each run and count as unfinished)."""
    from joulie.core.intents import IntentConfig
    from joulie.hardware.catalog import Catalog
    from joulie.sim.fleet import build_fleet
    from joulie.sim.scenario import load_named_inventory
    from joulie.sim.trace import read_trace

    for trace, inventory in dict.fromkeys((s.trace, s.inventory) for s in specs if s.trace):
        assert trace is not None
        workloads = read_trace(trace)
        if not workloads:
            raise UsageError(f"{trace}: the trace holds no workloads, so nothing would run")
        fleet = build_fleet(load_named_inventory(inventory), Catalog.load(), IntentConfig())
        misfits = [w for w in workloads if not _fits_somewhere(w, fleet)]
        if not misfits:
            continue
        first = misfits[0]
        asks = f"{first.id} asks {first.cpu_millis}m CPU, {first.memory_bytes / 2**30:g} GiB"
        if first.gpus:
            asks += f", {first.gpus} {first.gpu_resource}"
        if len(misfits) == len(workloads):
            raise UsageError(
                f"{trace}: no workload fits any node of inventory {inventory} (e.g. {asks}), "
                "so nothing would run"
            )
        print(
            f"joulie simulate: warning: {trace}: {len(misfits)} of {len(workloads)} workloads "
            f"fit no node of inventory {inventory} and will never run (e.g. {asks})",
            file=sys.stderr,
        )


def _fits_somewhere(workload: Any, fleet: Any) -> bool:
    """Whether one node of ``fleet`` offers what one pod of ``workload`` requests."""
    fits = (fleet.cpu_millis >= workload.cpu_millis) & (fleet.memory_bytes >= workload.memory_bytes)
    if workload.gpus and workload.gpu_resource:
        offers = [r == workload.gpu_resource for r in fleet.gpu_resource]
        fits &= (fleet.gpus >= workload.gpus) & offers
    return bool(fits.any())


def _warn_unknown_models(specs: Sequence[RunSpec]) -> None:
    """One line per model the catalog lacks, for the whole command and before any run starts
    (worker processes would each repeat it)."""
    from joulie.hardware.catalog import Catalog
    from joulie.hardware.unknown_models import WarnedOnce
    from joulie.sim.fleet import inventory_unknown_models
    from joulie.sim.scenario import load_named_inventory

    warned = WarnedOnce()
    for name in dict.fromkeys(spec.inventory for spec in specs):
        try:
            models = inventory_unknown_models(load_named_inventory(name), Catalog.load())
        except (ValueError, OSError):
            continue  # the run itself reports a bad inventory
        for model in warned.first_time(models):
            print(f"joulie simulate: warning: {name}: {model.describe()}", file=sys.stderr)


def _emit(results: Sequence[RunResult], args: argparse.Namespace) -> None:
    from joulie.sim.report import comparison_table, write_outputs
    from joulie.sim.result_io import results_json

    if args.output is not None:
        write_outputs(results, args.output, plots=not args.no_plots)
    if args.format == "json":
        sys.stdout.write(results_json(results))
    else:
        sys.stdout.write(comparison_table(results))


def _command(args: argparse.Namespace) -> int:
    from joulie.sim import result_io, sweep, sweep_job

    command = args.simulate_command
    if command is None:
        specs = specs_from_args(args)
        check_specs(specs)
        _emit(_run_specs(specs, args.workers, args.quiet), args)
    elif command == "sweep":
        specs = sweep.load_sweep(args.file)
        check_specs(specs, f"{args.file}: params.")
        _emit(_run_specs(specs, args.sweep_workers, args.quiet), args)
    elif command == "job":
        specs = sweep.load_sweep(args.file)
        check_specs(specs, f"{args.file}: params.")
        objs = sweep_job.indexed_job(
            specs,
            image=args.image,
            namespace=args.namespace,
            name=args.name,
            results_claim=args.results_claim,
            parallelism=args.parallelism,
        )
        sys.stdout.write(sweep_job.manifests_yaml(objs))
    elif command == "run-index":
        path = sweep.run_index(args.specs, args.index, args.index_output)
        print(path)
    else:  # collect
        if not args.dir.is_dir():
            raise FileNotFoundError(errno.ENOENT, "no such folder", str(args.dir))
        try:
            results = result_io.collect(args.dir, args.expected)
        except result_io.MissingRuns as exc:
            print(f"joulie simulate collect: {exc}", file=sys.stderr)
            _emit(exc.results, args)
            return 1
        if not results:
            # Nothing to compare: an exit 0 with an empty table read as success in a script.
            print(
                f"joulie simulate collect: {args.dir}: no run files (run-NNNNN.json) to collect",
                file=sys.stderr,
            )
            return 1
        _emit(results, args)
    return 0


def run(args: argparse.Namespace) -> int:
    """Exit status: 0 done, 1 a run failed or runs are missing, 2 bad options or inputs. A file
    that cannot be read or written reaches the CLI's own handler (``joulie: PATH: reason``)."""
    from joulie.sim.sweep import RunFailed
    from joulie.sim.sweep_job import SweepError

    try:
        return _command(args)
    except (UsageError, SweepError, ValueError) as exc:
        print(f"joulie simulate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except RunFailed as exc:
        print(f"joulie simulate: {exc}", file=sys.stderr)
        return 1
