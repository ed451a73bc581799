"""Many runs: a sweep file's grid of run specs, run over local cores or as a Kubernetes
Indexed Job (one spec per completion index), and the results gathered back in spec order.

A sweep file (YAML or JSON) names one value or a list for each dimension::

    scenario: nightly            # label; varied dimensions are appended to it
    inventories: [exp01, exp02]
    baselines: [A, B, C]
    seeds: [1, 2, 3]
    hours: 24
    limit_hours: 48              # optional
    trace: null                  # optional JSONL trace instead of the generator
    generator: {...}             # passed through as is (never expanded)
    params: {static_hp_frac: [0.3, 0.5], guard_max_step: 2}
    governors: [false, true]
    lifecycle: [false, true]     # the node lifecycle (baselines labelled +L)

The order of the expansion is fixed (inventory, then params in key order, then governors,
lifecycle, baseline, seed; seeds innermost so a scenario's seeds sit together), so index ``i``
of a file always means the same run: that is what lets an Indexed Job's pods and a later
``collect`` agree without talking to each other. A file without ``lifecycle`` expands as it did
before the key existed.
"""

from __future__ import annotations

import itertools
import signal
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from joulie.api.yaml_file import yaml_problem
from joulie.sim.result_io import (
    MissingRuns,
    collect,
    result_json,
    run_file,
    write_atomically,
)
from joulie.sim.results import RunResult
from joulie.sim.run_spec import BASELINES, RunSpec
from joulie.sim.sweep_job import SweepError, indexed_job, manifests_yaml, read_specs, specs_json

__all__ = [
    "MissingRuns",
    "RunFailed",
    "SweepError",
    "collect",
    "engine_runner",
    "expand",
    "indexed_job",
    "load_sweep",
    "manifests_yaml",
    "read_specs",
    "run_all",
    "run_file",
    "run_index",
    "specs_json",
]
"""``collect``, ``run_file`` and ``MissingRuns`` live in ``result_io`` (reading a folder of
results), the Indexed Job and its ``specs.json`` in ``sweep_job``; they are re-exported so a
sweep's whole life is importable from here."""

Runner = Callable[[RunSpec], RunResult]
MAX_SWEEP_BYTES = 1024**2
"""Largest sweep file read (a sweep is a few lines; its expanded specs must fit a ConfigMap)."""
KEYS = {
    "scenario", "inventories", "baselines", "seeds", "hours", "limit_hours",
    "trace", "generator", "params", "governors", "lifecycle",
}  # fmt: skip


class RunFailed(RuntimeError):
    """One run of a sweep raised; the message names its index and spec."""

    def __init__(self, index: int, spec: RunSpec, cause: BaseException) -> None:
        super().__init__(f"run {index} ({describe(spec)}) failed: {cause!r}")
        self.index, self.spec = index, spec


def describe(spec: RunSpec) -> str:
    """The fields that tell runs of a sweep apart, for messages."""
    return (
        f"scenario={spec.scenario} inventory={spec.inventory} baseline={spec.baseline} "
        f"seed={spec.seed}"
    )


def engine_runner(spec: RunSpec) -> RunResult:
    """The real engine (``joulie.sim.scenario.run``: a spec to its scenario, then the engine),
    imported at call time so that loading a sweep or writing a Job does not load the engine."""
    from joulie.sim.scenario import run

    return run(spec)


# --- the grid ----------------------------------------------------------------------------


def _values(sweep: Mapping[str, Any], key: str, default: list[Any]) -> list[Any]:
    """A dimension as a non-empty list of distinct values (a scalar is a list of one)."""
    raw = sweep.get(key, default)
    values = list(raw) if isinstance(raw, list | tuple) else [raw]
    if not values:
        raise SweepError(f"{key}: an empty list would make an empty sweep")
    if any(values.count(v) > 1 for v in values):
        raise SweepError(f"{key}: {values} repeats a value (the runs would be duplicates)")
    return values


def _check_seeds(seeds: list[Any]) -> None:
    for seed in seeds:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise SweepError(f"seeds: {seed!r} is not an integer")


def _check_baselines(baselines: list[Any]) -> None:
    for baseline in baselines:
        if baseline not in BASELINES:
            raise SweepError(f"baselines: {baseline!r} is not one of {', '.join(BASELINES)}")


