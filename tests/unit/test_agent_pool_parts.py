"""The pure parts of pool mode: which replica serves a node, what NodeHardware says about a
simulated node, and how control outcomes are reported without churn."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import cast

from hypothesis import given
from hypothesis import strategies as st

from joulie.agent.cache import AgentCache, pool_node_projection, twin_projection
from joulie.agent.pool import as_restored, facts_key, restore_request
from joulie.agent.reports import control_status
from joulie.agent.sharding import ordinal, shard_of
from joulie.api import keys
from joulie.api.enums import ControlResult, DiscoveryQuality
from joulie.api.nodehardware import NodeHardwareStatus
from joulie.api.telemetry import AppliedControls, ControlResponse, HardwareSummary, Outcome
from joulie.hardware.catalog import Catalog
from joulie.hardware.simulated import simulated_hardware
from joulie.kube.client import KubeClient
from tests.support.builders import node, nodehardware, nodetwin

CATALOG = Catalog.load()
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
GPU_NODE = HardwareSummary(
    cpu_model="AMD EPYC 9654",
    sockets=2,
    gpu_model="NVIDIA H100 80GB HBM3",
    gpu_count=4,
    cpu_max_w=720,
    gpu_max_w_per_gpu=700,
)
CPU_NODE = HardwareSummary(
    cpu_model="Mystery CPU", sockets=1, gpu_count=0, cpu_max_w=200, gpu_max_w_per_gpu=0
)


@given(st.text(min_size=1, max_size=40), st.integers(min_value=1, max_value=16))
def test_every_node_has_exactly_one_shard(node: str, shards: int) -> None:
    assert 0 <= shard_of(node, shards) < shards
    assert shard_of(node, shards) == shard_of(node, shards)


def test_shards_share_the_nodes_evenly_enough() -> None:
    counts = Counter(shard_of(f"kwok-node-{i}", 2) for i in range(5000))
    assert min(counts.values()) > 2300  # 2,500 each, give or take the hash


def test_the_ordinal_comes_from_the_pod_name() -> None:
    assert ordinal("joulie-agent-pool-1") == 1
    assert ordinal("joulie-agent-pool-12") == 12
    assert ordinal("joulie-agent-pool") is None


def test_simulated_hardware_is_valid_nodehardware() -> None:
    status = NodeHardwareStatus.model_validate(simulated_hardware(GPU_NODE, CATALOG))
    assert status.cpu is not None
    assert status.cpu.cap_range is not None
    assert status.cpu.cap_range.max_watts_per_socket == 360  # per socket, from the node-wide 720
    assert status.gpu is not None
    assert (status.gpu.count, status.gpu.present) == (4, True)
    assert status.quality is not None
    assert status.quality.overall is DiscoveryQuality.EXACT
    unknown = NodeHardwareStatus.model_validate(simulated_hardware(CPU_NODE, CATALOG))
    assert unknown.quality is not None
    assert unknown.quality.overall is DiscoveryQuality.HEURISTIC
    assert unknown.gpu is not None
    assert unknown.gpu.present is False


def response(**outcomes: Outcome) -> ControlResponse:
    return ControlResponse(node="n", controls=AppliedControls()).model_copy(update=outcomes)


def test_an_unchanged_outcome_keeps_its_time() -> None:
    first = control_status(response(cpu_cap=Outcome(result=ControlResult.APPLIED)), {}, "http", NOW)
    again = control_status(
        response(cpu_cap=Outcome(result=ControlResult.APPLIED)),
        first,
        "http",
        NOW + timedelta(minutes=5),
    )
    assert again == first  # nothing to write
    changed = control_status(
        response(cpu_cap=Outcome(result=ControlResult.DRIFT, message="read back 90 W")),
        first,
        "http",
        NOW + timedelta(minutes=5),
    )
    assert changed["cpu"]["result"] == "drift"
    assert changed["cpu"]["updatedAt"] == "2026-11-30T12:05:00Z"


def test_untouched_components_stay_as_reported() -> None:
    stored = {"gpu": {"backend": "http", "result": "applied", "updatedAt": "2026-11-30T11:00:00Z"}}
    status = control_status(
        response(cpu_cap=Outcome(result=ControlResult.APPLIED)), stored, "http", NOW
    )
    assert status["gpu"] == stored["gpu"]
    assert status["cpu"]["result"] == "applied"


def test_a_node_leaving_the_plan_is_cleared_and_reported_restored() -> None:
    request = restore_request(GPU_NODE, governor_writes=True)
    assert request.cpu is not None
    assert request.cpu.clear_cap
    assert request.cpu.clear_preset
    assert request.gpu is not None
    assert request.gpu.clear_cap
    assert restore_request(CPU_NODE, governor_writes=False).gpu is None
    answered = response(
        cpu_cap=Outcome(result=ControlResult.APPLIED, message="cap removed"),
        gpu_cap=Outcome(result=ControlResult.ERROR, message="boom"),
    )
    restored = as_restored(answered)
    assert restored.cpu_cap is not None
    assert restored.cpu_cap.result is ControlResult.RESTORED
    assert restored.gpu_cap is not None
    assert restored.gpu_cap.result is ControlResult.ERROR  # a failure stays a failure


def test_an_invalid_or_unmanaged_twin_is_not_put_in_force() -> None:
    project = twin_projection("joulie-agent")
    bad = project({"metadata": {"name": "n1"}, "spec": {"nodeName": "n1", "profile": "turbo"}})
    assert bad.spec is None
    assert bad.problem is not None
    assert "profile" in bad.problem
    retired = project(
        {
            "metadata": {"name": "n1"},
            "spec": {"nodeName": "n1", "profile": "eco"},
            "status": {"powerMeasurement": {"source": "unmanaged"}},
        }
    )
    assert retired.spec is not None
    assert not retired.managed
    good = project({"metadata": {"name": "n1"}, "spec": {"nodeName": "n1", "profile": "eco"}})
    assert good.managed
    assert not good.same_intent(retired)


def test_a_replica_holds_only_the_objects_of_its_shard() -> None:
    def mine(name: str) -> bool:
        return shard_of(name, 2) == 0

    cache = AgentCache(
        cast(KubeClient, object()), "joulie-agent", "", lambda _node: None, serves=mine
    )
    names = [f"kwok-node-{i}" for i in range(40)]
    for i, name in enumerate(names):
        kwok = {keys.KWOK_NODE_ANNOTATION: keys.KWOK_NODE_VALUE}
        cache.nodes._apply({"type": "ADDED", "object": node(name, rv=i + 1, annotations=kwok)})
        cache.twins._apply({"type": "ADDED", "object": nodetwin(name)})
        cache.hardware._apply({"type": "ADDED", "object": nodehardware(name, rv=i + 1)})
    served = sorted(n for n in names if mine(n))
    assert 0 < len(served) < len(names)
    for informer in (cache.nodes, cache.twins, cache.hardware):
        assert sorted(informer.keys()) == served


def test_a_pool_node_keeps_its_name_and_whether_kwok_fakes_it() -> None:
    kwok = {keys.KWOK_NODE_ANNOTATION: keys.KWOK_NODE_VALUE, "other": "x"}
    a = pool_node_projection(node("a", rv=1, labels={"big": "label"}, annotations=kwok))
    b = pool_node_projection(node("b", rv=1, annotations=kwok))
    real = pool_node_projection(node("c", rv=1))
    assert (a.name, keys.kwok_node(a.annotations), keys.kwok_node(real.annotations)) == (
        "a",
        True,
        False,
    )
    assert dict(a.annotations) == {keys.KWOK_NODE_ANNOTATION: keys.KWOK_NODE_VALUE}
    assert a.annotations is b.annotations  # one mapping for every KWOK node


def test_facts_are_shared_by_what_they_are_built_from() -> None:
    # The pool builds a model's facts once for all its nodes: they must not depend on anything
    # outside the key (the boards' IDs differ on every node).
    named = GPU_NODE.model_copy(update={"gpu_ids": ["GPU-a", "GPU-b", "GPU-c", "GPU-d"]})
    assert facts_key(named) == facts_key(GPU_NODE)
    assert simulated_hardware(named, CATALOG) == simulated_hardware(GPU_NODE, CATALOG)
    assert facts_key(GPU_NODE.model_copy(update={"gpu_count": 8})) != facts_key(GPU_NODE)
