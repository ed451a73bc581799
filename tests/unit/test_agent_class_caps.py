"""Per-board GPU caps on a DaemonSet agent's node: a fake NVML with four H100 boards (200-700 W,
700 W by default), a fake kubelet answering PodResources over its real gRPC protocol, and the
pods' classes as the agent's pod cache gives them.

Under ``spec.gpu.classCaps`` a standard pod's board is capped at the standard intent (the
board's energy-optimal cap) while a performance pod's board runs uncapped; a board whose pod goes
is put back; a pod of another class moves its board's cap, once; a board whose work cannot be
told takes the node-level cap and the outcome says why; and every board is restored when the
agent stops in the middle of a change."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joulie.agent.board_intents import board_intents
from joulie.agent.gpu.device import GpuBackendKind, GpuDevice
from joulie.agent.host_node import GPU_CAP, HostNode, Outcomes
from joulie.agent.pod_devices import GpuWork, PodKey, gpu_work, read_gpu_work
from joulie.agent.pod_resources import PodResourcesClient
from joulie.agent.reports import host_control_status
from joulie.api.enums import ControlResult
from joulie.api.nodetwin import NodeTwinSpec
from joulie.core.caps import effective_cap
from tests.support.builders import nodetwin
from tests.support.fake_kubelet import FakeKubelet, NodePods, fake_kubelet
from tests.support.fake_nvml import FakeNvml, normal_node
from tests.support.host_nodes import host_node, host_tree

R = ControlResult
KNEE_W = 350
"""The standard (and here: only standard) intent, standing for a board's energy-optimal cap."""
NODE_W = 450
DEFAULT_MW = 700_000


def spec(*, node_cap_w: float | None = None, idle_w: float | None = None) -> NodeTwinSpec:
    """A performance node's spec as the class_caps policy writes it: performance boards at 100 %
    of their maximum, standard ones at the knee; idle and the node-level cap where given."""
    caps: dict[str, object] = {
        "performance": {"scope": "perGpu", "capPctOfMax": 100},
        "standard": {"scope": "perGpu", "capWattsPerGpu": KNEE_W},
    }
    if idle_w is not None:
        caps["idle"] = {"scope": "perGpu", "capWattsPerGpu": idle_w}
    gpu: dict[str, object] = {"classCaps": caps}
    if node_cap_w is not None:
        gpu["powerCap"] = {"scope": "perGpu", "capWattsPerGpu": node_cap_w}
    return NodeTwinSpec.model_validate(nodetwin("n1", "performance", spec={"gpu": gpu})["spec"])


class Node:
    """The agent's side of one node: its hardware, the kubelet's socket, its pod cache."""

    def __init__(self, tmp_path: Path, nvml: FakeNvml, kubelet: FakeKubelet) -> None:
        self.nvml = nvml
        self.kubelet = kubelet
        self.host: HostNode = host_node(host_tree(tmp_path), tmp_path / "state", nvml=nvml)
        self.pods = NodePods(kubelet)
        self.client = PodResourcesClient(str(kubelet.socket), timeout_s=0.5)
        self.status: dict[str, Any] = {}
        self.status_writes = 0

    def uuid(self, index: int) -> str:
        return self.nvml.gpus[index].uuid

    def run(self, name: str, workload_class: str, *device_ids: str) -> None:
        """A pod of ``workload_class`` holding ``device_ids``, as the cache and kubelet see it."""
        self.pods.run(name, workload_class, *device_ids)

    def stop(self, name: str) -> None:
        self.pods.stop(name)

    async def work(self) -> GpuWork:
        return await read_gpu_work(self.client, self.pods.classes.get)

    async def pass_(self, twin: NodeTwinSpec) -> Outcomes:
        """One pass as the daemon runs it, and the controlStatus it would then write."""
        work = await self.work()
        outcomes = await asyncio.to_thread(self.host.enforce, twin, gpu_work=work)
        status = host_control_status(outcomes, self.status, "host", datetime.now(UTC))
        if status != self.status:
            self.status_writes += 1
            self.status = status
        return outcomes

    def limits(self) -> list[int | None]:
        return [g.limit_mw for g in self.nvml.gpus]

    def writes(self) -> int:
        return len(self.nvml.set_calls())


@pytest.fixture
def kubelet() -> Iterator[FakeKubelet]:
    with fake_kubelet() as fake:
        yield fake


@pytest.fixture
def node(tmp_path: Path, kubelet: FakeKubelet) -> Node:
    return Node(tmp_path, normal_node(4), kubelet)