def _param_points(sweep: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The cartesian product of the params, keys in sorted order, values as listed."""
    params = sweep.get("params") or {}
    if not isinstance(params, Mapping):
        raise SweepError(f"params: expected a mapping of name to value(s), got {params!r}")
    keys = sorted(params)
    axes = [_values(params, k, []) for k in keys]
    for key, axis in zip(keys, axes, strict=True):
        for v in axis:
            if isinstance(v, Mapping | list):
                raise SweepError(f"params.{key}: {v!r} is not a number, string or boolean")
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*axes)]


def _label(
    base: str, inventory: str, point: dict[str, Any], governors: bool, varied: set[str]
) -> str:
    """The scenario label: the base plus each dimension that takes several values."""
    parts = [base]
    if "inventories" in varied:
        parts.append(Path(inventory).stem)
    parts += [f"{k}={v}" for k, v in point.items() if f"params.{k}" in varied]
    if "governors" in varied:
        parts.append("governors" if governors else "no-governors")
    return "-".join(parts)


def expand(sweep: Mapping[str, Any]) -> list[RunSpec]:
    """Every run of the sweep, in the fixed order the module docstring gives."""
    unknown = sorted(set(sweep) - KEYS)
    if unknown:
        raise SweepError(f"unknown key {', '.join(unknown)} (known: {', '.join(sorted(KEYS))})")
    inventories = _values(sweep, "inventories", ["default"])
    baselines, seeds = _values(sweep, "baselines", list(BASELINES)), _values(sweep, "seeds", [1])
    governors = _values(sweep, "governors", [False])
    lifecycles = _values(sweep, "lifecycle", [False])
    _check_baselines(baselines)
    _check_seeds(seeds)
    points = _param_points(sweep)
    params = sweep.get("params") or {}
    varied = {k for k, v in (("inventories", inventories), ("governors", governors)) if len(v) > 1}
    varied |= {f"params.{k}" for k, v in params.items() if isinstance(v, list) and len(v) > 1}
    base = str(sweep.get("scenario", "default"))
    fixed = {k: sweep[k] for k in ("hours", "limit_hours", "trace", "generator") if k in sweep}
    specs = []
    for inventory, point, gov, life, baseline, seed in itertools.product(
        inventories, points, governors, lifecycles, baselines, seeds
    ):
        fields = dict(fixed, inventory=inventory, params=point, governors=gov, lifecycle=life)
        fields.update(baseline=baseline, seed=seed)
        fields["scenario"] = _label(base, str(inventory), point, bool(gov), varied)
        try:
            specs.append(RunSpec(**fields))
        except ValidationError as exc:
            raise SweepError(_validation_message(exc)) from exc
    return specs


def _validation_message(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False)
    )


def load_sweep(path: str | Path) -> list[RunSpec]:
    """The runs of a sweep file (YAML, which also reads JSON); errors name the file and key."""
    path = Path(path)
    with open(path, "rb") as file:  # an OSError names the path (the CLI prints it so)
        raw = file.read(MAX_SWEEP_BYTES + 1)
    if len(raw) > MAX_SWEEP_BYTES:
        raise SweepError(f"{path}: larger than {MAX_SWEEP_BYTES} bytes; a sweep is a few lines")
    try:
        loaded = yaml.safe_load(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise SweepError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except yaml.YAMLError as exc:
        raise SweepError(f"{path}: not YAML or JSON: {yaml_problem(exc)}") from None
    if not isinstance(loaded, Mapping):
        raise SweepError(f"{path}: a sweep is a mapping of keys, got {type(loaded).__name__}")
    try:
        return expand(loaded)
    except SweepError as exc:
        raise SweepError(f"{path}: {exc}") from exc


# --- running -----------------------------------------------------------------------------


def run_all(
    specs: Sequence[RunSpec],
    workers: int,
    runner: Runner = engine_runner,
    progress: Callable[[float], None] | None = None,
) -> list[RunResult]:
    """Every spec's result, in spec order; ``progress`` gets the fraction of runs finished.

    ``workers=1`` runs in this process (easy to debug, no pickling); more uses a process pool,
    so ``runner`` must be a module-level function. The first failure cancels the runs not yet
    started and raises ``RunFailed`` naming the spec.
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    report = progress or (lambda _fraction: None)
    results: list[RunResult | None] = [None] * len(specs)
    if workers == 1 or len(specs) <= 1:
        for i, spec in enumerate(specs):
            results[i] = _run_one(runner, i, spec)
            report((i + 1) / len(specs))
    else:
        pool = ProcessPoolExecutor(
            max_workers=min(workers, len(specs)), initializer=_leave_interrupts_to_parent
        )
        try:
            pending = {pool.submit(runner, spec): i for i, spec in enumerate(specs)}
            _drain(pending, specs, results, report)
        except BaseException:
            _abandon(pool)
            raise
        pool.shutdown()
    return [r for r in results if r is not None]


def _leave_interrupts_to_parent() -> None:
    """A worker ignores Ctrl-C: the terminal sends SIGINT to the whole process group, and the
    parent, which stops the pool, says so in one line; each worker would print a traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _abandon(pool: ProcessPoolExecutor) -> None:
    """Stop a pool after a failure without waiting for the runs still going (they can take
    many minutes, and their results would be thrown away)."""
    workers = list(getattr(pool, "_processes", {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in workers:
        process.terminate()


def _run_one(runner: Runner, index: int, spec: RunSpec) -> RunResult:
    try:
        return runner(spec)
    except Exception as exc:
        raise RunFailed(index, spec, exc) from exc


def _drain(
    pending: dict[Future[RunResult], int],
    specs: Sequence[RunSpec],
    results: list[RunResult | None],
    report: Callable[[float], None],
) -> None:
    done_count, waiting = 0, set(pending)
    while waiting:
        done, waiting = wait(waiting, return_when=FIRST_COMPLETED)
        for future in sorted(done, key=pending.__getitem__):
            i = pending[future]
            if (exc := future.exception()) is not None:
                raise RunFailed(i, specs[i], exc) from exc
            results[i] = future.result()
            done_count += 1
        report(done_count / len(specs))


# --- one index of an Indexed Job (the Job itself is built in sweep_job) ------------------


def run_index(
    specs_path: str | Path, index: int, out_dir: str | Path, runner: Runner = engine_runner
) -> Path:
    """Run spec ``index`` of the file and write ``run-<index:05d>.json`` atomically (a temp
    file in the same folder, then a rename), so a pod killed mid-write leaves no half file
    that ``collect`` would take for a result."""
    specs = read_specs(specs_path)
    if not 0 <= index < len(specs):
        raise SweepError(f"index {index} is outside 0..{len(specs) - 1} of {specs_path}")
    result = _run_one(runner, index, specs[index])
    return write_atomically(run_file(out_dir, index), result_json(result))
