"""The shared boot decision (``core.lifecycle_boot.plan_boots``): enough nodes for the work that
waits, never past a group's maximum or the boot limit, never for a pod that fits a serving node
or fits no group, and a performance pod never boots an eco node."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from joulie.core.lifecycle import Demand
from joulie.core.lifecycle_boot import (
    HELD_AT_MAX,
    HELD_BOOT_LIMIT,
    HELD_COOLING,
    BootGroup,
    Room,
    plan_boots,
)
from joulie.core.lifecycle_limits import BOOTS_AT_LEAST, Limits, fleet_boots

NVIDIA = "nvidia.com/gpu"
GIB = 2**30
CPU_NODE = Room(32_000, 128 * GIB)
GPU_NODE = Room(64_000, 512 * GIB, {NVIDIA: 8})
ECO_GPU_NODE = Room(64_000, 512 * GIB, {NVIDIA: 8}, keeps_performance_off=True)


def test_a_burst_boots_just_enough_nodes_of_the_cheapest_fitting_group() -> None:
    pods = [Demand(8_000, memory_bytes=16 * GIB)] * 10  # 4 fit one CPU node: 3 nodes
    plan = plan_boots(
        pods,
        [BootGroup("gpu", GPU_NODE, 5, idle_w=400.0), BootGroup("cpu", CPU_NODE, 5, idle_w=90.0)],
        now=0.0,
    )
    assert plan.boots == {"cpu": 3}
    assert plan.served == 10
    assert plan.unfittable == 0
    assert not plan.held


def test_a_cpu_pod_does_not_wake_a_gpu_server_even_when_draws_are_unknown() -> None:
    # Live, idle draws are not known (0): the smallest node that fits is chosen.
    plan = plan_boots(
        [Demand(1_000)], [BootGroup("gpu", GPU_NODE, 5), BootGroup("cpu", CPU_NODE, 5)], now=0.0
    )
    assert plan.boots == {"cpu": 1}


def test_pods_that_fit_a_serving_node_or_room_coming_back_boot_nothing() -> None:
    pods = [Demand(4_000), Demand(4_000, 2, NVIDIA)]
    groups = [BootGroup("cpu", CPU_NODE, 5), BootGroup("gpu", GPU_NODE, 5)]
    serving = plan_boots(pods, groups, now=0.0, serving=[Room(4_000), Room(8_000, 0, {NVIDIA: 2})])
    assert serving.total == 0
    assert serving.left_to_scheduler == 2
    coming = plan_boots(pods, groups, now=0.0, coming=[GPU_NODE])
    assert coming.total == 0
    assert coming.served == 2
    booting = plan_boots(pods, [BootGroup("gpu", GPU_NODE, 5, booting=1)], now=0.0)
    assert booting.total == 0
    assert booting.served == 2


def test_a_pod_no_group_could_ever_fit_boots_nothing() -> None:
    groups = [BootGroup("cpu", CPU_NODE, 5), BootGroup("gpu", GPU_NODE, 5)]
    too_big = Demand(128_000)
    other_gpu = Demand(1_000, 1, "amd.com/gpu")
    plan = plan_boots([too_big, other_gpu, too_big], groups, now=0.0)
    assert plan.total == 0
    assert plan.unfittable == 3


def test_a_performance_pod_never_boots_an_eco_node() -> None:
    perf = Demand(1_000, 1, NVIDIA, performance=True)
    only_eco = plan_boots([perf], [BootGroup("eco", ECO_GPU_NODE, 5)], now=0.0)
    assert only_eco.total == 0
    assert only_eco.unfittable == 1
    # Nor does it ride on an eco node booting for someone else.
    both = plan_boots(
        [Demand(1_000, 1, NVIDIA), perf],
        [BootGroup("eco", ECO_GPU_NODE, 5, idle_w=1.0), BootGroup("perf", GPU_NODE, 5, idle_w=2.0)],
        now=0.0,
    )
    assert both.boots == {"eco": 1, "perf": 1}
    # A standard pod may use any node.
    standard = plan_boots([Demand(1_000, 1, NVIDIA)], [BootGroup("eco", ECO_GPU_NODE, 5)], now=0.0)
    assert standard.boots == {"eco": 1}


def test_held_back_at_the_group_maximum_the_boot_limit_and_in_a_cooldown() -> None:
    pods = [Demand(32_000)] * 4
    at_max = plan_boots(pods, [BootGroup("cpu", CPU_NODE, 2)], now=0.0)
    assert at_max.boots == {"cpu": 2}
    assert at_max.held == {HELD_AT_MAX: 2}
    limited = plan_boots(
        pods, [BootGroup("cpu", CPU_NODE, 9, booting=1)], now=0.0, max_concurrent_boots=3
    )
    assert limited.boots == {"cpu": 2}  # 1 in flight + 2 new = the limit of 3
    assert limited.served == 3
    assert limited.held == {HELD_BOOT_LIMIT: 1}
    cooling = BootGroup("cpu", CPU_NODE, 9, cooling_until=600.0)
    assert plan_boots(pods, [cooling], now=599.0).held == {HELD_COOLING: 4}
    assert plan_boots(pods, [cooling], now=600.0).boots == {"cpu": 4}


def test_the_default_boot_limit_follows_the_fleet() -> None:
    assert fleet_boots(4) == BOOTS_AT_LEAST
    assert fleet_boots(5_000) == 500
    assert Limits().boots_at_once(1_000) == 100
    assert Limits(max_concurrent_boots=2).boots_at_once(1_000) == 2


# --- properties ------------------------------------------------------------------------------

_rooms = st.builds(
    Room,
    cpu_millis=st.sampled_from([4_000, 16_000, 64_000]),
    memory_bytes=st.sampled_from([0, 16 * GIB, 256 * GIB]),
    gpus=st.sampled_from([{}, {NVIDIA: 4}, {"amd.com/gpu": 8}]),
    keeps_performance_off=st.booleans(),
)
_demands = st.builds(
    Demand,
    cpu_millis=st.sampled_from([500, 4_000, 20_000, 100_000]),
    gpus=st.sampled_from([0, 1, 4]),
    gpu_resource=st.sampled_from([NVIDIA, "amd.com/gpu"]),
    performance=st.booleans(),
    memory_bytes=st.sampled_from([0, 8 * GIB, 64 * GIB]),
)


@st.composite
def _groups(draw: st.DrawFn) -> list[BootGroup]:
    rooms = draw(st.lists(_rooms, min_size=1, max_size=4))
    return [
        BootGroup(
            f"g{i}",
            room,
            draw(st.integers(0, 6)),
            draw(st.integers(0, 2)),
            draw(st.sampled_from([0.0, 100.0, 300.0])),
            draw(st.sampled_from([None, 50.0, 500.0])),
        )
        for i, room in enumerate(rooms)
    ]


@settings(max_examples=300, deadline=None)
@given(
    pods=st.lists(_demands, max_size=25),
    groups=_groups(),
    serving=st.lists(_rooms, max_size=3),
    limit=st.one_of(st.none(), st.integers(0, 6)),
)
def test_plans_keep_every_bound(
    pods: list[Demand], groups: list[BootGroup], serving: list[Room], limit: int | None
) -> None:
    now = 100.0
    plan = plan_boots(pods, groups, now=now, serving=serving, max_concurrent_boots=limit)
    by_name = {g.name: g for g in groups}
    # Every pod is accounted for exactly once.
    assert plan.left_to_scheduler + plan.served + sum(plan.held.values()) + plan.unfittable == len(
        pods
    )
    # Never past a group's maximum, never into a cooling group, never past the boot limit.
    for name, count in plan.boots.items():
        group = by_name[name]
        assert 0 < count <= group.can_boot
        assert group.cooling_until is None or now >= group.cooling_until
    if limit is not None:
        in_flight = sum(g.booting for g in groups)
        assert plan.total <= max(0, limit - in_flight)
    # Never more nodes than pods that needed one, and none for an unfittable or served pod.
    assert plan.total <= plan.served
    if pods and any(room.takes(pods[0]) for room in serving):
        assert plan.left_to_scheduler >= 1
    # A performance pod never boots an eco node.
    performance = [p for p in pods if p.performance]
    only = plan_boots(performance, groups, now=now, max_concurrent_boots=limit)
    assert not any(by_name[name].room.keeps_performance_off for name in only.boots)
