"""The simulator as the kubelet of its KWOK nodes: stable board IDs, boards held by one pod each
and freed when it goes, the telemetry naming them, and per-board caps by board ID in the control
contract (bounded and checked like any request)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from joulie.agent.pod_devices import gpu_work
from joulie.api import keys
from joulie.api.enums import ControlResult
from joulie.api.telemetry import (
    MAX_BOARDS,
    BoardCap,
    ControlRequest,
    GpuControl,
    TelemetryReport,
)
from joulie.core.enforcement import apply_control
from joulie.core.power_model import Controls
from joulie.hardware.catalog import Catalog
from joulie.kube.projections import SlimNode, SlimPod, node_projection
from joulie.sim.kwok_hardware import PodKey, Simulation, assign_boards, board_ids, node_spec
from tests.support.builders import kwok_node, node_group

CATALOG = Catalog.load()
PROJECT = node_projection(
    annotation_keys=[keys.HW_CPU_MODEL_ANNOTATION, keys.HW_GPU_MODEL_ANNOTATION]
)
NOW = datetime(2026, 12, 2, tzinfo=UTC)
GPU = "NVIDIA H100 80GB HBM3"


def gpu_node(name: str = "g", gpus: int = 8) -> SlimNode:
    group = node_group(
        node_name=name, cpu="AMD EPYC 9654", cpu_cores=64, memory_gib=256, product=GPU, gpus=gpus
    )
    return PROJECT(kwok_node(name, group))


def pod(name: str, gpus: int, node: str = "g", util: str = "1") -> SlimPod:
    return SlimPod(
        namespace="ns",
        name=name,
        node_name=node,
        phase="Running",
        annotations={keys.SIM_GPU_UTILIZATION_ANNOTATION: util},
        labels={},
        cpu_millis=1000,
        gpus=gpus,
        deleting=False,
        owner_kind="",
    )


class Cluster:
    """A Simulation of one 8-GPU node whose running pods the test sets."""

    def __init__(self) -> None:
        self.pods: list[SlimPod] = []
        self.sim = Simulation(CATALOG, lambda _: list(self.pods), settle_s=0.0)
        self.sim.upsert_node(gpu_node(), 0.0)
        self.t = 0.0

    def run(self, *pods: SlimPod) -> TelemetryReport:
        self.pods = list(pods)
        self.t += 1.0
        self.sim.pods_changed("g", self.t)
        return self.report()

    def report(self) -> TelemetryReport:
        return self.sim.report("g", self.t, NOW)

    def holding(self) -> dict[PodKey, list[str]]:
        return {(p.namespace, p.name): list(p.devices) for p in self.report().pod_devices or ()}


# --- board IDs and who holds which board -------------------------------------------------------


def test_board_ids_are_stable_distinct_and_read_as_whole_boards() -> None:
    ids = board_ids("node-a", 8)
    assert ids == board_ids("node-a", 8)  # a hash, not a draw: the same after a restart
    assert len(set(ids + board_ids("node-b", 8))) == 16
    assert board_ids("node-a", 4) == ids[:4]
    # The agent takes each for one whole board, as it takes an NVIDIA UUID.
    work = gpu_work({("ns", "p"): ids}, lambda _: "standard")
    assert set(work.classes) == set(ids)
    assert work.unknown is None
    BoardCap(board=ids[0])  # and the contract's pattern accepts them


def test_the_telemetry_names_the_boards_and_who_holds_them() -> None:
    cluster = Cluster()
    idle = cluster.report()
    assert idle.hardware.gpu_ids == list(board_ids("g", 8))
    assert idle.pod_devices == []
    ids = board_ids("g", 8)
    cluster.run(pod("a", 4), pod("b", 4))
    assert cluster.holding() == {("ns", "a"): list(ids[:4]), ("ns", "b"): list(ids[4:])}
    # The wire form reads back (what the pool agent validates).
    wire = cluster.report().to_wire()
    assert TelemetryReport.model_validate(wire).pod_devices == cluster.report().pod_devices


def test_a_pod_keeps_its_boards_and_a_freed_board_goes_to_the_next_pod() -> None:
    cluster = Cluster()
    ids = board_ids("g", 8)
    cluster.run(pod("b", 3))
    assert cluster.holding() == {("ns", "b"): list(ids[:3])}
    cluster.run(pod("a", 2), pod("b", 3))  # "a" sorts first, but "b" keeps its boards
    assert cluster.holding() == {("ns", "a"): list(ids[3:5]), ("ns", "b"): list(ids[:3])}
    cluster.run(pod("a", 2))  # "b" goes: its boards are free
    assert cluster.holding() == {("ns", "a"): list(ids[3:5])}
    cluster.run(pod("a", 2), pod("c", 4))
    assert cluster.holding() == {("ns", "a"): list(ids[3:5]), ("ns", "c"): list(ids[:3] + ids[5:6])}


def test_the_power_of_a_board_follows_the_pod_that_holds_it() -> None:
    cluster = Cluster()
    cluster.run(pod("b", 3), pod("z", 2, util="0"))
    cluster.run(pod("a", 2, util="0.5"), pod("b", 3), pod("z", 2, util="0"))
    # b on boards 0-2 (busy), z on 3-4 (idle work), a on 5-6 at half, board 7 free.
    assert cluster.sim.nodes["g"].load.gpu_boards == (1.0, 1.0, 1.0, 0.0, 0.0, 0.5, 0.5, 0.0)


def test_a_pods_power_is_that_of_the_boards_it_holds_under_their_caps() -> None:
    # "a" sorts first but holds boards 2-3 ("b" came first and holds 0-1): capping 2-3 must
    # lower a's power, not b's, in the split of the node's energy between its pods.
    cluster = Cluster()
    ids = board_ids("g", 8)
    cluster.run(pod("b", 2))
    cluster.run(pod("a", 2), pod("b", 2))
    assert cluster.holding() == {("ns", "a"): list(ids[2:4]), ("ns", "b"): list(ids[:2])}
    uses = {u.account: u.marginal_w for u in cluster.sim.nodes["g"].uses}
    assert len(uses) == 1  # both in the same account: same namespace and class
    before = [u.marginal_w for u in cluster.sim.nodes["g"].uses]
    assert before[0] == pytest.approx(before[1])
    request = board_request(*(BoardCap(board=b, cap_pct_of_max=30) for b in ids[2:4]))
    cluster.sim.control("g", request, cluster.t)
    a, b = (u.marginal_w for u in cluster.sim.nodes["g"].uses)  # pods in name order
    assert a < 0.8 * b
    assert b == pytest.approx(before[1])


pods_strategy = st.lists(
    st.tuples(st.sampled_from("abcdefgh"), st.integers(min_value=0, max_value=5)),
    unique_by=lambda p: p[0],
    max_size=6,
)


@given(st.lists(pods_strategy, min_size=1, max_size=6), st.integers(min_value=0, max_value=8))
def test_boards_are_never_shared_never_more_than_asked_and_kept_while_the_pod_runs(
    steps: list[list[tuple[str, int]]], count: int
) -> None:
    holders: tuple[PodKey | None, ...] = ()
    asked_before: dict[PodKey, int] = {}
    for step in steps:
        wants = [(("ns", name), gpus) for name, gpus in step]
        before = holders
        holders = assign_boards(before, wants, count)
        assert len(holders) == count  # one holder (or none) per board: never two pods
        asked = dict(wants)
        held: dict[PodKey, list[int]] = {}
        for board, holder in enumerate(holders):
            if holder is not None:
                held.setdefault(holder, []).append(board)
        for holder, boards in held.items():
            assert len(boards) <= asked[holder]  # a pod gone or asking none holds nothing
        for board, holder in enumerate(before[:count]):
            if holder is not None and asked.get(holder) == asked_before.get(holder):
                assert holders[board] == holder  # still running as before: its boards stay
        # Nobody waits for a board while one is free.
        short = any(len(held.get(p, [])) < gpus for p, gpus in wants)
        assert not short or None not in holders
        asked_before = asked


# --- per-board caps in the control contract ----------------------------------------------------


def board_request(*caps: BoardCap) -> ControlRequest:
    return ControlRequest(gpu=GpuControl(clear_cap=True, board_caps=list(caps)))


def test_per_board_caps_go_in_board_order_and_are_reported_by_id() -> None:
    cluster = Cluster()
    ids = board_ids("g", 8)
    cluster.run(pod("a", 4), pod("b", 4))
    request = board_request(
        *(BoardCap(board=b, cap_watts=450) for b in ids[:4]),
        *(BoardCap(board=b) for b in ids[4:7]),
        BoardCap(board=ids[7], cap_pct_of_max=10),  # below the range: clamped
        BoardCap(board="GPU-not-here"),
    )
    response = cluster.sim.control("g", request, cluster.t)
    controls = cluster.sim.nodes["g"].controls
    spec = cluster.sim.nodes["g"].spec
    assert spec.gpu is not None
    assert controls.gpu_board_caps_w == (450,) * 4 + (None,) * 3 + (spec.gpu.min_cap_w,)
    outcomes = {o.board: o for o in response.gpu_boards or ()}
    assert outcomes[ids[0]].result is ControlResult.APPLIED
    assert outcomes[ids[7]].message.endswith(
        f"clamped to the device range: {spec.gpu.min_cap_w:.0f} W"
    )
    assert outcomes["GPU-not-here"].result is ControlResult.NOT_APPLIED
    assert response.gpu_cap is not None
    assert response.gpu_cap.result is ControlResult.NOT_APPLIED
    in_force = cluster.report().controls.gpu_boards or []
    assert [(b.board, b.cap_watts) for b in in_force[:5]] == [
        *((b, 450) for b in ids[:4]),
        (ids[4], None),
    ]
    assert cluster.sim.control_requests == 1
    assert cluster.sim.control_changes == 1
    cluster.sim.control("g", request, cluster.t)
    assert (cluster.sim.control_requests, cluster.sim.control_changes) == (2, 1)


def test_a_board_not_named_keeps_the_node_level_cap_and_an_empty_list_removes_them() -> None:
    spec, _ = node_spec(gpu_node(), CATALOG)
    ids = board_ids("g", 8)
    request = ControlRequest(
        gpu=GpuControl(cap_watts_per_gpu=500, board_caps=[BoardCap(board=ids[1], cap_watts=400)])
    )
    controls, _ = apply_control("g", spec, Controls(), request, ids)
    assert controls.gpu_cap_w == 500
    assert controls.gpu_board_caps_w == (500, 400, *(500,) * 6)
    # Without boardCaps the per-board caps stay: every caller that sends none is unchanged.
    same, _ = apply_control("g", spec, controls, ControlRequest(gpu=GpuControl(preset=None)), ids)
    assert same.gpu_board_caps_w == controls.gpu_board_caps_w
    cleared, response = apply_control("g", spec, controls, board_request(), ids)
    assert cleared.gpu_board_caps_w == ()
    assert cleared.gpu_cap_w is None
    assert response.gpu_boards == []
    assert response.controls.gpu_boards is None


def test_node_level_requests_answer_as_before() -> None:
    spec, _ = node_spec(gpu_node(), CATALOG)
    request = ControlRequest(gpu=GpuControl(cap_pct_of_max=50))
    controls, response = apply_control("g", spec, Controls(), request)
    assert controls == Controls(gpu_cap_w=spec.gpu.max_w / 2 if spec.gpu else None)
    assert response.gpu_boards is None
    assert response.controls.gpu_boards is None
    assert "boardCaps" not in request.model_dump(by_alias=True, exclude_none=True)["gpu"]


def test_board_caps_on_a_node_without_gpus_are_unsupported() -> None:
    group = node_group(node_name="c", cpu="AMD EPYC 9654", cpu_cores=64, memory_gib=256)
    spec, _ = node_spec(PROJECT(kwok_node("c", group)), CATALOG)
    _, response = apply_control("c", spec, Controls(), board_request(BoardCap(board="GPU-1")))
    assert response.gpu_cap is not None
    assert response.gpu_cap.result is ControlResult.UNSUPPORTED


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ('{"gpu": {"boardCaps": [{"board": "GPU-1"}, {"board": "GPU-1"}]}}', "more than once"),
        ('{"gpu": {"boardCaps": [{"board": "GPU 1"}]}}', "pattern"),
        ('{"gpu": {"boardCaps": [{"board": ""}]}}', "at least 1"),
        ('{"gpu": {"boardCaps": [{"board": "%s"}]}}' % ("G" * 129), "at most 128"),
        ('{"gpu": {"boardCaps": [{"board": "GPU-1", "capWatts": 0}]}}', "greater than or equal"),
        ('{"gpu": {"boardCaps": [{"board": "GPU-1", "capWatts": "300"}]}}', "valid number"),
        ('{"gpu": {"boardCaps": [{"board": "GPU-1", "extra": 1}]}}', "Extra inputs"),
        ('{"gpu": {"boardCaps": {"GPU-1": 300}}}', "valid array"),
    ],
)
def test_bad_board_caps_are_refused(body: str, problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        ControlRequest.model_validate_json(body, strict=True)


def test_board_caps_are_bounded() -> None:
    caps = ",".join(f'{{"board": "GPU-{i}"}}' for i in range(MAX_BOARDS + 1))
    with pytest.raises(ValidationError, match="at most 64"):
        ControlRequest.model_validate_json(f'{{"gpu": {{"boardCaps": [{caps}]}}}}', strict=True)


def test_a_report_naming_too_many_pods_or_boards_is_refused() -> None:
    report = Cluster().report().to_wire()
    report["podDevices"] = [
        {"namespace": "ns", "name": f"p{i}", "devices": ["GPU-1"]} for i in range(257)
    ]
    with pytest.raises(ValidationError, match="at most 256"):
        TelemetryReport.model_validate(report)
    report["podDevices"] = [{"namespace": "ns", "name": "p", "devices": ["G"] * (MAX_BOARDS + 1)}]
    with pytest.raises(ValidationError, match="at most 64"):
        TelemetryReport.model_validate(report)
    report["podDevices"] = None
    report["hardware"]["gpuIds"] = ["not an id"]
    with pytest.raises(ValidationError, match="pattern"):
        TelemetryReport.model_validate(report)
