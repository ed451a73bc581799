"""The simulator's trace format: reading, writing, validation messages, upstream job records."""

from __future__ import annotations

import io
import json
import re
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joulie.api.workload import DisruptionMode
from joulie.sim.trace import (
    TraceError,
    Workload,
    camel,
    dump_trace,
    parse_trace,
    read_trace,
    workload_record,
    write_trace,
)
from joulie.sim.trace_upstream import map_upstream_jobs, parse_upstream_job

GIB = 1 << 30

WORKLOADS = [
    Workload("b", 10.0, 600.0),
    Workload(
        "a",
        10.0,
        7200.5,
        pods=4,
        min_count=3,
        performance=True,
        priority=1000,
        disruption=DisruptionMode.ALL,
        cpu_millis=16000,
        memory_bytes=64 * GIB,
        gpus=8,
        gpu_resource="nvidia.com/gpu",
        cpu_sensitivity=0.1,
        gpu_sensitivity=0.9,
        cpu_util=0.35,
        gpu_util=0.875,
        kind="gpu-distributed",
    ),
    Workload("c", 0.0, 1.0, gpus=1, gpu_resource="amd.com/gpu", gpu_sensitivity=0.0),
]


def _sorted(workloads: list[Workload]) -> list[Workload]:
    return sorted(workloads, key=lambda w: (w.submit_s, w.id))


def test_write_then_read_gives_the_same_workloads(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    with path.open("w") as stream:
        write_trace(WORKLOADS, stream)
    assert read_trace(path) == _sorted(WORKLOADS)


def test_dump_is_the_same_bytes_whatever_the_input_order() -> None:
    text = dump_trace(WORKLOADS)
    assert dump_trace(reversed(WORKLOADS)) == text
    assert [json.loads(line)["id"] for line in text.splitlines()] == ["c", "a", "b"]
    buffer = io.StringIO()
    write_trace(WORKLOADS, buffer)
    assert buffer.getvalue() == text


def test_records_carry_every_field_in_camel_case() -> None:
    record = workload_record(WORKLOADS[1])
    assert record["type"] == "workload"
    assert record["schemaVersion"] == 1
    assert record["minCount"] == 3
    assert record["disruption"] == "all"
    assert record["gpuResource"] == "nvidia.com/gpu"
    assert len(record) == 2 + 17


def test_example_file_skips_comments_and_blank_lines_and_fills_defaults(data_dir: Path) -> None:
    workloads = read_trace(data_dir / "traces" / "example.jsonl")
    assert [w.id for w in workloads] == ["batch-1", "gang-1", "infer-1"]
    batch, gang, infer = workloads
    assert batch == Workload("batch-1", 0.0, 900.0)
    assert gang.gang
    assert (gang.pods, gang.min_count, gang.disruption) == (4, 4, DisruptionMode.ALL)
    assert gang.memory_bytes == 256 * GIB
    assert (infer.gpus, infer.gpu_resource, infer.work_s) == (1, "amd.com/gpu", 600.5)
    assert infer.cpu_util == 1.0  # not given: the default


def _line(**fields: Any) -> str:
    record: dict[str, Any] = {
        "type": "workload",
        "schemaVersion": 1,
        "id": "x",
        "submitS": 0,
        "workS": 60,
    }
    record.update(fields)
    return json.dumps({k: v for k, v in record.items() if v is not _DROP})


_DROP = object()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"schemaVersion": 2}, "schemaVersion: 2 is not supported (supported: 1)"),
        ({"schemaVersion": _DROP}, "schemaVersion: missing (supported: 1)"),
        ({"id": ""}, "id: String should have at least 1 character"),
        ({"submitS": -1}, "submitS: must be a finite number >= 0"),
        ({"submitS": "0"}, "submitS: Input should be a valid number"),
        ({"workS": 0}, "workS: must be a finite number > 0"),
        ({"workS": _DROP}, "workS: Field required"),
        ({"pods": 0}, "pods: must be >= 1"),
        ({"minCount": 2}, "minCount: must be between 1 and pods (1), got 2"),
        ({"pods": 4, "minCount": 5}, "minCount: must be between 1 and pods (4), got 5"),
        ({"pods": 4, "minCount": 0}, "minCount: must be between 1 and pods (4), got 0"),
        ({"gpus": 2}, "gpuResource: required when gpus > 0"),
        ({"gpus": 1, "gpuResource": "cpu"}, "gpuResource: 'cpu' is not a GPU resource name"),
        ({"cpuSensitivity": 1.5}, "cpuSensitivity: must be between 0 and 1"),
        (
            {"cpuSensitivity": 0.5, "gpuSensitivity": 0.6},
            "gpuSensitivity: cpu_sensitivity + gpu_sensitivity must be <= 1",
        ),
        ({"gpuUtil": -0.1}, "gpuUtil: must be between 0 and 1"),
        ({"disruption": "some"}, "disruption: Input should be 'single' or 'all'"),
        ({"performance": "yes"}, "performance: Input should be a valid boolean"),
        ({"cpuMillis": 1.5}, "cpuMillis: Input should be a valid integer"),
        ({"memoryBytes": -1}, "memoryBytes: must be from 0 to 1152921504606846976"),
        ({"gpuCount": 1}, "gpuCount: not a field of this record type"),
    ],
)
def test_errors_name_the_file_line_and_field(fields: dict[str, Any], message: str) -> None:
    lines = ['{"type": "comment"}', "", _line(**fields)]
    with pytest.raises(TraceError) as caught:
        parse_trace(lines, "t.jsonl")
    assert f"t.jsonl:3: {message}" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "t.jsonl:1: not valid JSON"),
        ("[1, 2]", "t.jsonl:1: expected a JSON object, got list"),
        ('{"id": "x"}', "t.jsonl:1: type: missing"),
        ('{"type": "pod"}', "t.jsonl:1: type: 'pod' is not a record type"),
    ],
)
def test_lines_that_are_not_records_are_named(text: str, message: str) -> None:
    with pytest.raises(TraceError, match="^" + message.replace("[", r"\[").replace("]", r"\]")):
        parse_trace([text], "t.jsonl")