@pytest.mark.asyncio
async def test_standard_work_runs_at_the_knee_performance_work_uncapped_and_a_freed_board_is_back(
    node: Node,
) -> None:
    node.run("train", "performance", node.uuid(0))
    node.run("batch", "standard", node.uuid(1))
    first = await node.pass_(spec())
    assert first[GPU_CAP].result is R.APPLIED, first[GPU_CAP].message
    assert node.limits() == [DEFAULT_MW, KNEE_W * 1000, DEFAULT_MW, DEFAULT_MW]
    assert "standard work" in first[GPU_CAP].message
    # Steady: nothing written to the boards, nothing to controlStatus.
    writes, status_writes = node.writes(), node.status_writes
    again = await node.pass_(spec())
    assert (again[GPU_CAP].result, again[GPU_CAP].message) == (R.APPLIED, first[GPU_CAP].message)
    assert (node.writes(), node.status_writes) == (writes, status_writes)

    node.stop("batch")
    freed = await node.pass_(spec())
    assert freed[GPU_CAP].result is R.RESTORED
    assert node.limits() == [DEFAULT_MW] * 4
    assert node.host.baseline.entries() == {}
    writes, status_writes = node.writes(), node.status_writes
    await node.pass_(spec())
    assert (node.writes(), node.status_writes) == (writes, status_writes)


@pytest.mark.asyncio
async def test_an_idle_board_takes_the_idle_intent(node: Node) -> None:
    node.run("batch", "standard", node.uuid(1))
    await node.pass_(spec(idle_w=300))
    assert node.limits() == [300_000, KNEE_W * 1000, 300_000, 300_000]


@pytest.mark.asyncio
async def test_a_pod_recreated_with_another_class_moves_its_boards_cap_once(node: Node) -> None:
    node.run("job", "standard", node.uuid(2))
    await node.pass_(spec())
    assert node.limits()[2] == KNEE_W * 1000
    writes = node.writes()

    node.run("job", "performance", node.uuid(2))  # same name, another class
    moved = await node.pass_(spec())
    assert moved[GPU_CAP].result is R.APPLIED
    assert node.limits()[2] == DEFAULT_MW
    assert node.writes() == writes + 1
    await node.pass_(spec())
    assert node.writes() == writes + 1  # applied once, not at every pass

    node.run("job", "standard", node.uuid(3))  # re-created on another board
    await node.pass_(spec())
    assert node.limits() == [DEFAULT_MW, DEFAULT_MW, DEFAULT_MW, KNEE_W * 1000]


@pytest.mark.asyncio
async def test_boards_shared_by_several_pods_take_the_node_level_cap_and_say_why(
    node: Node,
) -> None:
    uuid = node.uuid(0)
    node.run("a", "standard", f"{uuid}::0")
    node.run("b", "standard", f"{uuid}::1")
    node.run("c", "performance", f"{node.uuid(1)}::0")
    node.run("d", "standard", f"{node.uuid(1)}::1")
    outcome = await node.pass_(spec(node_cap_w=NODE_W))
    # Board 0: two standard pods, the node-level cap. Board 1: shared too, but performance work
    # runs there, so never below the performance intent. Idle boards: no idle intent in this
    # spec, so the node-level cap as well.
    assert node.limits() == [NODE_W * 1000, DEFAULT_MW, NODE_W * 1000, NODE_W * 1000]
    assert "node-level cap: shared by several pods" in outcome[GPU_CAP].message


@pytest.mark.asyncio
async def test_mig_slices_leave_every_board_not_named_at_the_node_level_cap(node: Node) -> None:
    node.run("slice", "standard", "MIG-0d3c2b1a-0000-4000-8000-000000000000")
    outcome = await node.pass_(spec(node_cap_w=NODE_W))
    assert node.limits() == [NODE_W * 1000] * 4
    assert "node-level cap: MIG devices do not name their board" in outcome[GPU_CAP].message


@pytest.mark.asyncio
async def test_without_the_kubelets_answer_every_board_takes_the_node_level_cap(
    tmp_path: Path,
) -> None:
    nvml = normal_node(4)
    with fake_kubelet() as kubelet:
        node = Node(tmp_path, nvml, kubelet)
        node.run("batch", "standard", node.uuid(1))
        await node.pass_(spec(node_cap_w=NODE_W))
        assert node.limits()[1] == KNEE_W * 1000
    # The kubelet (and its socket) is gone: the board's work can no longer be told.
    outcome = await node.pass_(spec(node_cap_w=NODE_W))
    assert node.limits() == [NODE_W * 1000] * 4
    assert f"node-level cap: no kubelet PodResources socket at {kubelet.socket}" in (
        outcome[GPU_CAP].message
    )


