"""Run results as files: one canonical JSON text, and the way back to ``RunResult`` values.

The text is canonical so that two runs of the same specs can be compared with ``cmp`` or
``git diff``: keys sorted, two-space indentation, a trailing newline, and every float rounded to
``SIGNIFICANT_DIGITS`` significant digits. Ten digits keep a GWh total exact to the Wh while
dropping the last-bit noise a different summation order or numpy build can leave behind.
Non-finite floats are refused rather than written as ``NaN`` (which is not JSON): a NaN in a
result is an engine bug, and it should be seen where it is written, not when a table is read.

``results.json`` also gives each run its ``saving`` against its reference (``joulie.sim.saving``):
it depends on the other runs of the file, so it is derived when the file is written and left
out when a result is read back (and from a lone ``run-<index>.json``).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

from joulie.sim.results import (
    RESULT_SCHEMA_VERSION,
    ClassResult,
    LifecycleResult,
    Percentiles,
    RunResult,
    Sample,
    WindowResult,
    WorkloadEnergy,
)
from joulie.sim.saving import pairs, section

SIGNIFICANT_DIGITS = 10


class ResultFormatError(ValueError):
    """A result file or dict that is not a result of the schema this version reads."""


def canonical_float(value: float) -> float:
    """``value`` rounded to ``SIGNIFICANT_DIGITS`` significant digits (the JSON and CSV form)."""
    return float(f"{value:.{SIGNIFICANT_DIGITS}g}")


def _rounded(value: Any, where: str) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}: {value} is not a finite number")
        return canonical_float(value)
    if isinstance(value, Mapping):
        return {str(k): _rounded(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, Sequence):
        return [_rounded(v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise TypeError(f"{where}: {type(value).__name__} is not JSON-able")


def canonical_json(value: Any) -> str:
    """Any JSON-able value as canonical text (see the module docstring)."""
    return json.dumps(_rounded(value, "$"), sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def result_json(result: RunResult) -> str:
    """One result as canonical JSON (the form of ``run-<index>.json``)."""
    return canonical_json(result.to_dict())


def results_json(results: Sequence[RunResult]) -> str:
    """Results as a canonical JSON list, in the order given (the form of ``results.json``),
    each with its ``saving`` section."""
    return canonical_json(
        [{**r.to_dict(), "saving": section(r, reference)} for r, reference in pairs(results)]
    )


def _checked_keys(d: Any, cls: type, where: str) -> dict[str, Any]:
    """The dict's entries after checking they are exactly the dataclass's fields."""
    if not isinstance(d, Mapping):
        raise ResultFormatError(f"{where}: expected an object, got {type(d).__name__}")
    names = {f.name for f in fields(cls)}
    required = {
        f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING
    }
    missing = sorted(required - d.keys())
    unknown = sorted(set(d.keys()) - names)
    if missing:
        raise ResultFormatError(f"{where}: missing {', '.join(missing)}")
    if unknown:
        raise ResultFormatError(f"{where}: unknown {', '.join(unknown)}")
    return dict(d)


def _percentiles(d: Any, where: str) -> Percentiles:
    return Percentiles(**_checked_keys(d, Percentiles, where))


def _class_result(d: Any, where: str) -> ClassResult:
    entries = _checked_keys(d, ClassResult, where)
    for key in ("completion_s", "slowdown", "stretch"):
        entries[key] = _percentiles(entries[key], f"{where}.{key}")
    return ClassResult(**entries)


def _classes(value: Any, where: str) -> dict[str, ClassResult]:
    return {
        name: _class_result(c, f"{where}.{name}")
        for name, c in _checked_mapping(value, where).items()
    }


def _kwh_by(value: Any, where: str) -> dict[str, float]:
    return {name: float(kwh) for name, kwh in _checked_mapping(value, where).items()}


def _workload_energy(d: Any, where: str) -> WorkloadEnergy:
    entries = _checked_keys(d, WorkloadEnergy, where)
    for key in ("by_class", "by_kind", "by_namespace"):
        entries[key] = _kwh_by(entries[key], f"{where}.{key}")
    return WorkloadEnergy(**entries)


def _window(d: Any, where: str) -> WindowResult:
    entries = _checked_keys(d, WindowResult, where)
    entries["classes"] = _classes(entries["classes"], f"{where}.classes")
    if entries.get("energy_by_workload") is not None:
        entries["energy_by_workload"] = _workload_energy(
            entries["energy_by_workload"], f"{where}.energy_by_workload"
        )
    return WindowResult(**entries)


def result_from_dict(d: Mapping[str, Any]) -> RunResult:
    """The inverse of ``RunResult.to_dict`` (after a JSON round trip).

    Raises ``ResultFormatError`` naming the first thing wrong: another schema version, a
    missing or unknown field. A ``saving`` section is derived, not read (it is recomputed from
    the runs whenever it is needed).
    """
    if not isinstance(d, Mapping):
        raise ResultFormatError(f"a result is an object, got {type(d).__name__}")
    d = {k: v for k, v in d.items() if k != "saving"}
    version = d.get("schema_version")
    if version != RESULT_SCHEMA_VERSION:
        raise ResultFormatError(
            f"schema_version {version!r}: this version of joulie reads {RESULT_SCHEMA_VERSION}"
        )
    entries = _checked_keys(d, RunResult, "result")
    entries["classes"] = _classes(entries["classes"], "result.classes")
    entries["profile_shares"] = {
        family: {profile: float(share) for profile, share in shares.items()}
        for family, shares in _checked_mapping(
            entries["profile_shares"], "result.profile_shares"
        ).items()
    }
    entries["series"] = tuple(
        Sample(**_checked_keys(s, Sample, f"result.series[{i}]"))
        for i, s in enumerate(entries.get("series", ()))
    )
    if entries.get("lifecycle") is not None:
        entries["lifecycle"] = LifecycleResult(
            **_checked_keys(entries["lifecycle"], LifecycleResult, "result.lifecycle")
        )
    if entries.get("window") is not None:
        entries["window"] = _window(entries["window"], "result.window")
    if entries.get("energy_by_workload") is not None:
        entries["energy_by_workload"] = _workload_energy(
            entries["energy_by_workload"], "result.energy_by_workload"
        )
    return RunResult(**entries)


def _checked_mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ResultFormatError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def read_results(path: str | Path) -> list[RunResult]:
    """Results from ``results.json`` (a list) or a ``run-<index>.json`` (one result)."""
    path = Path(path)
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ResultFormatError(f"{path}: not JSON ({exc})") from exc
    items = loaded if isinstance(loaded, list) else [loaded]
    try:
        return [result_from_dict(item) for item in items]
    except ResultFormatError as exc:
        raise ResultFormatError(f"{path}: {exc}") from exc


def write_atomically(path: str | Path, text: str) -> Path:
    """Write ``text`` through a temp file in the same folder and a rename, so that a process
    killed mid-write leaves the old file or none, never half a result."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


