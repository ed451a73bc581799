"""Upstream Joulie's job traces, mapped onto our workloads so an upstream experiment can be
replayed as it was.

Upstream's generator wrote one ``type: "job"`` record per pod; ``parse_trace`` hands those
records here. The rules (units to seconds, sensitivities, utilisation defaults, gangs) are the
"Upstream Joulie traces" section of ``docs/simulator-trace.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from joulie.api.gpu import gpu_resource_kind
from joulie.api.quantity import QuantityError, parse_quantity
from joulie.api.workload import DisruptionMode
from joulie.sim.trace import (
    MAX_CPU_MILLIS,
    MAX_GPUS,
    MAX_MEMORY_BYTES,
    InvalidWorkload,
    TraceError,
    Workload,
    describe_validation,
)

UPSTREAM_SCHEMA_VERSIONS: tuple[str, ...] = ("v1",)
UPSTREAM_UNITS_PER_SECOND = 2.0
"""Work units one requested core (or GPU) completes per second at full speed upstream."""
UPSTREAM_GPU_SHARE = 0.8
"""Of a GPU job's run time, the share that follows the GPU clock (times upstream's GPU
sensitivity)."""
UPSTREAM_CPU_SHARE = 0.2
"""Of a GPU job's run time, the share that follows the CPU clock (times upstream's CPU
sensitivity): the host side feeding the GPUs. The two shares sum to 1."""
_UPSTREAM_DEFAULT_MEMORY = 64 << 20  # upstream's injected pods ask for 64Mi without a request
_GPU_ALIASES = {"gpu": "nvidia.com/gpu"}
# Upstream's utilisation defaults by workload class.
_CPU_UTIL = {"cpu.compute_bound": 0.95, "cpu.memory_bound": 0.60, "cpu.io_bound": 0.20}
_GPU_UTIL = {"gpu.compute_bound": 0.95, "gpu.memory_bound": 0.70}
_CPU_UTIL_OTHER, _GPU_UTIL_OTHER = 0.65, 0.80
_PROFILE_LABEL = "joulie.io/power-profile"


class _Upstream(BaseModel):
    # Upstream records carry more than we use (tags, memoryIntensity ...): ignore the rest.
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


class _PodTemplate(_Upstream):
    affinity: dict[str, Any] | None = None
    requests: dict[str, str | int | float] = Field(default_factory=dict)


class _Work(_Upstream):
    cpuUnits: float = Field(1000.0, ge=0)
    gpuUnits: float = Field(0.0, ge=0)


class _Sensitivity(_Upstream):
    cpu: float = Field(1.0, ge=0, le=1)
    gpu: float = Field(1.0, ge=0, le=1)


class _WorkloadClass(_Upstream):
    cpu: str | None = None
    gpu: str | None = None


class _Profile(_Upstream):
    cpuUtilization: float | None = Field(None, ge=0, le=1)
    gpuUtilization: float | None = Field(None, ge=0, le=1)


class _UpstreamJobRecord(_Upstream):
    type: Literal["job"]
    schemaVersion: str | int = "v1"
    jobId: str = Field(min_length=1)
    workloadId: str | None = None
    workloadType: str | None = None
    gang: bool = False
    submitTimeOffsetSec: float = Field(ge=0)
    intentClass: Literal["performance", "standard"] | None = None
    podTemplate: _PodTemplate = Field(default_factory=_PodTemplate)
    work: _Work = Field(default_factory=_Work)
    sensitivity: _Sensitivity = Field(default_factory=_Sensitivity)
    workloadClass: _WorkloadClass = Field(default_factory=_WorkloadClass)
    workloadProfile: _Profile = Field(default_factory=_Profile)


@dataclass(frozen=True, slots=True)
class UpstreamJob:
    """An upstream job record mapped onto one pod's worth of workload, before gangs form."""

    line: int
    job_id: str
    workload_id: str | None
    gang: bool
    pod: Workload
    """The job as a lone workload (id = jobId)."""

    @property
    def requests(self) -> tuple[int, int, int, str | None]:
        return (self.pod.cpu_millis, self.pod.memory_bytes, self.pod.gpus, self.pod.gpu_resource)


