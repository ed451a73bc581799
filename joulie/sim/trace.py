"""The standalone simulator's workload: what is submitted, when, and how much work it is.

A trace is a JSONL file of workload records (format in ``docs/simulator-trace.md``). Upstream
Joulie's job traces load too: their ``type: "job"`` records are mapped onto workloads by
``joulie.sim.trace_upstream``, so an upstream experiment can be replayed as it was.
Every error names the file, the line and the field, so a hand-edited trace is fixed in one pass.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import IO, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from joulie.api.gpu import gpu_resource_kind
from joulie.api.workload import DisruptionMode

TRACE_SCHEMA_VERSION = 1
SUPPORTED_SCHEMA_VERSIONS: tuple[int, ...] = (TRACE_SCHEMA_VERSION,)

# Sensitivities and shares are checked with this slack so that 0.7 + 0.3 passes.
_EPSILON = 1e-9


MAX_CPU_MILLIS = 10**9
"""Largest CPU request of one pod taken: a million cores (``cpu: "1E"`` is a valid quantity, a
billion billion cores, and overflowed the engine's 64-bit columns)."""
MAX_MEMORY_BYTES = 2**60
"""Largest memory request of one pod taken: an exbibyte."""
MAX_GPUS = 10**6
"""Largest GPU request of one pod taken. A request no node can hold is warned about (or
refused when nothing fits) by ``joulie simulate``, which knows the inventory."""


class TraceError(ValueError):
    """A trace that cannot be used; the message names the file, the line and the field."""


class InvalidWorkload(ValueError):
    """A Workload whose values break a rule; ``field`` is the dataclass field at fault."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Workload:
    """One unit of submitted work: a lone pod, or a gang of ``pods`` identical pods (a
    PodGroup) of which at least ``min_count`` must run at once."""

    id: str
    submit_s: float
    """Seconds after the start of the run."""
    work_s: float
    """Run time at full speed (every clock at its maximum, nothing capped)."""
    pods: int = 1
    min_count: int = 1
    """Gang: how many of the pods must be placed together (1 for a lone pod)."""
    performance: bool = False
    """The ``joulie.io/workload-class: performance`` annotation."""
    priority: int = 0
    disruption: DisruptionMode = DisruptionMode.SINGLE
    """The PodGroup's disruption mode: ``all`` means preempting one pod preempts the gang."""
    cpu_millis: int = 1000
    """CPU request of each pod, in millicores."""
    memory_bytes: int = 1 << 30
    """Memory request of each pod."""
    gpus: int = 0
    """GPU units each pod requests, of ``gpu_resource``."""
    gpu_resource: str | None = None
    """The extended resource the GPUs are requested as (``nvidia.com/gpu``, ``amd.com/gpu`` ...)."""
    cpu_sensitivity: float = 1.0
    """Share of the run time that scales with the CPU clock (0..1)."""
    gpu_sensitivity: float = 0.0
    """Share of the run time that scales with the GPU clock (0..1; with the CPU share <= 1)."""
    cpu_util: float = 1.0
    """Share of the requested cores the pod keeps busy."""
    gpu_util: float = 1.0
    """Share of the requested GPUs' capacity the pod keeps busy."""
    kind: str = ""
    """What sort of job this is (the generator's type, e.g. ``gpu-training``), for reports."""

    def __post_init__(self) -> None:
        # The engine trusts these rules; checking at construction means no code path (trace,
        # generator, a test's hand-built list) can hand it a workload that breaks them.
        if not isinstance(self.disruption, DisruptionMode):
            try:
                object.__setattr__(self, "disruption", DisruptionMode(self.disruption))
            except ValueError:
                raise InvalidWorkload(
                    "disruption", f"{self.disruption!r} is not one of 'single', 'all'"
                ) from None
        problem = workload_problem(self)
        if problem is not None:
            raise InvalidWorkload(*problem)

    @property
    def gang(self) -> bool:
        return self.pods > 1

    @property
    def memory_bound(self) -> bool:
        """GPU work bound by memory bandwidth rather than compute: inference (the generator's
        ``gpu-inference``, a trace's ``inference`` workload type); it scales with a board's
        memory bandwidth, other GPU work with its compute."""
        return "inference" in self.kind.lower()


def workload_problem(w: Workload) -> tuple[str, str] | None:
    """The first rule ``w`` breaks, as (field, reason), or None when it is valid."""
    if _plainly_valid(w):
        return None
    if not w.id:
        return "id", "must not be empty"
    if not (math.isfinite(w.submit_s) and w.submit_s >= 0):
        return "submit_s", f"must be a finite number >= 0, got {w.submit_s!r}"
    if not (math.isfinite(w.work_s) and w.work_s > 0):
        return "work_s", f"must be a finite number > 0, got {w.work_s!r}"
    if w.pods < 1:
        return "pods", f"must be >= 1, got {w.pods}"
    if not 1 <= w.min_count <= w.pods:
        return "min_count", f"must be between 1 and pods ({w.pods}), got {w.min_count}"
    for name, most in (
        ("cpu_millis", MAX_CPU_MILLIS),
        ("memory_bytes", MAX_MEMORY_BYTES),
        ("gpus", MAX_GPUS),
    ):
        if not 0 <= getattr(w, name) <= most:
            return name, f"must be from 0 to {most}, got {getattr(w, name)}"
    if w.gpu_resource is not None and not _is_gpu_resource(w.gpu_resource):
        return "gpu_resource", f"{w.gpu_resource!r} is not a GPU resource name"
    if w.gpus > 0 and w.gpu_resource is None:
        return "gpu_resource", f"required when gpus > 0 (gpus is {w.gpus})"
    return _share_problem(w)


def _plainly_valid(w: Workload) -> bool:
    """One expression over every rule: the generator builds a few hundred thousand workloads,
    and naming the broken rule is only needed when this is False (NaN fails every test)."""
    resource = w.gpu_resource
    return bool(
        w.id
        and 0.0 <= w.submit_s < math.inf
        and 0.0 < w.work_s < math.inf
        and 1 <= w.min_count <= w.pods
        and 0 <= w.cpu_millis <= MAX_CPU_MILLIS
        and 0 <= w.memory_bytes <= MAX_MEMORY_BYTES
        and (
            w.gpus == 0
            if resource is None
            else (0 <= w.gpus <= MAX_GPUS and _is_gpu_resource(resource))
        )
        and 0.0 <= w.cpu_sensitivity <= 1.0
        and 0.0 <= w.gpu_sensitivity <= 1.0
        and w.cpu_sensitivity + w.gpu_sensitivity <= 1.0 + _EPSILON
        and 0.0 <= w.cpu_util <= 1.0
        and 0.0 <= w.gpu_util <= 1.0
    )


@functools.cache
def _is_gpu_resource(name: str) -> bool:
    return gpu_resource_kind(name) is not None


def _share_problem(w: Workload) -> tuple[str, str] | None:
    for name in ("cpu_sensitivity", "gpu_sensitivity", "cpu_util", "gpu_util"):
        value = getattr(w, name)
        if not 0.0 <= value <= 1.0:
            return name, f"must be between 0 and 1, got {value!r}"
    if w.cpu_sensitivity + w.gpu_sensitivity > 1.0 + _EPSILON:
        return "gpu_sensitivity", (
            f"cpu_sensitivity + gpu_sensitivity must be <= 1, got "
            f"{w.cpu_sensitivity!r} + {w.gpu_sensitivity!r}"
        )
    return None


# --- our own records -------------------------------------------------------------------------


class _WorkloadRecord(BaseModel):
    """One ``type: "workload"`` line: the Workload fields under their camelCase names."""

    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["workload"]
    schemaVersion: int
    id: str = Field(min_length=1)
    submitS: float
    workS: float
    pods: int = 1
    minCount: int = 1
    performance: bool = False
    priority: int = 0
    disruption: Literal["single", "all"] = "single"
    cpuMillis: int = 1000
    memoryBytes: int = 1 << 30
    gpus: int = 0
    gpuResource: str | None = None
    cpuSensitivity: float = 1.0
    gpuSensitivity: float = 0.0
    cpuUtil: float = 1.0
    gpuUtil: float = 1.0
    kind: str = ""


_FIELD_ORDER = [f.name for f in fields(Workload)]
_CAMEL = {name: to_camel(name) for name in _FIELD_ORDER}


def camel(field: str) -> str:
    """The trace's name of a Workload field (``submit_s`` -> ``submitS``)."""
    return _CAMEL.get(field, field)


def _record_to_workload(r: _WorkloadRecord) -> Workload:
    # Spelt out rather than looped over the fields: a 5k-node trace has 200,000 records.
    return Workload(
        id=r.id,
        submit_s=r.submitS,
        work_s=r.workS,
        pods=r.pods,
        min_count=r.minCount,
        performance=r.performance,
        priority=r.priority,
        disruption=_DISRUPTION[r.disruption],
        cpu_millis=r.cpuMillis,
        memory_bytes=r.memoryBytes,
        gpus=r.gpus,
        gpu_resource=r.gpuResource,
        cpu_sensitivity=r.cpuSensitivity,
        gpu_sensitivity=r.gpuSensitivity,
        cpu_util=r.cpuUtil,
        gpu_util=r.gpuUtil,
        kind=r.kind,
    )


_DISRUPTION = {mode.value: mode for mode in DisruptionMode}


def workload_record(w: Workload) -> dict[str, Any]:
    """The JSON object a workload is written as: every field, in the dataclass's order."""
    record: dict[str, Any] = {"type": "workload", "schemaVersion": TRACE_SCHEMA_VERSION}
    for name in _FIELD_ORDER:
        value = getattr(w, name)
        record[_CAMEL[name]] = value.value if isinstance(value, DisruptionMode) else value
    return record


# --- reading ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Located:
    line: int
    workload: Workload


def read_trace(path: str | Path) -> list[Workload]:
    """Read a trace file (ours, upstream's, or both mixed), sorted by (submit_s, id)."""
    path = Path(path)
    try:
        with path.open(encoding="utf-8") as stream:
            return parse_trace(_bounded_lines(stream, str(path)), str(path))
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the trace: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not UTF-8 text: {exc.reason}") from None


MAX_LINE_CHARS = 1024**2
"""Longest trace line read (a record is a few hundred characters; /dev/zero is one endless
line)."""
MAX_TRACE_CHARS = 256 * 1024**2
"""Largest trace read: about a million workloads, all held in memory for the run."""


def _bounded_lines(stream: IO[str], source: str) -> Iterator[str]:
    """The stream's lines, refusing one longer than :data:`MAX_LINE_CHARS` or a file longer
    than :data:`MAX_TRACE_CHARS` before reading it all."""
    total = 0
    for number in itertools.count(1):
        line = stream.readline(MAX_LINE_CHARS + 1)
        if not line:
            return
        if len(line) > MAX_LINE_CHARS:
            raise TraceError(f"{source}:{number}: longer than {MAX_LINE_CHARS} characters")
        total += len(line)
        if total > MAX_TRACE_CHARS:
            raise TraceError(f"{source}: larger than {MAX_TRACE_CHARS} characters")
        yield line


def parse_trace(lines: Iterable[str], source: str) -> list[Workload]:
    """Parse trace lines; ``source`` names them in errors. Sorted by (submit_s, id)."""
    # Imported here: the upstream mapping builds on this module's Workload and errors.
    from joulie.sim.trace_upstream import UpstreamJob, map_upstream_jobs, parse_upstream_job

    ours: list[_Located] = []
    jobs: list[UpstreamJob] = []
    for number, text in enumerate(lines, start=1):
        record = _load_line(text, source, number)
        if record is None:
            continue
        kind = record.get("type")
        if kind == "job":
            jobs.append(parse_upstream_job(record, source, number))
        elif kind == "workload" and "workloadId" in record and "id" not in record:
            continue  # upstream's per-workload metadata; its jobs carry everything we use
        elif kind == "workload":
            ours.append(_Located(number, _parse_workload(record, source, number)))
        else:
            raise TraceError(
                f"{source}:{number}: type: {kind!r} is not a record type; expected "
                "'workload', 'comment' or upstream's 'job'"
            )
    located = ours + [_Located(line, w) for line, w in map_upstream_jobs(jobs)]
    _check_unique_ids(located, source)
    return sorted((item.workload for item in located), key=lambda w: (w.submit_s, w.id))


def _load_line(text: str, source: str, number: int) -> dict[str, Any] | None:
    """The JSON object on a line, or None for a blank line or a comment record."""
    if not text.strip():
        return None
    try:
        record = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise TraceError(f"{source}:{number}: not valid JSON: {exc}") from None
    if not isinstance(record, dict):
        raise TraceError(f"{source}:{number}: expected a JSON object, got {type(record).__name__}")
    if "type" not in record:
        raise TraceError(
            f"{source}:{number}: type: missing; expected 'workload', 'comment' or 'job'"
        )
    return None if record["type"] == "comment" else record


def _parse_workload(record: dict[str, Any], source: str, number: int) -> Workload:
    where = f"{source}:{number}"
    version = record.get("schemaVersion")
    if version not in SUPPORTED_SCHEMA_VERSIONS or isinstance(version, bool):
        supported = ", ".join(str(v) for v in SUPPORTED_SCHEMA_VERSIONS)
        got = "missing" if version is None else f"{version!r} is not supported"
        raise TraceError(f"{where}: schemaVersion: {got} (supported: {supported})")
    try:
        parsed = _WorkloadRecord.model_validate(record)
    except ValidationError as exc:
        raise TraceError(describe_validation(exc, where)) from None
    try:
        return _record_to_workload(parsed)
    except InvalidWorkload as exc:
        raise TraceError(f"{where}: {camel(exc.field)}: {exc.reason}") from None


def describe_validation(exc: ValidationError, where: str) -> str:
    """One line per pydantic error: ``where: field.path: message``."""
    lines = []
    for err in exc.errors(include_url=False):
        field = ".".join(str(part) for part in err["loc"]) or "(record)"
        message = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "not a field of this record type"
        lines.append(f"{where}: {field}: {message}")
    return "\n".join(lines)


def _check_unique_ids(located: Sequence[_Located], source: str) -> None:
    first_line: dict[str, int] = {}
    for item in sorted(located, key=lambda item: item.line):
        seen = first_line.setdefault(item.workload.id, item.line)
        if seen != item.line:
            raise TraceError(
                f"{source}:{item.line}: id: {item.workload.id!r} repeats the id of line {seen}"
            )


# --- writing ---------------------------------------------------------------------------------


def _ordered(workloads: Iterable[Workload]) -> Iterator[Workload]:
    return iter(sorted(workloads, key=lambda w: (w.submit_s, w.id)))


# Characters that str.splitlines() and some editors take for line breaks, which orjson leaves
# raw inside strings: escaped, a record stays on its one line for any reader.
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def dump_trace(workloads: Iterable[Workload]) -> str:
    """The trace text of ``workloads``: one line each, sorted by (submit_s, id), so the same
    workloads always give the same bytes whatever order they come in."""
    text = "".join(orjson.dumps(workload_record(w)).decode() + "\n" for w in _ordered(workloads))
    return text.translate(_LINE_BREAKS)


def write_trace(workloads: Iterable[Workload], stream: IO[str]) -> None:
    """Write ``dump_trace(workloads)`` to a text stream."""
    stream.write(dump_trace(workloads))
