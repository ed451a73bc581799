"""The safety rules between the matrix and the actuators: which wanted drains and shutdowns may
start now, and which nodes are never ours to touch."""

from __future__ import annotations

import pytest

from joulie.api import keys
from joulie.api.lifecycle import Action, BootGrace, IdleGrace, StateTuple, Window, WorkerState
from joulie.core.lifecycle_limits import (
    Candidate,
    FleetCounts,
    Limits,
    Verdict,
    admit,
    backoff_s,
    circuit_open,
    fleet_drains,
    left_alone,
)

IDLE_PAST_GRACE = StateTuple(WorkerState.IDLE, Window.OPEN, BootGrace.EXCEEDED, IdleGrace.EXCEEDED)
DOWN = StateTuple(WorkerState.DOWN, Window.OPEN, BootGrace.EXCEEDED, IdleGrace.NOT_IDLE)
NOW = 50_000.0


def drain(name: str, idle_since: float | None = 1000.0) -> Candidate:
    return Candidate(name, Action.START_DRAIN, IDLE_PAST_GRACE, "idle", idle_since)


def shutdown(name: str) -> Candidate:
    return Candidate(name, Action.START_SHUTDOWN, DOWN, "heartbeat stale")


def fleet(
    managed: int = 100, unready: int = 0, draining: int = 0, shutting: int = 0
) -> FleetCounts:
    return FleetCounts(managed=managed, unready=unready, draining=draining, shutting_down=shutting)


def admitted(verdicts: list[Verdict]) -> list[str]:
    return [v.candidate.name for v in verdicts if v.admitted]


# Limits wide open, so each test narrows only the rule it is about.
OPEN = Limits(max_concurrent_drains=100, max_concurrent_shutdowns=100, budget_pct=100.0)


# --- circuit breaker ------------------------------------------------------------------------------


def test_too_many_not_ready_nodes_halt_every_candidate() -> None:
    verdicts = admit([drain("a"), shutdown("b")], fleet(managed=10, unready=5), OPEN)
    assert admitted(verdicts) == []
    for verdict in verdicts:
        assert verdict.reason == "circuit breaker: 5 of 10 nodes NotReady (50 % > 45 %)"


def test_exactly_at_the_halt_share_nothing_is_halted() -> None:
    # 9 of 20 is 45 %: the breaker opens only above it.
    assert circuit_open(fleet(managed=20, unready=9), OPEN) is None
    assert circuit_open(fleet(managed=20, unready=10), OPEN) is not None
    assert admitted(admit([shutdown("b")], fleet(managed=20, unready=9), OPEN)) == ["b"]


def test_no_more_than_the_ok_count_is_tolerated_while_most_nodes_are_ready() -> None:
    # One or two broken nodes of a small cluster are shut down even past 45 %...
    assert circuit_open(fleet(managed=4, unready=2), OPEN) is None
    assert circuit_open(fleet(managed=2, unready=1), OPEN) is None
    verdicts = admit([shutdown("a"), shutdown("b")], fleet(4, unready=2), OPEN)
    assert admitted(verdicts) == ["a", "b"]
    # ... but once most of it is NotReady it looks like a partition, not broken machines.
    assert circuit_open(fleet(managed=4, unready=3), OPEN) is not None
    assert circuit_open(fleet(managed=4, unready=4), OPEN) is not None


def test_every_node_not_ready_opens_the_breaker_on_a_small_fleet() -> None:
    # 3 of 3 NotReady was admitted whole (the ok count of 3 alone decided): nothing may go now.
    verdicts = admit([shutdown("a"), shutdown("b"), shutdown("c")], fleet(3, unready=3), OPEN)
    assert admitted(verdicts) == []
    assert verdicts[0].reason == "circuit breaker: 3 of 3 nodes NotReady (100 % > 45 %)"


def test_the_ok_count_and_share_are_settings() -> None:
    limits = Limits(unready_ok_count=0, unready_halt_pct=10.0)
    assert circuit_open(fleet(managed=10, unready=1), limits) is None
    assert circuit_open(fleet(managed=10, unready=2), limits) is not None


def test_an_empty_fleet_is_not_halted() -> None:
    assert circuit_open(fleet(managed=0, unready=0), OPEN) is None


# --- concurrency ----------------------------------------------------------------------------------


def test_max_concurrent_drains_counts_the_ones_in_flight() -> None:
    limits = Limits(max_concurrent_drains=3, budget_pct=100.0)
    candidates = [drain(f"n{i}", idle_since=float(i)) for i in range(5)]
    assert admitted(admit(candidates, fleet(), limits)) == ["n0", "n1", "n2"]
    verdicts = admit(candidates, fleet(draining=2), limits)
    assert admitted(verdicts) == ["n0"]
    assert verdicts[1].reason == "3 drains in flight (limit 3)"
    assert admitted(admit(candidates, fleet(draining=3), limits)) == []