def parse_upstream_job(record: dict[str, Any], source: str, number: int) -> UpstreamJob:
    """Validate and map one upstream ``type: "job"`` record (rules in the trace doc)."""
    where = f"{source}:{number}"
    version = record.get("schemaVersion", "v1")
    if str(version) not in UPSTREAM_SCHEMA_VERSIONS and version != 1:
        raise TraceError(
            f"{where}: schemaVersion: {version!r} is not supported for upstream job records "
            f"(supported: {', '.join(UPSTREAM_SCHEMA_VERSIONS)})"
        )
    try:
        job = _UpstreamJobRecord.model_validate(record)
    except ValidationError as exc:
        raise TraceError(describe_validation(exc, where)) from None
    try:
        pod = _upstream_pod(job, where)
    except InvalidWorkload as exc:
        raise TraceError(f"{where}: {exc.field}: {exc.reason}") from None
    return UpstreamJob(number, job.jobId, job.workloadId, job.gang, pod)


def _upstream_pod(job: _UpstreamJobRecord, where: str) -> Workload:
    cpu_millis, memory_bytes, gpus, resource = _upstream_requests(job.podTemplate, where)
    cpu_s = job.work.cpuUnits / (cpu_millis / 1000 * UPSTREAM_UNITS_PER_SECOND)
    gpu_s = job.work.gpuUnits / (gpus * UPSTREAM_UNITS_PER_SECOND) if gpus else 0.0
    if max(cpu_s, gpu_s) <= 0:
        raise InvalidWorkload("work", "cpuUnits and gpuUnits leave nothing to run")
    sens = job.sensitivity
    cpu_sens, gpu_sens = (
        (UPSTREAM_CPU_SHARE * sens.cpu, UPSTREAM_GPU_SHARE * sens.gpu) if gpus else (sens.cpu, 0.0)
    )
    profile, classes = job.workloadProfile, job.workloadClass
    cpu_util = profile.cpuUtilization
    if cpu_util is None:
        cpu_util = _CPU_UTIL.get(classes.cpu or "", _CPU_UTIL_OTHER)
    gpu_util = profile.gpuUtilization
    if gpu_util is None:
        gpu_util = _GPU_UTIL.get(classes.gpu or "", _GPU_UTIL_OTHER) if gpus else 0.0
    return Workload(
        id=job.jobId,
        submit_s=job.submitTimeOffsetSec,
        work_s=max(cpu_s, gpu_s),
        performance=_upstream_performance(job),
        cpu_millis=cpu_millis,
        memory_bytes=memory_bytes,
        gpus=gpus,
        gpu_resource=resource,
        cpu_sensitivity=cpu_sens,
        gpu_sensitivity=gpu_sens,
        cpu_util=cpu_util,
        gpu_util=gpu_util,
        kind=job.workloadType or "upstream",
    )


def _upstream_requests(template: _PodTemplate, where: str) -> tuple[int, int, int, str | None]:
    """(cpu millis, memory bytes, GPUs, GPU resource) of a pod template's requests."""
    cpu_millis, memory, gpus, resource = 1000, _UPSTREAM_DEFAULT_MEMORY, 0, None
    for name, raw in template.requests.items():
        field = f"podTemplate.requests.{name}"
        value = _quantity(raw, field)
        if name == "cpu":
            cpu_millis = math.ceil(value * 1000)
            if cpu_millis <= 0:
                raise InvalidWorkload(field, f"must be > 0, got {raw!r}")
            if cpu_millis > MAX_CPU_MILLIS:
                raise InvalidWorkload(
                    field, f"{raw!r} is more than a pod can ask (at most {MAX_CPU_MILLIS // 1000})"
                )
        elif name == "memory":
            memory = math.ceil(value)
            if memory > MAX_MEMORY_BYTES:
                raise InvalidWorkload(field, f"{raw!r} is more than a pod can ask (at most 1Ei)")
        elif name in _GPU_ALIASES or gpu_resource_kind(name) is not None:
            if value.denominator != 1 or value < 0:
                raise InvalidWorkload(field, f"GPUs come whole: {raw!r} is not a whole number")
            if value > MAX_GPUS:
                raise InvalidWorkload(
                    field, f"{raw!r} is more than a pod can ask (at most {MAX_GPUS})"
                )
            if resource is not None and int(value) > 0 and gpus > 0:
                raise InvalidWorkload(field, f"a second GPU resource besides {resource}")
            if int(value) > 0:
                gpus, resource = int(value), _GPU_ALIASES.get(name, name)
    return cpu_millis, memory, gpus, resource