# --- a folder of per-index results (what an Indexed Job's pods leave) --------------------


class MissingRuns(RuntimeError):
    """``collect`` found gaps; ``results`` holds what is there, in index order."""

    def __init__(self, missing: list[int], results: list[RunResult]) -> None:
        super().__init__(f"missing run indexes: {_ranges(missing)}")
        self.missing, self.results = missing, results


def run_file(out_dir: str | Path, index: int) -> Path:
    """Where the result of run ``index`` lives: ``<out_dir>/run-<index:05d>.json``."""
    return Path(out_dir) / f"run-{index:05d}.json"


def collect(out_dir: str | Path, expected: int | None = None) -> list[RunResult]:
    """Every ``run-*.json`` of the folder in index order.

    Raises ``MissingRuns`` (with the indexes and the results found) when an index below the
    highest one found, or below ``expected`` when given, has no file.
    """
    found: dict[int, Path] = {}
    for path in Path(out_dir).glob("run-*.json"):
        stem = path.stem.removeprefix("run-")
        if stem.isdigit():
            found[int(stem)] = path
    end = expected if expected is not None else max(found, default=-1) + 1
    results = [r for i in sorted(found) for r in read_results(found[i])]
    missing = [i for i in range(end) if i not in found]
    if missing:
        raise MissingRuns(missing, results)
    return results


def _ranges(indexes: list[int]) -> str:
    """``[0, 1, 2, 5]`` as ``0-2, 5``: a thousand missing indexes stay one readable line."""
    spans: list[str] = []
    for _, group in itertools.groupby(enumerate(indexes), lambda p: p[1] - p[0]):
        run = [i for _, i in group]
        spans.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ", ".join(spans)