@pytest.mark.parametrize(("managed", "drains"), [(1, 1), (100, 1), (101, 2), (500, 5), (5000, 50)])
def test_unset_the_drains_at_once_follow_the_fleet(managed: int, drains: int) -> None:
    assert fleet_drains(managed) == drains
    candidates = [drain(f"n{i:04}", idle_since=float(i)) for i in range(min(managed, 80))]
    verdicts = admit(candidates, fleet(managed=managed), Limits(budget_pct=100.0))
    assert len(admitted(verdicts)) == min(drains, len(candidates))
    assert Limits(max_concurrent_drains=1).drains_at_once(managed) == 1  # set: as set


def test_the_disruption_budget_still_bounds_drains_that_follow_the_fleet() -> None:
    candidates = [drain(f"n{i:04}", idle_since=float(i)) for i in range(60)]
    verdicts = admit(candidates, fleet(managed=5000), Limits(budget_pct=0.5))
    assert len(admitted(verdicts)) == 25  # 0.5 % of 5,000 before 1 % of it
    assert verdicts[-1].reason == "disruption budget spent: 25 of 25 (0.5 % of 5000)"


def test_max_concurrent_shutdowns_counts_the_ones_in_flight() -> None:
    limits = Limits(max_concurrent_shutdowns=2, budget_pct=100.0)
    candidates = [shutdown(name) for name in ("a", "b", "c")]
    assert admitted(admit(candidates, fleet(), limits)) == ["a", "b"]
    verdicts = admit(candidates, fleet(shutting=1), limits)
    assert admitted(verdicts) == ["a"]
    assert verdicts[2].reason == "2 shutdowns in flight (limit 2)"


def test_shutdowns_of_broken_nodes_are_not_held_by_the_drain_slot() -> None:
    limits = Limits(max_concurrent_drains=0, budget_pct=100.0)
    assert admitted(admit([shutdown("a")], fleet(managed=3), limits)) == ["a"]


def test_shutdowns_respect_the_floor_and_the_budget() -> None:
    # They were admitted past both: a shutdown takes a node out of service as a drain does.
    floor = Limits(max_concurrent_shutdowns=10, budget_pct=100.0, min_nodes=3)
    verdicts = admit([shutdown("a"), shutdown("b")], fleet(managed=4), floor)
    assert admitted(verdicts) == ["a"]
    assert verdicts[1].reason == "3 nodes serving, minimum 3"
    budget = Limits(max_concurrent_shutdowns=10, budget_pct=10.0)
    verdicts = admit([shutdown("a"), shutdown("b")], fleet(managed=10), budget)
    assert admitted(verdicts) == ["a"]
    assert verdicts[1].reason == "disruption budget spent: 1 of 1 (10 % of 10)"


def test_shutdowns_in_flight_use_up_the_drain_budget() -> None:
    limits = Limits(max_concurrent_drains=5, max_concurrent_shutdowns=5, budget_pct=10.0)
    verdicts = admit([shutdown("x"), drain("a")], fleet(managed=10), limits)
    assert admitted(verdicts) == ["x"]
    assert verdicts[1].reason == "disruption budget spent: 1 of 1 (10 % of 10)"


# --- disruption budget ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("managed", "pct", "budget"),
    [
        (10, 10.0, 1),
        (11, 10.0, 2),  # 1.1 rounds up
        (1, 10.0, 1),
        (19, 10.0, 2),
        (20, 10.0, 2),
        (10, 0.0, 0),
        (10, 100.0, 10),
        (250, 64.4, 161),  # exactly 161: float arithmetic must not make it 162
        (375, 8.8, 33),
    ],
)
def test_the_budget_is_a_share_of_the_managed_nodes_rounded_up(
    managed: int, pct: float, budget: int
) -> None:
    limits = Limits(max_concurrent_drains=1000, budget_pct=pct)
    candidates = [drain(f"n{i:04d}", idle_since=float(i)) for i in range(managed)]
    assert len(admitted(admit(candidates, fleet(managed=managed), limits))) == budget


def test_drains_in_flight_use_up_the_budget() -> None:
    limits = Limits(max_concurrent_drains=10, budget_pct=10.0)
    verdicts = admit([drain("a"), drain("b")], fleet(managed=20, draining=1), limits)
    assert admitted(verdicts) == ["a"]
    assert verdicts[1].reason == "disruption budget spent: 2 of 2 (10 % of 20)"


# --- minimum nodes --------------------------------------------------------------------------------


def test_drains_stop_at_the_minimum_serving_nodes() -> None:
    limits = Limits(max_concurrent_drains=10, budget_pct=100.0, min_nodes=3)
    candidates = [drain(name, idle_since=float(i)) for i, name in enumerate("abcde")]
    verdicts = admit(candidates, fleet(managed=5), limits)
    assert admitted(verdicts) == ["a", "b"]
    assert verdicts[2].reason == "3 nodes serving, minimum 3"