def _quantity(raw: str | int | float, field: str) -> Fraction:
    try:
        return parse_quantity(raw)
    except QuantityError as exc:
        raise InvalidWorkload(field, str(exc)) from None


def _upstream_performance(job: _UpstreamJobRecord) -> bool:
    """intentClass when given; else performance iff the affinity keeps the pod off eco nodes,
    which is how upstream's generator marked performance pods."""
    if job.intentClass is not None:
        return job.intentClass == "performance"
    affinity = job.podTemplate.affinity or {}
    required = (affinity.get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in required.get("nodeSelectorTerms") or []:
        for expr in (term or {}).get("matchExpressions") or []:
            if (
                expr.get("key") == _PROFILE_LABEL
                and expr.get("operator") == "NotIn"
                and "eco" in (expr.get("values") or [])
            ):
                return True
    return False


def map_upstream_jobs(jobs: Sequence[UpstreamJob]) -> list[tuple[int, Workload]]:
    """Jobs as workloads with the line each came from: gang members of one workloadId with
    identical requests become one gang, every other job a lone pod."""
    members: dict[str, list[UpstreamJob]] = {}
    out: list[tuple[int, Workload]] = []
    for job in jobs:
        if job.gang and job.workload_id is not None:
            members.setdefault(job.workload_id, []).append(job)
        else:
            out.append((job.line, job.pod))
    for workload_id, group in members.items():
        gang, loners = _split_gang(group)
        out.extend((job.line, job.pod) for job in loners)
        if gang:
            out.append((gang[0].line, _gang_workload(workload_id, gang)))
    return out


def _split_gang(group: list[UpstreamJob]) -> tuple[list[UpstreamJob], list[UpstreamJob]]:
    """The largest set of members with identical requests (the earliest on a tie) is the
    gang when it has two or more; the rest run as lone pods."""
    by_requests: dict[tuple[int, int, int, str | None], list[UpstreamJob]] = {}
    for job in group:
        by_requests.setdefault(job.requests, []).append(job)
    best = max(by_requests.values(), key=len)  # max keeps the first of equal lengths
    if len(best) < 2:
        return [], group
    return best, [job for job in group if job not in best]


def _gang_workload(workload_id: str, gang: list[UpstreamJob]) -> Workload:
    """A gang runs when its last member has arrived and lasts as long as its longest one."""
    first = gang[0].pod
    return Workload(
        id=workload_id,
        submit_s=max(job.pod.submit_s for job in gang),
        work_s=max(job.pod.work_s for job in gang),
        pods=len(gang),
        min_count=len(gang),
        performance=any(job.pod.performance for job in gang),
        disruption=DisruptionMode.ALL,
        cpu_millis=first.cpu_millis,
        memory_bytes=first.memory_bytes,
        gpus=first.gpus,
        gpu_resource=first.gpu_resource,
        cpu_sensitivity=first.cpu_sensitivity,
        gpu_sensitivity=first.gpu_sensitivity,
        cpu_util=first.cpu_util,
        gpu_util=first.gpu_util,
        kind=first.kind,
    )