@pytest.mark.asyncio
async def test_a_hanging_kubelet_costs_a_bounded_pass_and_the_node_level_cap(node: Node) -> None:
    node.run("batch", "standard", node.uuid(1))
    node.kubelet.hang = True
    started = time.monotonic()
    outcome = await node.pass_(spec(node_cap_w=NODE_W))
    assert time.monotonic() - started < 3
    assert node.limits() == [NODE_W * 1000] * 4
    assert "did not answer within 0.5 s" in outcome[GPU_CAP].message
    # Answering again: the standard board back at its class intent (idle boards follow the
    # node-level cap: the spec states no idle intent).
    node.kubelet.hang = False
    await node.pass_(spec(node_cap_w=NODE_W))
    assert node.limits() == [NODE_W * 1000, KNEE_W * 1000, NODE_W * 1000, NODE_W * 1000]


@pytest.mark.asyncio
async def test_stopping_in_the_middle_of_a_change_restores_every_board(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    for index in (1, 2, 3):
        node.run(f"batch-{index}", "standard", node.uuid(index))
    work = await node.work()
    writing = threading.Event()
    release = threading.Event()
    set_limit = node.nvml.set_power_limit_mw

    def slow_on_board_2(index: int, milliwatts: int) -> None:
        if index == 2 and not release.is_set():
            writing.set()
            release.wait(10)
        set_limit(index, milliwatts)

    monkeypatch.setattr(node.nvml, "set_power_limit_mw", slow_on_board_2)
    passing = threading.Thread(target=node.host.enforce, args=(spec(),), kwargs={"gpu_work": work})
    passing.start()
    assert writing.wait(10)  # board 1 capped, board 2 being written
    # SIGTERM now: the agent's shutdown restores everything, after the write in progress.
    stopping = threading.Thread(target=node.host.restore_all)
    stopping.start()
    stopping.join(0.2)
    assert stopping.is_alive()  # waits for the pass: never two writers on one board
    release.set()
    passing.join(10)
    stopping.join(10)
    assert node.limits() == [DEFAULT_MW] * 4
    assert len(node.host.baseline) == 0


# --- property: performance work is never capped below its intent ------------------------------

BOARDS = tuple(f"GPU-00000000-0000-4000-8000-00000000000{i}" for i in range(4))
DEVICES = tuple(
    GpuDevice(
        index=i,
        vendor="nvidia",
        backend=GpuBackendKind.NVML,
        raw_model="NVIDIA H100 80GB HBM3",
        uuid=uuid,
        min_watts=200,
        max_watts=700,
    )
    for i, uuid in enumerate(BOARDS)
)
_CLASSES = st.sampled_from(["performance", "standard", "unknown"])


@st.composite
def answers(draw: st.DrawFn) -> dict[PodKey, tuple[str, ...]]:
    """Up to 6 pods, each on one board, whole or as a replica (so boards may be shared)."""
    pods: dict[PodKey, tuple[str, ...]] = {}
    for i in range(draw(st.integers(0, 6))):
        board = draw(st.sampled_from(BOARDS))
        replica = draw(st.booleans())
        pods["work", f"p{i}"] = (f"{board}::{i}" if replica else board,)
    return pods


@settings(max_examples=200, deadline=None)
@given(
    answer=answers(),
    classes=st.lists(_CLASSES, min_size=6, max_size=6),
    performance_pct=st.floats(50, 100),
    standard_w=st.floats(1, 1000),
    node_w=st.none() | st.floats(1, 1000),
    mig=st.booleans(),
)
def test_a_performance_pods_board_is_never_capped_below_the_performance_intent(
    answer: dict[PodKey, tuple[str, ...]],
    classes: list[str],
    performance_pct: float,
    standard_w: float,
    node_w: float | None,
    mig: bool,
) -> None:
    # "unknown": a pod the agent's pod cache does not hold.
    cache = {pod: classes[i] for i, pod in enumerate(answer) if classes[i] != "unknown"}
    if mig:
        answer = {**answer, ("work", "slice"): ("MIG-0d3c2b1a-0000-4000-8000-000000000000",)}
    work = gpu_work(answer, cache.get)
    gpu: dict[str, object] = {
        "classCaps": {
            "performance": {"capPctOfMax": performance_pct},
            "standard": {"capWattsPerGpu": standard_w},
        }
    }
    if node_w is not None:
        gpu["powerCap"] = {"capWattsPerGpu": node_w}
    twin = NodeTwinSpec.model_validate(nodetwin("n1", "performance", spec={"gpu": gpu})["spec"])
    floor = effective_cap(None, performance_pct, 700, 200)
    assert floor is not None
    assert floor.watts is not None
    for intent in board_intents(twin, DEVICES, work):
        if intent.board in work.performance:
            assert intent.cap is None or (intent.cap.watts or 0) >= floor.watts - 1e-9, intent