def test_nodes_in_flight_are_not_serving() -> None:
    limits = Limits(max_concurrent_drains=10, budget_pct=100.0, min_nodes=3)
    assert admitted(admit([drain("a")], fleet(managed=5, draining=1, shutting=1), limits)) == []
    assert admitted(admit([drain("a")], fleet(managed=5, draining=1), limits)) == ["a"]


def test_without_a_floor_the_last_node_may_be_drained() -> None:
    assert admitted(admit([drain("a")], fleet(managed=1), OPEN)) == ["a"]


# --- order ----------------------------------------------------------------------------------------


def test_broken_nodes_first_then_the_longest_idle() -> None:
    candidates = [
        drain("recent", idle_since=3000.0),
        shutdown("zz-broken"),
        drain("unknown", idle_since=None),
        drain("oldest", idle_since=100.0),
        shutdown("broken"),
        drain("b-same", idle_since=2000.0),
        drain("a-same", idle_since=2000.0),
    ]
    order = [v.candidate.name for v in admit(candidates, fleet(), OPEN)]
    assert order == ["broken", "zz-broken", "oldest", "a-same", "b-same", "recent", "unknown"]


def test_the_longest_idle_gets_the_one_drain_slot() -> None:
    limits = Limits(max_concurrent_drains=1, budget_pct=100.0)
    candidates = [drain("new", idle_since=900.0), drain("old", idle_since=10.0)]
    assert admitted(admit(candidates, fleet(), limits)) == ["old"]


# --- nodes left alone -----------------------------------------------------------------------------


def alone(
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    taints: tuple[str, ...] = (),
    deleting: bool = False,
    retry_after: float | None = None,
) -> str | None:
    return left_alone(annotations or {}, labels or {}, taints, deleting, retry_after, NOW)


def test_an_ordinary_node_is_ours() -> None:
    labels = {"kubernetes.io/hostname": "n1", "node-role.kubernetes.io/worker": ""}
    assert alone(labels=labels, taints=("joulie.io/draining",)) is None


@pytest.mark.parametrize(
    "annotation",
    [
        keys.LIFECYCLE_EXCLUDE_ANNOTATION,
        "cluster-autoscaler.kubernetes.io/scale-down-disabled",
        "karpenter.sh/do-not-disrupt",
    ],
)
def test_each_opt_out_annotation_is_honoured(annotation: str) -> None:
    assert alone({annotation: "true"}) == f"opted out ({annotation}=true)"
    assert alone({annotation: "false"}) is None


def test_a_node_being_deleted_is_left_alone() -> None:
    assert alone(deleting=True) == "already being deleted"


@pytest.mark.parametrize("taint", ["ToBeDeletedByClusterAutoscaler", "karpenter.sh/disrupted"])
def test_a_node_another_controller_is_removing_is_left_alone(taint: str) -> None:
    reason = alone(taints=("node.kubernetes.io/unreachable", taint))
    assert reason == f"being removed by another controller (taint {taint})"


@pytest.mark.parametrize(
    "label",
    [
        "karpenter.sh/nodepool",
        "node-role.kubernetes.io/control-plane",
        "node-role.kubernetes.io/master",
    ],
)
def test_nodes_owned_elsewhere_and_the_control_plane_are_left_alone(label: str) -> None:
    assert alone(labels={label: ""}) == f"not ours to remove (label {label})"


def test_backoff_ends_exactly_at_retry_after() -> None:
    assert alone(retry_after=NOW + 90) == "backing off after a failure, 90 s left"
    assert alone(retry_after=NOW + 0.5) is not None
    assert alone(retry_after=NOW) is None
    assert alone(retry_after=NOW - 1) is None


def test_an_opt_out_is_reported_before_anything_else() -> None:
    reason = alone(
        {"karpenter.sh/do-not-disrupt": "true"},
        {"karpenter.sh/nodepool": "default"},
        ("ToBeDeletedByClusterAutoscaler",),
        deleting=True,
        retry_after=NOW + 60,
    )
    assert reason == "opted out (karpenter.sh/do-not-disrupt=true)"


def test_backoff_doubles_to_its_cap_and_honours_a_longer_wait_asked_for() -> None:
    assert [backoff_s(n, 300, 3600) for n in (1, 2, 3, 4, 5, 6)] == [
        300,
        600,
        1200,
        2400,
        3600,
        3600,
    ]
    assert backoff_s(1, 300, 3600, asked_s=900) == 900  # Retry-After longer than the backoff
    assert backoff_s(3, 300, 3600, asked_s=60) == 1200  # shorter: the backoff stands
    assert backoff_s(1, 300, 3600, asked_s=86_400) == 3600  # never past the cap
