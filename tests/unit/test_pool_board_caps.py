"""The pool agent's per-board GPU caps (``spec.gpu.classCaps``) against the simulator's own
bookkeeping: each board capped by the class of the pod the simulator says holds it, one request
and one status write per change, none at steady state; boards it cannot attribute take the
node-level cap and say why; per-board caps removed once the spec has none."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from joulie.agent.board_intents import BoardIntent
from joulie.agent.cache import NODETWINS, TwinIntent
from joulie.agent.pod_devices import PodDevicesUnavailable, PodKey
from joulie.agent.pool import PoolAgent
from joulie.agent.pool_boards import (
    NO_POD_DEVICES,
    ReportedPodDevices,
    boards_outcome,
    simulated_boards,
)
from joulie.agent.pool_pods import PodClass, PoolPods, pod_class_projection
from joulie.api import keys
from joulie.api.enums import ControlResult, GpuCapScope, Profile
from joulie.api.nodetwin import GpuClassCaps, GpuPowerCap, GpuSpec, NodeTwinSpec
from joulie.api.telemetry import (
    AppliedControls,
    BoardOutcome,
    ControlRequest,
    ControlResponse,
    TelemetryReport,
)
from joulie.hardware.catalog import Catalog
from joulie.kube.ownership import Observed
from joulie.kube.projections import SlimPod, node_projection
from joulie.sim.kwok_hardware import Simulation, board_ids
from tests.support.builders import kwok_node, node_group
from tests.unit.test_sim_gpu_boards import CATALOG, GPU, gpu_node, pod

NOW = datetime(2026, 12, 2, 21, 0, tzinfo=UTC)
NODE = "g"
IDS = board_ids(NODE, 8)
STANDARD_W = 400.0
GROUP = node_group(
    node_name=NODE, cpu="AMD EPYC 9654", cpu_cores=64, memory_gib=256, product=GPU, gpus=8
)
AGENT_NODES = node_projection(annotation_keys=(keys.KWOK_NODE_ANNOTATION,))


def class_caps_spec() -> NodeTwinSpec:
    return NodeTwinSpec(
        node_name=NODE,
        profile=Profile.PERFORMANCE,
        gpu=GpuSpec(
            class_caps=GpuClassCaps(
                performance=GpuPowerCap(scope=GpuCapScope.PER_GPU, cap_pct_of_max=100),
                standard=GpuPowerCap(scope=GpuCapScope.PER_GPU, cap_watts_per_gpu=STANDARD_W),
                idle=GpuPowerCap(scope=GpuCapScope.PER_GPU, cap_watts_per_gpu=STANDARD_W),
            )
        ),
    )


class Store(dict[str, Any]):
    def values(self) -> list[Any]:  # type: ignore[override]
        return list(super().values())


class Cache:
    def __init__(self, spec: NodeTwinSpec | None) -> None:
        self.nodes = Store({NODE: AGENT_NODES(kwok_node(NODE, GROUP))})
        self.hardware = Store()
        self.twins = Store()
        if spec is not None:
            self.set_spec(spec)

    def set_spec(self, spec: NodeTwinSpec | None) -> None:
        old = self.twins.get(NODE)
        control = old.control if old is not None else Observed({}, None, None)
        self.twins[NODE] = TwinIntent(NODE, spec, None, spec is not None, control)


class Writer:
    """Records status writes and shows them back to the agent, as the API server and the
    cache would."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self.status_writes: list[dict[str, Any]] = []

    async def apply(
        self, path: str, desired: Mapping[str, Any], *, observed: Observed | None
    ) -> Mapping[str, Any] | None:
        if path == f"{NODETWINS}/{NODE}/status":
            if observed is not None and observed.fields.get("status") == desired["status"]:
                return None
            self.status_writes.append(dict(desired["status"]["controlStatus"]))
            twin = self.cache.twins[NODE]
            self.cache.twins[NODE] = TwinIntent(
                twin.name,
                twin.spec,
                None,
                twin.managed,
                Observed({"status": dict(desired["status"])}, None, None),
            )
        return desired


class Backend:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.t = 0.0
        self.requests: list[ControlRequest] = []

    async def telemetry(self, node: str) -> TelemetryReport:
        # Over the wire and back, as the HTTP backend reads it.
        report = self.sim.report(node, self.t, NOW).to_wire()
        return TelemetryReport.model_validate(report)

    async def control(self, node: str, request: ControlRequest) -> ControlResponse:
        self.requests.append(request)
        return ControlResponse.model_validate(self.sim.control(node, request, self.t).to_wire())


