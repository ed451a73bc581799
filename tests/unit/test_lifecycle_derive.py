"""A node's state tuple from plain facts, at each boundary of each derivation, and the steps of a
drain."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from joulie.api.lifecycle import (
    Action,
    BootGrace,
    IdleGrace,
    Window,
    WorkerState,
    default_matrix,
)
from joulie.core.lifecycle import (
    Demand,
    DrainStep,
    LifecycleConfig,
    NodeFacts,
    billing_window,
    decide,
    derive,
    drain_step,
    fits_pending,
)

NOW = 100_000.0
CONFIG = LifecycleConfig()  # boot 1200 s, idle 600 s, NotReady 100 s, heartbeat 120 s
MATRIX = default_matrix()


def before(instant: float) -> float:
    """The latest time before ``instant`` (one epsilon earlier)."""
    return math.nextafter(instant, -math.inf)


def after(instant: float) -> float:
    return math.nextafter(instant, math.inf)


def node(**changes: object) -> NodeFacts:
    """A node up for a day, Ready, its heartbeat 5 s old, no workload, not yet seen idle."""
    facts = NodeFacts(
        name="node-1",
        launched_at=NOW - 86_400,
        ready=True,
        ready_changed_at=NOW - 86_000,
        heartbeat_at=NOW - 5,
        workload_pods=0,
        idle_since=None,
    )
    return replace(facts, **changes)  # type: ignore[arg-type]


# --- boot grace -----------------------------------------------------------------------------------


def test_boot_grace_is_exceeded_exactly_at_its_end() -> None:
    assert derive(node(launched_at=NOW - 1200), NOW, CONFIG).tuple.boot is BootGrace.EXCEEDED


def test_boot_grace_waits_until_one_epsilon_before_its_end() -> None:
    launched = after(NOW - 1200)
    assert NOW - launched < 1200
    assert derive(node(launched_at=launched), NOW, CONFIG).tuple.boot is BootGrace.WAIT


def test_a_node_launched_a_moment_ago_is_in_boot_wait() -> None:
    facts = node(launched_at=NOW, ready=False, ready_changed_at=None, heartbeat_at=None)
    derived = derive(facts, NOW, CONFIG)
    assert derived.tuple.boot is BootGrace.WAIT
    assert derived.tuple.state is WorkerState.UNPAIRED
    assert decide(derived, MATRIX) is Action.NONE


# --- idle grace -----------------------------------------------------------------------------------


def test_idle_grace_is_exceeded_exactly_at_its_end() -> None:
    derived = derive(node(idle_since=NOW - 600), NOW, CONFIG)
    assert derived.tuple.state is WorkerState.IDLE
    assert derived.tuple.idle is IdleGrace.EXCEEDED
    assert derived.idle_since == NOW - 600
    assert decide(derived, MATRIX) is Action.START_DRAIN


def test_idle_grace_waits_until_one_epsilon_before_its_end() -> None:
    derived = derive(node(idle_since=after(NOW - 600)), NOW, CONFIG)
    assert derived.tuple.idle is IdleGrace.WAIT
    assert decide(derived, MATRIX) is Action.NONE


def test_a_node_first_seen_idle_starts_its_idle_spell_now() -> None:
    derived = derive(node(idle_since=None), NOW, CONFIG)
    assert derived.tuple.state is WorkerState.IDLE
    assert derived.tuple.idle is IdleGrace.WAIT
    assert derived.idle_since == NOW


def test_a_zero_idle_grace_is_exceeded_at_once() -> None:
    derived = derive(node(idle_since=None), NOW, replace(CONFIG, idle_grace_s=0.0))
    assert derived.tuple.idle is IdleGrace.EXCEEDED


def test_work_ends_the_idle_spell() -> None:
    derived = derive(node(workload_pods=2, idle_since=NOW - 5000), NOW, CONFIG)
    assert derived.tuple.state is WorkerState.BUSY
    assert derived.tuple.idle is IdleGrace.NOT_IDLE
    assert derived.idle_since is None
    # And the next idle observation starts a fresh spell.
    later = derive(node(idle_since=derived.idle_since), NOW + 30, CONFIG)
    assert later.idle_since == NOW + 30
    assert later.tuple.idle is IdleGrace.WAIT


def test_a_brief_not_ready_keeps_the_idle_spell() -> None:
    facts = node(ready=False, ready_changed_at=NOW - 50, idle_since=NOW - 500)
    derived = derive(facts, NOW, CONFIG)
    assert derived.tuple.state is WorkerState.BUSY
    assert derived.tuple.idle is IdleGrace.NOT_IDLE
    assert derived.idle_since == NOW - 500
    assert decide(derived, MATRIX) is Action.NONE
    # Ready again 200 s later: the spell that began before the blip is past its grace.
    back = derive(node(idle_since=derived.idle_since, heartbeat_at=NOW + 195), NOW + 200, CONFIG)
    assert back.tuple.idle is IdleGrace.EXCEEDED


def test_a_brief_not_ready_does_not_start_an_idle_spell() -> None:
    derived = derive(node(ready=False, ready_changed_at=NOW - 50), NOW, CONFIG)
    assert derived.idle_since is None


# --- worker state ---------------------------------------------------------------------------------


def test_a_heartbeat_stale_exactly_at_the_threshold_is_down() -> None:
    derived = derive(node(heartbeat_at=NOW - 120), NOW, CONFIG)
    assert derived.tuple.state is WorkerState.DOWN
    assert decide(derived, MATRIX) is Action.START_SHUTDOWN


def test_a_heartbeat_one_epsilon_fresher_is_not_down() -> None:
    derived = derive(node(heartbeat_at=after(NOW - 120)), NOW, CONFIG)
    assert derived.tuple.state is WorkerState.IDLE


def test_a_stale_heartbeat_is_down_even_while_ready_and_busy() -> None:
    derived = derive(node(heartbeat_at=NOW - 600, workload_pods=3), NOW, CONFIG)
    assert derived.tuple.state is WorkerState.DOWN
    assert derived.idle_since is None


def test_not_ready_past_its_grace_is_down() -> None:
    derived = derive(node(ready=False, ready_changed_at=NOW - 100), NOW, CONFIG)
    assert derived.tuple.state is WorkerState.DOWN
    assert decide(derived, MATRIX) is Action.START_SHUTDOWN


def test_not_ready_just_under_its_grace_is_left_alone() -> None:
    derived = derive(node(ready=False, ready_changed_at=after(NOW - 100)), NOW, CONFIG)
    assert derived.tuple.state is WorkerState.BUSY
    assert decide(derived, MATRIX) is Action.NONE


def test_not_ready_with_no_transition_time_counts_from_launch() -> None:
    old = derive(node(ready=False, ready_changed_at=None), NOW, CONFIG)
    assert old.tuple.state is WorkerState.DOWN
    # Launched 1300 s ago (past its boot grace), never Ready, with a heartbeat: 1300 s NotReady.
    facts = node(ready=False, ready_changed_at=None, launched_at=NOW - 1300)
    assert derive(facts, NOW, CONFIG).tuple.state is WorkerState.DOWN
    grace = replace(CONFIG, not_ready_grace_s=2000.0)
    assert derive(facts, NOW, grace).tuple.state is WorkerState.BUSY


def test_not_ready_within_boot_grace_is_unpaired() -> None:
    facts = node(launched_at=NOW - 600, ready=False, ready_changed_at=NOW - 590)
    derived = derive(facts, NOW, CONFIG)
    assert derived.tuple.state is WorkerState.UNPAIRED
    assert derived.tuple.boot is BootGrace.WAIT
    assert decide(derived, MATRIX) is Action.NONE


def test_never_a_heartbeat_and_not_ready_is_unpaired() -> None:
    facts = node(ready=False, ready_changed_at=NOW - 10, heartbeat_at=None)
    derived = derive(facts, NOW, CONFIG)
    assert derived.tuple.state is WorkerState.UNPAIRED
    # Past its boot grace a node that never came up is powered off.
    assert derived.tuple.boot is BootGrace.EXCEEDED
    assert decide(derived, MATRIX) is Action.START_SHUTDOWN


def test_ready_without_a_lease_is_judged_by_its_pods() -> None:
    assert derive(node(heartbeat_at=None), NOW, CONFIG).tuple.state is WorkerState.IDLE
    busy = derive(node(heartbeat_at=None, workload_pods=1), NOW, CONFIG)
    assert busy.tuple.state is WorkerState.BUSY


def test_only_idle_nodes_have_an_idle_grace() -> None:
    for facts in (
        node(workload_pods=1),
        node(heartbeat_at=NOW - 500),
        node(ready=False, ready_changed_at=NOW - 500),
        node(ready=False, heartbeat_at=None),
    ):
        assert derive(facts, NOW, CONFIG).tuple.idle is IdleGrace.NOT_IDLE


# --- billing window -------------------------------------------------------------------------------

HOURLY = LifecycleConfig(billing_period_s=3600.0, shutdown_windows=((3240.0, 3600.0),))
LAUNCHED = 5_000.0


@pytest.mark.parametrize(
    ("offset", "expected"),
    [
        (0.0, Window.CLOSED),
        (3239.0, Window.CLOSED),
        (3240.0, Window.OPEN),  # the start is inclusive
        (3599.0, Window.OPEN),
        (3600.0, Window.CLOSED),  # the end is exclusive (it is the next period's start)
        (5 * 3600.0 + 3239.0, Window.CLOSED),
        (5 * 3600.0 + 3240.0, Window.OPEN),
        (5 * 3600.0 + 3599.5, Window.OPEN),
        (6 * 3600.0, Window.CLOSED),
    ],
)
def test_window_edges_across_periods(offset: float, expected: Window) -> None:
    assert billing_window(LAUNCHED, LAUNCHED + offset, HOURLY) is expected


def test_window_start_one_epsilon_early_is_closed() -> None:
    assert billing_window(LAUNCHED, before(LAUNCHED + 3240), HOURLY) is Window.CLOSED
    assert billing_window(LAUNCHED, LAUNCHED + 3240, HOURLY) is Window.OPEN


def test_window_end_exclusive_within_a_period() -> None:
    config = LifecycleConfig(billing_period_s=3600.0, shutdown_windows=((600.0, 1200.0),))
    assert billing_window(0.0, before(1200.0), config) is Window.OPEN
    assert billing_window(0.0, 1200.0, config) is Window.CLOSED
    assert billing_window(0.0, 3600.0 + 600.0, config) is Window.OPEN


def test_several_windows_in_a_period() -> None:
    config = LifecycleConfig(
        billing_period_s=3600.0, shutdown_windows=((0.0, 60.0), (1800.0, 1860.0))
    )
    opened = [t for t in range(0, 7200, 30) if billing_window(0.0, float(t), config) is Window.OPEN]
    assert opened == [0, 30, 1800, 1830, 3600, 3630, 5400, 5430]


def test_without_a_period_the_window_is_always_open() -> None:
    for now in (LAUNCHED - 10, LAUNCHED, LAUNCHED + 3240, LAUNCHED + 1e9):
        assert billing_window(LAUNCHED, now, CONFIG) is Window.OPEN


def test_a_closed_window_holds_back_the_drain_of_an_idle_node() -> None:
    facts = node(launched_at=LAUNCHED, idle_since=LAUNCHED + 100)
    now = LAUNCHED + 3600 + 1000
    closed = derive(replace(facts, heartbeat_at=now - 5), now, HOURLY)
    assert (closed.tuple.window, closed.tuple.idle) == (Window.CLOSED, IdleGrace.EXCEEDED)
    assert decide(closed, MATRIX) is Action.NONE
    now = LAUNCHED + 3600 + 3300
    opened = derive(replace(facts, heartbeat_at=now - 5), now, HOURLY)
    assert (opened.tuple.window, opened.tuple.idle) == (Window.OPEN, IdleGrace.EXCEEDED)
    assert decide(opened, MATRIX) is Action.START_DRAIN


# --- configuration --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["boot_grace_s", "idle_grace_s", "not_ready_grace_s"])
def test_a_negative_grace_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match=f"{name} must be >= 0"):
        LifecycleConfig(**{name: -1.0})  # type: ignore[arg-type]
    LifecycleConfig(**{name: 0.0})  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0.0, -1.0])
def test_a_heartbeat_threshold_of_zero_is_refused(value: float) -> None:
    # With 0, a Lease renewed this very instant would read as stale: every node down.
    with pytest.raises(ValueError, match="heartbeat_stale_s must be > 0"):
        LifecycleConfig(heartbeat_stale_s=value)


@pytest.mark.parametrize(
    ("period", "windows", "message"),
    [
        (-60.0, (), "billing_period_s must be >= 0"),
        (3600.0, (), "a billing period needs at least one shutdown window"),
        (3600.0, ((600.0, 600.0),), "shutdown window 600-600 s is not within the billing period"),
        (3600.0, ((1200.0, 600.0),), "shutdown window 1200-600 s"),
        (3600.0, ((3000.0, 3700.0),), r"3000-3700 s is not within the billing period \(0-3600 s"),
        (3600.0, ((-10.0, 60.0),), "shutdown window -10-60 s"),
        (0.0, ((0.0, 60.0),), "is not within the billing period"),
    ],
)
def test_bad_billing_settings_are_refused(
    period: float, windows: tuple[tuple[float, float], ...], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        LifecycleConfig(billing_period_s=period, shutdown_windows=windows)


def test_a_window_may_span_the_whole_period() -> None:
    config = LifecycleConfig(billing_period_s=3600.0, shutdown_windows=((0.0, 3600.0),))
    assert all(billing_window(0.0, float(t), config) is Window.OPEN for t in range(0, 7200, 450))


# --- drain steps ----------------------------------------------------------------------------------

STARTED = NOW - 60


def step(
    now: float = NOW,
    pods: tuple[str, ...] = (),
    demand_fits: bool = False,
    fresh: Action = Action.START_DRAIN,
) -> tuple[DrainStep, str]:
    return drain_step(
        STARTED, now, CONFIG, live_workload_pods=pods, demand_fits=demand_fits, fresh_action=fresh
    )


def test_a_pod_that_landed_cancels_the_drain_naming_it() -> None:
    result, reason = step(pods=("a", "b", "c", "d"))
    assert result is DrainStep.CANCEL
    assert "(a, b, c)" in reason
    assert "d" not in reason.split("(")[1]


def test_a_pod_that_landed_cancels_even_while_settling() -> None:
    assert step(now=STARTED + 1, pods=("a",))[0] is DrainStep.CANCEL


def test_pending_demand_that_fits_cancels_the_drain() -> None:
    assert step(demand_fits=True) == (DrainStep.CANCEL, "pending pods could use the node")
    assert step(now=STARTED, demand_fits=True)[0] is DrainStep.CANCEL


def test_a_drain_waits_while_settling() -> None:
    assert step(now=before(STARTED + CONFIG.drain_settle_s)) == (DrainStep.WAIT, "settling")
    # Settling comes before the re-check: a node not eligible any more still waits.
    assert step(now=STARTED, fresh=Action.NONE)[0] is DrainStep.WAIT


def test_a_settled_drain_still_eligible_hands_over_to_shutdown() -> None:
    assert step(now=STARTED + CONFIG.drain_settle_s)[0] is DrainStep.SHUT_DOWN
    assert step(fresh=Action.START_SHUTDOWN)[0] is DrainStep.SHUT_DOWN


def test_a_settled_drain_no_longer_eligible_is_cancelled() -> None:
    assert step(fresh=Action.NONE) == (DrainStep.CANCEL, "no longer eligible")


# --- pending demand -------------------------------------------------------------------------------


def test_fits_pending() -> None:
    nvidia = "nvidia.com/gpu"
    assert not fits_pending(4000, {nvidia: 1}, [])
    assert fits_pending(4000, {nvidia: 1}, [Demand(4000, 1, nvidia)])  # exactly what is free
    assert not fits_pending(4000, {nvidia: 1}, [Demand(4001)])
    assert not fits_pending(4000, {nvidia: 1}, [Demand(100, 2, nvidia)])
    assert fits_pending(4000, {}, [Demand(8000), Demand(100, 1, nvidia), Demand(3999)])
    assert not fits_pending(0, {}, [Demand(1), Demand(0, 1, nvidia)])


def test_a_pending_pod_fits_only_gpus_of_its_own_resource() -> None:
    """An AMD pod cannot run on an NVIDIA node, nor a MIG slice on whole GPUs: neither keeps
    that node from its drain."""
    free = {"nvidia.com/gpu": 8}
    assert not fits_pending(64_000, free, [Demand(1000, 1, "amd.com/gpu")])
    assert not fits_pending(64_000, free, [Demand(1000, 1, "nvidia.com/mig-1g.10gb")])
    assert fits_pending(64_000, free, [Demand(1000, 8, "nvidia.com/gpu")])
    assert fits_pending(64_000, free, [Demand(1000, 0, "")])  # a CPU pod fits any node


def test_a_performance_pod_holds_only_nodes_it_may_use() -> None:
    free = {"nvidia.com/gpu": 8}
    performance = Demand(1000, 1, "nvidia.com/gpu", performance=True)
    standard = Demand(1000, 1, "nvidia.com/gpu")
    assert fits_pending(64_000, free, [performance])
    assert not fits_pending(64_000, free, [performance], keeps_performance_off=True)
    assert fits_pending(64_000, free, [standard], keeps_performance_off=True)
    assert fits_pending(64_000, free, [performance, standard], keeps_performance_off=True)


@given(
    st.lists(
        st.builds(
            Demand,
            st.integers(0, 10_000),
            st.integers(0, 8),
            st.sampled_from(["", "nvidia.com/gpu", "amd.com/gpu"]),
            performance=st.just(True),
        ),
        max_size=6,
    ),
    st.integers(0, 100_000),
    st.dictionaries(st.sampled_from(["nvidia.com/gpu", "amd.com/gpu"]), st.integers(0, 8)),
)
def test_no_performance_pod_ever_holds_a_node_that_keeps_it_off(
    pending: list[Demand], cpu: int, gpus: dict[str, int]
) -> None:
    assert not fits_pending(cpu, gpus, pending, keeps_performance_off=True)


# --- properties -----------------------------------------------------------------------------------

times = st.floats(min_value=0.0, max_value=1e9, allow_nan=False)
spans = st.floats(min_value=0.0, max_value=1e5, allow_nan=False)
positive_spans = st.floats(min_value=1e-3, max_value=1e5, allow_nan=False)
maybe_times = st.none() | times


@st.composite
def configs(draw: st.DrawFn) -> LifecycleConfig:
    period = draw(st.sampled_from([0.0, 60.0, 3600.0]))
    windows: tuple[tuple[float, float], ...] = ()
    if period:
        start = draw(st.floats(min_value=0.0, max_value=period - 1, allow_nan=False))
        end = draw(st.floats(min_value=start + 1, max_value=period, allow_nan=False))
        windows = ((start, end),)
    return LifecycleConfig(
        boot_grace_s=draw(spans),
        idle_grace_s=draw(spans),
        not_ready_grace_s=draw(spans),
        heartbeat_stale_s=draw(positive_spans),
        billing_period_s=period,
        shutdown_windows=windows,
    )


facts_strategy = st.builds(
    NodeFacts,
    name=st.just("node-1"),
    launched_at=times,
    ready=st.booleans(),
    ready_changed_at=maybe_times,
    heartbeat_at=maybe_times,
    workload_pods=st.integers(0, 5),
    idle_since=maybe_times,
)


@given(facts_strategy, times, configs())
def test_derive_is_total(facts: NodeFacts, now: float, config: LifecycleConfig) -> None:
    derived = derive(facts, now, config)
    assert decide(derived, MATRIX) in set(Action)
    is_idle = derived.tuple.state is WorkerState.IDLE
    assert (derived.tuple.idle is not IdleGrace.NOT_IDLE) == is_idle
    if is_idle:
        assert derived.idle_since is not None


@given(
    times,
    st.lists(st.floats(min_value=0.0, max_value=1e4, allow_nan=False), min_size=1, max_size=30),
    configs(),
)
def test_idle_grace_once_exceeded_stays_exceeded(
    start: float, steps: list[float], config: LifecycleConfig
) -> None:
    """Observed again and again while idle (its Lease renewed), keeping ``idle_since`` as the
    controller does: idle grace never goes back from exceeded."""
    now = start
    idle_since: float | None = None
    exceeded = False
    for gap in steps:
        now += gap
        facts = node(launched_at=start, heartbeat_at=now, idle_since=idle_since)
        derived = derive(facts, now, config)
        assert derived.tuple.state is WorkerState.IDLE
        assert derived.idle_since is not None
        assert derived.idle_since <= now
        if exceeded:
            assert derived.tuple.idle is IdleGrace.EXCEEDED
        exceeded = derived.tuple.idle is IdleGrace.EXCEEDED
        idle_since = derived.idle_since


@given(facts_strategy, times, configs(), st.integers(1, 50))
def test_a_busy_node_is_never_acted_on(
    facts: NodeFacts, now: float, config: LifecycleConfig, pods: int
) -> None:
    working = replace(facts, ready=True, heartbeat_at=now, workload_pods=pods)
    derived = derive(working, now, config)
    assert derived.tuple.state is WorkerState.BUSY
    assert decide(derived, MATRIX) is Action.NONE
    # And whatever the facts, the busy state is one the default matrix leaves alone.
    any_derived = derive(facts, now, config)
    if any_derived.tuple.state is WorkerState.BUSY:
        assert decide(any_derived, MATRIX) is Action.NONE