def test_a_repeated_id_names_both_lines() -> None:
    lines = [_line(id="a"), _line(id="b"), _line(id="a", submitS=5)]
    with pytest.raises(TraceError, match=r"t.jsonl:3: id: 'a' repeats the id of line 1"):
        parse_trace(lines, "t.jsonl")


def test_workloads_come_back_sorted_by_submit_time_then_id() -> None:
    lines = [_line(id="z", submitS=5), _line(id="b", submitS=1), _line(id="a", submitS=5)]
    assert [w.id for w in parse_trace(lines, "t")] == ["b", "a", "z"]


def test_a_missing_file_is_a_trace_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"nope\.jsonl: cannot read the trace"):
        read_trace(tmp_path / "nope.jsonl")


def test_workload_rejects_broken_values_when_built_in_code() -> None:
    with pytest.raises(ValueError, match="min_count: must be between 1 and pods"):
        Workload("x", 0.0, 1.0, pods=2, min_count=3)
    with pytest.raises(ValueError, match="work_s: must be a finite number > 0, got nan"):
        Workload("x", 0.0, float("nan"))
    assert Workload("x", 0.0, 1.0, disruption="all").disruption is DisruptionMode.ALL  # type: ignore[arg-type]


# --- upstream job records --------------------------------------------------------------------