class Rig:
    def __init__(self, spec: NodeTwinSpec | None = None) -> None:
        self.pods: list[SlimPod] = []
        self.classes: dict[PodKey, str] = {}
        self.sim = Simulation(CATALOG, lambda _: list(self.pods), settle_s=0.0)
        self.sim.upsert_node(gpu_node(NODE), 0.0)
        self.backend = Backend(self.sim)
        self.cache = Cache(spec if spec is not None else class_caps_spec())
        self.writer = Writer(self.cache)
        self.agent = PoolAgent(
            self.cache,  # type: ignore[arg-type]
            self.backend,  # type: ignore[arg-type]
            self.writer,  # type: ignore[arg-type]
            Catalog.load(),
            shard=0,
            shards=1,
            governor_writes=False,
            heartbeat_s=60,
            pod_class=self.classes.get,
            clock=lambda: NOW,
        )

    def run(self, *pods: tuple[SlimPod, str]) -> None:
        self.pods = [p for p, _ in pods]
        self.classes.clear()
        self.classes.update({(p.namespace, p.name): c for p, c in pods})
        self.backend.t += 1.0
        self.sim.pods_changed(NODE, self.backend.t)

    def sync(self) -> None:
        asyncio.run(self.agent.sync(NODE))

    def caps(self) -> tuple[float | None, ...]:
        return self.sim.nodes[NODE].controls.gpu_board_caps_w

    def gpu_status(self) -> dict[str, Any]:
        return dict(self.writer.status_writes[-1]["gpu"])


def test_each_board_takes_its_pods_class_cap_and_steady_passes_cost_nothing() -> None:
    rig = Rig()
    rig.run((pod("a", 4), "performance"), (pod("b", 4), "standard"))
    rig.sync()
    spec = rig.sim.nodes[NODE].spec
    assert spec.gpu is not None
    assert rig.caps() == (spec.gpu.max_w,) * 4 + (STANDARD_W,) * 4
    status = rig.gpu_status()
    assert status["result"] == "applied"
    max_w = f"{spec.gpu.max_w:.0f}"
    assert status["message"].startswith(
        f"gpu/{IDS[0]}/power-limit: applied (GPU cap {max_w} W; performance work)"
    )
    assert len(rig.backend.requests) == 1
    assert len(rig.writer.status_writes) == 1
    for _ in range(3):
        rig.sync()
    assert len(rig.backend.requests) == 1
    assert len(rig.writer.status_writes) == 1
    assert rig.sim.control_changes == 1

    # The performance pod goes: its boards are idle, at the idle cap; one request, one write.
    rig.run((pod("b", 4), "standard"))
    rig.sync()
    rig.sync()
    assert rig.caps() == (STANDARD_W,) * 8
    assert (len(rig.backend.requests), len(rig.writer.status_writes)) == (2, 2)
    assert rig.gpu_status()["message"].startswith(
        f"gpu/{IDS[0]}/power-limit: applied (GPU cap 400 W; idle)"
    )


def test_a_pod_the_cache_does_not_hold_yet_puts_its_boards_at_the_node_level_cap() -> None:
    spec = class_caps_spec()
    assert spec.gpu is not None
    spec = spec.model_copy(
        update={
            "gpu": spec.gpu.model_copy(
                update={"power_cap": GpuPowerCap(scope=GpuCapScope.PER_GPU, cap_watts_per_gpu=600)}
            )
        }
    )
    rig = Rig(spec)
    rig.run((pod("a", 4), "standard"))
    rig.classes.clear()  # the pool's pod cache has not seen it
    rig.sync()
    assert rig.caps() == (600.0,) * 4 + (STANDARD_W,) * 4
    assert (
        "node-level cap: its pod is not in the agent's pod cache yet" in rig.gpu_status()["message"]
    )
    rig.classes[("ns", "a")] = "standard"
    rig.sync()
    assert rig.caps() == (STANDARD_W,) * 8
    assert len(rig.writer.status_writes) == 2


def test_per_board_caps_are_removed_once_and_then_left_alone() -> None:
    rig = Rig()
    rig.run((pod("a", 4), "standard"))
    rig.sync()
    assert rig.caps()
    rig.cache.set_spec(NodeTwinSpec(node_name=NODE, profile=Profile.PERFORMANCE))
    rig.sync()
    assert rig.caps() == ()
    for _ in range(3):
        rig.sync()
    assert len(rig.backend.requests) == 2
    assert rig.gpu_status()["result"] == "applied"