def test_upstream_example_maps_as_documented(data_dir: Path) -> None:
    workloads = {w.id: w for w in read_trace(data_dir / "traces" / "upstream-example.jsonl")}
    assert sorted(workloads) == ["prep-1", "report-2", "train-7", "train-7-ps", "tune-3"]

    prep = workloads["prep-1"]  # 4800 units / (4 cores x 2 units per core-second)
    assert (prep.work_s, prep.cpu_millis, prep.memory_bytes) == (600.0, 4000, 8 * GIB)
    assert (prep.cpu_sensitivity, prep.gpu_sensitivity, prep.cpu_util) == (0.9, 0.0, 0.6)
    assert not prep.performance
    assert prep.kind == "cpu_preprocess"
    assert prep.gpus == 0

    tune = workloads["tune-3"]  # the GPU side is the longer: 7200 / (1 GPU x 2)
    assert (tune.work_s, tune.gpus, tune.gpu_resource) == (3600.0, 1, "nvidia.com/gpu")
    assert tune.performance  # from the NotIn [eco] affinity
    assert tune.cpu_sensitivity == pytest.approx(0.2 * 0.5)
    assert tune.gpu_sensitivity == pytest.approx(0.8 * 1.0)
    assert (tune.cpu_util, tune.gpu_util, tune.submit_s) == (0.3, 0.9, 30.5)

    gang = workloads["train-7"]  # three identical workers; the ps pod runs alone
    assert (gang.pods, gang.min_count, gang.disruption) == (3, 3, DisruptionMode.ALL)
    assert (gang.submit_s, gang.work_s) == (102.0, 3600.0)
    assert (gang.cpu_millis, gang.memory_bytes, gang.gpus) == (16000, 64 * GIB, 4)
    assert gang.gpu_resource == "amd.com/gpu"
    assert gang.performance
    assert (gang.cpu_util, gang.gpu_util) == (0.65, 0.95)
    assert gang.gpu_sensitivity == pytest.approx(0.6)

    ps = workloads["train-7-ps"]
    assert (ps.pods, ps.work_s, ps.cpu_util, ps.cpu_sensitivity) == (1, 900.0, 0.2, 1.0)

    report = workloads["report-2"]  # intentClass wins over the affinity
    assert not report.performance
    assert (report.cpu_millis, report.work_s, report.memory_bytes) == (500, 1000.0, 512 << 20)


def _job(**fields: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "type": "job",
        "schemaVersion": "v1",
        "jobId": "j",
        "submitTimeOffsetSec": 0,
        "podTemplate": {"requests": {"cpu": "1"}},
    }
    job.update(fields)
    return job


def test_gang_members_with_different_requests_leave_the_odd_ones_alone() -> None:
    big = {"requests": {"cpu": "8", "nvidia.com/gpu": "2"}}
    small = {"requests": {"cpu": "2", "nvidia.com/gpu": "1"}}
    jobs = [
        _job(jobId="s0", workloadId="g", gang=True, podTemplate=small),
        _job(jobId="b0", workloadId="g", gang=True, podTemplate=big),
        _job(jobId="b1", workloadId="g", gang=True, podTemplate=big, submitTimeOffsetSec=9),
        _job(jobId="lone", workloadId="h", gang=True),
    ]
    workloads = {w.id: w for w in parse_trace([json.dumps(j) for j in jobs], "u")}
    assert sorted(workloads) == ["g", "lone", "s0"]
    assert (workloads["g"].pods, workloads["g"].gpus, workloads["g"].submit_s) == (2, 2, 9.0)
    assert workloads["lone"].pods == 1


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"schemaVersion": "v2"}, "schemaVersion: 'v2' is not supported for upstream job"),
        ({"jobId": _DROP}, "jobId: Field required"),
        ({"submitTimeOffsetSec": -3}, "submitTimeOffsetSec: Input should be greater than"),
        (
            {"podTemplate": {"requests": {"cpu": "1", "gpu": "0.5"}}},
            "podTemplate.requests.gpu: GPUs come whole",
        ),
        (
            {"podTemplate": {"requests": {"cpu": "lots"}}},
            "podTemplate.requests.cpu: not a quantity",
        ),
        ({"sensitivity": {"gpu": 2}}, "sensitivity.gpu: Input should be less than or equal to 1"),
        ({"intentClass": "eco"}, "intentClass: Input should be 'performance' or 'standard'"),
        ({"work": {"cpuUnits": 0}}, "work: cpuUnits and gpuUnits leave nothing to run"),
    ],
)
def test_upstream_errors_name_the_line_and_field(fields: dict[str, Any], message: str) -> None:
    job = {k: v for k, v in _job(**fields).items() if v is not _DROP}
    with pytest.raises(TraceError) as caught:
        parse_trace(["", json.dumps(job)], "up.jsonl")
    assert f"up.jsonl:2: {message}" in str(caught.value)


def test_a_trace_may_mix_both_record_types() -> None:
    lines = [_line(id="ours"), json.dumps(_job(jobId="theirs"))]
    assert [w.id for w in parse_trace(lines, "m")] == ["ours", "theirs"]


def test_the_upstream_mapping_works_on_its_own() -> None:
    # trace_upstream builds on trace; trace imports it only when a trace is parsed.
    jobs = [
        parse_upstream_job(_job(jobId=f"j{i}", workloadId="g", gang=True), "u", i) for i in (1, 2)
    ]
    assert [j.line for j in jobs] == [1, 2]
    [(line, gang)] = map_upstream_jobs(jobs)
    assert (line, gang.id, gang.pods, gang.min_count) == (1, "g", 2, 2)


# --- properties ------------------------------------------------------------------------------

_unit = st.floats(0.0, 1.0, allow_nan=False)


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    pods = draw(st.integers(1, 16))
    gpus = draw(st.integers(0, 8))
    gpu_sensitivity = draw(_unit)
    return Workload(
        id=draw(st.text(min_size=1, max_size=12)),
        submit_s=draw(st.floats(0.0, 1e7, allow_nan=False)),
        work_s=draw(st.floats(1e-3, 1e7, allow_nan=False)),
        pods=pods,
        min_count=draw(st.integers(1, pods)),
        performance=draw(st.booleans()),
        priority=draw(st.integers(-1000, 10**9)),
        disruption=draw(st.sampled_from(DisruptionMode)),
        cpu_millis=draw(st.integers(0, 10**6)),
        memory_bytes=draw(st.integers(0, 1 << 42)),
        gpus=gpus,
        gpu_resource=draw(st.sampled_from(["nvidia.com/gpu", "amd.com/gpu"])) if gpus else None,
        cpu_sensitivity=draw(st.floats(0.0, 1.0 - gpu_sensitivity)),
        gpu_sensitivity=gpu_sensitivity,
        cpu_util=draw(_unit),
        gpu_util=draw(_unit),
        kind=draw(st.text(max_size=8)),
    )


@settings(max_examples=60, deadline=None)
@given(st.lists(workloads(), max_size=8, unique_by=lambda w: w.id))
def test_any_valid_workloads_round_trip_exactly(items: list[Workload]) -> None:
    text = dump_trace(items)
    assert parse_trace(text.splitlines(), "p") == _sorted(items)
    assert dump_trace(parse_trace(text.splitlines(), "p")) == text


def test_the_doc_lists_every_field_with_its_default(repo_root: Path) -> None:
    text = (repo_root / "docs" / "simulator-trace.md").read_text()
    table = text.split("## The trace format", 1)[1].split("## Upstream", 1)[0]
    rows = dict(re.findall(r"^\| `(\w+)` \| [^|]*(?:\\\|[^|]*)* \| ([^|]+) \|", table, re.M))
    expected = {"type": "required", "schemaVersion": "required"}
    for field in fields(Workload):
        default = field.default
        if default is MISSING:
            shown = "required"
        elif default is None:
            shown = "`null`"
        elif isinstance(default, DisruptionMode):
            shown = f"`{default.value}`"
        elif isinstance(default, bool):
            shown = f"`{str(default).lower()}`"
        elif isinstance(default, str):
            shown = f'`"{default}"`'
        else:
            shown = f"`{default}`"
        expected[camel(field.name)] = shown
    assert {key: value.strip() for key, value in rows.items()} == expected