def test_caps_lost_by_a_restarted_simulator_are_sent_again() -> None:
    rig = Rig()
    rig.run((pod("a", 4), "standard"))
    rig.sync()
    rig.sim.nodes[NODE].controls = rig.sim.nodes[NODE].controls.__class__()
    rig.sync()
    assert rig.caps() == (STANDARD_W,) * 8
    assert len(rig.backend.requests) == 2
    assert len(rig.writer.status_writes) == 1  # the same outcome: nothing to write


def test_a_report_without_board_ids_or_pod_devices() -> None:
    report = asyncio.run(Rig().backend.telemetry(NODE))
    assert simulated_boards(report.hardware) is not None
    bare = report.model_copy(
        update={"hardware": report.hardware.model_copy(update={"gpu_ids": None})}
    )
    assert simulated_boards(bare.hardware) is None
    short = report.hardware.model_copy(update={"gpu_ids": list(IDS[:7])})
    assert simulated_boards(short) is None
    none = ReportedPodDevices(report.model_copy(update={"pod_devices": None}))
    with pytest.raises(PodDevicesUnavailable, match=NO_POD_DEVICES):
        asyncio.run(none.allocations())


def test_a_board_the_backend_did_not_answer_for_is_an_error() -> None:
    intents = [
        BoardIntent(IDS[0], "standard", None, "standard work"),
        BoardIntent(IDS[1], None, None, "idle"),
    ]
    response = ControlResponse(
        node=NODE,
        controls=AppliedControls(),
        gpu_boards=[BoardOutcome(board=IDS[0], result=ControlResult.APPLIED, message="uncapped")],
    )
    outcome = boards_outcome(response, intents)
    assert outcome.result is ControlResult.ERROR
    assert "did not answer" in outcome.message


def test_the_pool_pod_cache_keeps_a_pods_node_and_class_and_wakes_only_on_their_change() -> None:
    woken: list[str] = []
    cache = PoolPods(None, woken.append)  # type: ignore[arg-type]  # never run: no client needed
    gpu_container = {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    raw = {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "annotations": {keys.WORKLOAD_CLASS_ANNOTATION: "performance", "other": "x"},
        },
        "spec": {"nodeName": NODE, "containers": [gpu_container]},
    }
    projected = pod_class_projection(raw)
    assert projected == PodClass(NODE, "performance")
    typo = pod_class_projection({**raw, "metadata": {"name": "q", "annotations": {}}})
    assert typo.workload_class == "standard"
    cache._updated(projected, PodClass(NODE, "performance"))  # a status change: nothing
    assert woken == []
    cache._updated(projected, PodClass(NODE, "standard"))
    cache._touched(PodClass("", "standard"))  # not bound yet: no node to wake
    assert woken == [NODE]


def test_the_pool_holds_only_gpu_pods_on_the_nodes_it_serves() -> None:
    """A replica holds the running pods that ask for GPUs on its shard's nodes and nothing else
    (each replica held all 100,000 running pods before: 42 MiB of its peak RSS)."""
    woken: list[str] = []
    mine = {"node-a"}
    cache = PoolPods(None, woken.append, serves=mine.__contains__)  # type: ignore[arg-type]

    def running(name: str, node: str, *, gpus: bool) -> dict[str, object]:
        limits = {"nvidia.com/gpu": "2"} if gpus else {"cpu": "1"}
        return {
            "type": "ADDED",
            "object": {
                "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"},
                "spec": {"nodeName": node, "containers": [{"resources": {"limits": limits}}]},
            },
        }

    for event in (
        running("train", "node-a", gpus=True),
        running("web", "node-a", gpus=False),
        running("other", "node-b", gpus=True),
    ):
        cache.pods._apply(event)
    assert cache.pods.keys() == ["ns/train"]
    assert cache.pod_class(("ns", "other")) is None
    assert woken == ["node-a"]
    gone = running("other", "node-b", gpus=True)
    cache.pods._apply({**gone, "type": "DELETED"})  # never held: nothing to forget or wake
    cache.pods._apply({**running("train", "node-a", gpus=True), "type": "DELETED"})
    assert cache.pods.keys() == []
    assert woken == ["node-a", "node-a"]
