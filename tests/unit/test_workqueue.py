"""The reconcile work queue: de-duplication, one worker per key, backoff, delays and shutdown."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest
from prometheus_client import CollectorRegistry

from joulie.kube.workqueue import (
    BucketRateLimiter,
    ItemExponentialRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    ShutDown,
    WorkQueue,
    default_controller_rate_limiter,
    run_workers,
)
from tests.support.waiting import eventually

# Timer slack for "arrives promptly" checks; lower bounds are exact.
SLACK = 0.5


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_queue(rate_limiter: RateLimiter | None = None) -> WorkQueue[str]:
    return WorkQueue("test", rate_limiter=rate_limiter, registry=None)


async def get_soon(queue: WorkQueue[str], timeout: float = SLACK) -> str:
    return await asyncio.wait_for(queue.get(), timeout)


async def delay_has_passed(delay: float) -> None:
    """For "nothing arrives" checks on a shut-down queue, which can take no later key to show
    that time has passed: a twin queue that is not shut down delivers a key added with the same
    delay, after the delay the checked queue was given (timers fire in deadline order)."""
    control = make_queue()
    control.add_after("control", delay)
    assert await get_soon(control, delay + SLACK) == "control"


async def assert_nothing_to_get(queue: WorkQueue[str], within: float = 0.05) -> None:
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(queue.get(), within)


# --- de-duplication and processing --------------------------------------------------------------


@pytest.mark.asyncio
async def test_key_added_twice_while_queued_is_handed_out_once() -> None:
    queue = make_queue()
    queue.add("node-a")
    queue.add("node-b")
    queue.add("node-a")
    assert len(queue) == 2
    assert await get_soon(queue) == "node-a"
    assert await get_soon(queue) == "node-b"
    await assert_nothing_to_get(queue)


@pytest.mark.asyncio
async def test_tuple_keys_are_deduplicated_too() -> None:
    queue: WorkQueue[tuple[str, str]] = WorkQueue("tuples", registry=None)
    queue.add(("ns", "pod"))
    queue.add(("ns", "pod"))
    assert len(queue) == 1
    assert await asyncio.wait_for(queue.get(), SLACK) == ("ns", "pod")


@pytest.mark.asyncio
async def test_key_added_while_processing_waits_for_done() -> None:
    queue = make_queue()
    queue.add("node-a")
    key = await get_soon(queue)
    queue.add("node-a")
    queue.add("node-a")
    assert len(queue) == 0, "a processing key must not be queued for a second worker"
    await assert_nothing_to_get(queue)
    queue.done(key)
    assert len(queue) == 1
    assert await get_soon(queue) == "node-a"
    queue.done("node-a")
    await assert_nothing_to_get(queue)


@pytest.mark.asyncio
async def test_done_without_readd_does_not_requeue() -> None:
    queue = make_queue()
    queue.add("node-a")
    queue.done(await get_soon(queue))
    assert len(queue) == 0
    await assert_nothing_to_get(queue)


@pytest.mark.asyncio
async def test_several_workers_never_process_one_key_at_once() -> None:
    queue = make_queue()
    in_flight: set[str] = set()
    overlaps: list[str] = []
    calls: dict[str, int] = {}
    most_parallel = 0

    async def handler(key: str) -> None:
        nonlocal most_parallel
        if key in in_flight:
            overlaps.append(key)
        in_flight.add(key)
        most_parallel = max(most_parallel, len(in_flight))
        calls[key] = calls.get(key, 0) + 1
        if key == "hot" and calls[key] == 1:
            # Events for the key arrive while it is being reconciled.
            for _ in range(3):
                queue.add("hot")
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.02)
        in_flight.discard(key)

    for key in ("hot", "b", "c", "d"):
        queue.add(key)
    stopping = asyncio.Event()
    workers = asyncio.create_task(run_workers(queue, handler, 4, stopping))
    await eventually(
        lambda: calls.get("hot", 0) == 2 and not in_flight, 2, "the re-added key to be handled"
    )
    stopping.set()
    await asyncio.wait_for(workers, SLACK)

    assert overlaps == []
    assert calls == {"hot": 2, "b": 1, "c": 1, "d": 1}
    assert most_parallel >= 2, "workers should have run different keys in parallel"


@pytest.mark.asyncio
async def test_cancelled_get_does_not_swallow_a_key() -> None:
    queue = make_queue()
    waiting = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    queue.add("node-a")
    assert await get_soon(queue) == "node-a"


@pytest.mark.asyncio
async def test_key_reaches_another_worker_when_the_woken_one_is_cancelled() -> None:
    queue = make_queue()
    first = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    second = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    queue.add("node-a")  # wakes the first waiter ...
    first.cancel()  # ... which is cancelled before it can take the key
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await asyncio.wait_for(second, SLACK) == "node-a"


# --- rate limiters ------------------------------------------------------------------------------


def test_item_backoff_doubles_from_5ms_and_caps_at_1000s() -> None:
    limiter = ItemExponentialRateLimiter()
    delays = [limiter.when("node-a") for _ in range(20)]
    assert delays[:4] == pytest.approx([0.005, 0.01, 0.02, 0.04])
    assert delays[17] == pytest.approx(655.36)
    assert delays[18:] == [1000.0, 1000.0]
    assert limiter.num_requeues("node-a") == 20
    # Backoff is per key: another key starts from the base.
    assert limiter.when("node-b") == pytest.approx(0.005)


def test_item_backoff_survives_very_many_failures() -> None:
    limiter = ItemExponentialRateLimiter(base_delay_seconds=1.0, max_delay_seconds=60.0)
    for _ in range(2000):
        delay = limiter.when("stuck")
    assert delay == 60.0


def test_forget_resets_backoff() -> None:
    limiter = ItemExponentialRateLimiter()
    for _ in range(5):
        limiter.when("node-a")
    limiter.forget("node-a")
    assert limiter.num_requeues("node-a") == 0
    assert limiter.when("node-a") == pytest.approx(0.005)


def test_token_bucket_lets_the_burst_through_then_spaces_retries() -> None:
    clock = FakeClock()
    bucket = BucketRateLimiter(qps=10, burst=100, clock=clock)
    assert [bucket.when(f"node-{i}") for i in range(100)] == [0.0] * 100
    assert bucket.when("node-100") == pytest.approx(0.1)
    assert bucket.when("node-101") == pytest.approx(0.2)
    # Tokens refill with time: 0.25 s pays the 0.2 token debt and earns half a token more.
    clock.now += 0.25
    assert bucket.when("node-102") == pytest.approx(0.05)
    clock.now += 100
    assert bucket.when("node-103") == 0.0


def test_default_limiter_takes_the_larger_of_backoff_and_bucket() -> None:
    clock = FakeClock()
    limiter = default_controller_rate_limiter(clock=clock)
    # Within the burst the per-key backoff decides.
    assert [limiter.when("node-a") for _ in range(5)] == pytest.approx(
        [0.005, 0.01, 0.02, 0.04, 0.08]
    )
    assert [limiter.when(f"other-{i}") for i in range(95)] == pytest.approx([0.005] * 95)
    # Burst spent: the 101st retry owes one token (0.1 s) but node-a's backoff is longer.
    assert limiter.when("node-a") == pytest.approx(0.16)
    # A fresh key would wait 5 ms by backoff, but the shared bucket now asks 0.2 s.
    assert limiter.when("node-b") == pytest.approx(0.2)
    assert limiter.num_requeues("node-a") == 6
    limiter.forget("node-a")
    assert limiter.num_requeues("node-a") == 0


@pytest.mark.parametrize(
    "make",
    [
        lambda: ItemExponentialRateLimiter(base_delay_seconds=0),
        lambda: ItemExponentialRateLimiter(base_delay_seconds=1, max_delay_seconds=0.5),
        lambda: BucketRateLimiter(qps=0),
        lambda: BucketRateLimiter(burst=0),
        lambda: MaxOfRateLimiter(),
    ],
)
def test_invalid_limiter_settings_are_refused(make: object) -> None:
    with pytest.raises(ValueError, match=r"must|needs"):
        make()  # type: ignore[operator]


@pytest.mark.asyncio
async def test_rate_limited_adds_arrive_after_a_growing_backoff() -> None:
    queue = make_queue(rate_limiter=ItemExponentialRateLimiter(base_delay_seconds=0.05))
    start = time.monotonic()
    queue.add_rate_limited("node-a")
    assert len(queue) == 0
    queue.done(await get_soon(queue))
    first = time.monotonic() - start
    assert first >= 0.05

    start = time.monotonic()
    queue.add_rate_limited("node-a")
    queue.done(await get_soon(queue))
    second = time.monotonic() - start
    assert second >= 0.1
    assert queue.num_requeues("node-a") == 2

    queue.forget("node-a")
    assert queue.num_requeues("node-a") == 0
    start = time.monotonic()
    queue.add_rate_limited("node-a")
    assert queue.num_requeues("node-a") == 1
    await get_soon(queue)
    assert time.monotonic() - start >= 0.05, "after forget the backoff starts from the base"


@pytest.mark.asyncio
async def test_queue_bucket_delays_retries_beyond_the_burst() -> None:
    limiter = MaxOfRateLimiter(
        ItemExponentialRateLimiter(base_delay_seconds=0.001),
        BucketRateLimiter(qps=5, burst=2),
    )
    queue = make_queue(rate_limiter=limiter)
    start = time.monotonic()
    for key in ("a", "b", "c"):
        queue.add_rate_limited(key)
    got = {await get_soon(queue), await get_soon(queue)}
    assert got == {"a", "b"}
    assert time.monotonic() - start < 0.15, "the burst should not be held back"
    assert await get_soon(queue) == "c"
    assert time.monotonic() - start >= 0.2, "one token owed at 5/s"


# --- delayed adds --------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_delayed_keys_arrive_in_deadline_order() -> None:
    queue = make_queue()
    start = time.monotonic()
    queue.add_after("late", 0.09)
    queue.add_after("early", 0.03)
    queue.add_after("middle", 0.06)
    queue.add_after("now", 0)
    assert len(queue) == 1
    order = [await get_soon(queue) for _ in range(4)]
    assert order == ["now", "early", "middle", "late"]
    assert time.monotonic() - start >= 0.09


@pytest.mark.asyncio
async def test_earlier_deadline_wins_and_the_later_one_does_not_fire() -> None:
    queue = make_queue()
    start = time.monotonic()
    queue.add_after("node-a", 0.3)
    queue.add_after("node-a", 0.02)
    queue.add_after("node-b", 0.02)
    queue.add_after("node-b", 0.3)  # later than the one waiting: ignored
    got = {await get_soon(queue, 0.2), await get_soon(queue, 0.2)}
    assert got == {"node-a", "node-b"}
    assert time.monotonic() - start < 0.2
    queue.done("node-a")
    queue.done("node-b")
    # The replaced 0.3 s deadline must not deliver the key a second time. Delayed keys arrive in
    # deadline order, so a key due at 0.35 s arriving first shows that 0.3 s passed without it.
    queue.add_after("sentinel", 0.35 - (time.monotonic() - start))
    assert await get_soon(queue, 0.35 + SLACK) == "sentinel"
    assert len(queue) == 0


@pytest.mark.asyncio
async def test_delayed_key_while_queued_is_not_duplicated() -> None:
    queue = make_queue()
    queue.add("node-a")
    queue.add_after("node-a", 0.01)
    # A key due later shows that the delayed add has fired, and was absorbed by the queued one.
    queue.add_after("sentinel", 0.02)
    await eventually(lambda: len(queue) >= 2, SLACK, "the sentinel to be queued")
    assert [await get_soon(queue), await get_soon(queue)] == ["node-a", "sentinel"]
    assert len(queue) == 0


@pytest.mark.asyncio
async def test_nan_delay_is_refused() -> None:
    queue = make_queue()
    with pytest.raises(ValueError, match="NaN"):
        queue.add_after("node-a", float("nan"))


# --- shutdown ------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_get_raises_shutdown_once_shut_down_and_empty() -> None:
    queue = make_queue()
    waiting = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    queue.shutdown()
    assert queue.shutting_down
    with pytest.raises(ShutDown):
        await asyncio.wait_for(waiting, SLACK)
    with pytest.raises(ShutDown):
        await get_soon(queue)


@pytest.mark.asyncio
async def test_keys_queued_before_shutdown_are_still_handed_out() -> None:
    queue = make_queue()
    queue.add("node-a")
    queue.shutdown()
    assert await get_soon(queue) == "node-a"
    with pytest.raises(ShutDown):
        await get_soon(queue)


@pytest.mark.asyncio
async def test_adds_after_shutdown_are_ignored() -> None:
    queue = make_queue()
    queue.shutdown()
    queue.add("node-a")
    queue.add_after("node-b", 0.01)
    queue.add_rate_limited("node-c")
    await delay_has_passed(0.01)
    assert len(queue) == 0
    assert queue.num_requeues("node-c") == 0
    with pytest.raises(ShutDown):
        await get_soon(queue)


@pytest.mark.asyncio
async def test_shutdown_drops_keys_still_waiting_on_a_delay() -> None:
    queue = make_queue()
    queue.add_after("node-a", 0.02)
    queue.shutdown()
    await delay_has_passed(0.02)
    with pytest.raises(ShutDown):
        await get_soon(queue)


# --- run_workers ---------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_failing_key_is_retried_with_backoff_then_forgotten() -> None:
    queue = make_queue(rate_limiter=ItemExponentialRateLimiter(base_delay_seconds=0.02))
    attempts: list[float] = []
    succeeded = asyncio.Event()

    async def handler(key: str) -> None:
        attempts.append(time.monotonic())
        if len(attempts) <= 3:
            raise RuntimeError("API server said no")
        succeeded.set()

    stopping = asyncio.Event()
    queue.add("node-a")
    workers = asyncio.create_task(run_workers(queue, handler, 2, stopping))
    await asyncio.wait_for(succeeded.wait(), 2)
    await asyncio.sleep(0)
    stopping.set()
    await asyncio.wait_for(workers, SLACK)

    assert len(attempts) == 4
    gaps = [later - earlier for earlier, later in itertools.pairwise(attempts)]
    assert gaps[0] >= 0.02
    assert gaps[1] >= 0.04
    assert gaps[2] >= 0.08
    assert queue.num_requeues("node-a") == 0, "success should reset the backoff"


@pytest.mark.asyncio
async def test_stopping_lets_running_handlers_finish_and_leaves_the_backlog() -> None:
    queue = make_queue()
    started = asyncio.Event()
    release = asyncio.Event()
    finished: list[str] = []

    async def handler(key: str) -> None:
        started.set()
        await release.wait()
        finished.append(key)

    for key in ("a", "b", "c"):
        queue.add(key)
    stopping = asyncio.Event()
    workers = asyncio.create_task(run_workers(queue, handler, 1, stopping))
    await asyncio.wait_for(started.wait(), SLACK)
    stopping.set()
    # The workers have taken the stop (the queue shuts down) while the handler still runs.
    await eventually(lambda: queue.shutting_down, SLACK, "the queue to shut down")
    assert not workers.done()
    release.set()
    await asyncio.wait_for(workers, SLACK)
    assert finished == ["a"]
    assert queue.shutting_down


@pytest.mark.asyncio
async def test_workers_stop_when_the_queue_is_shut_down() -> None:
    queue = make_queue()

    handled = asyncio.Event()

    async def handler(key: str) -> None:
        handled.set()

    workers = asyncio.create_task(run_workers(queue, handler, 3, asyncio.Event()))
    queue.add("node-a")
    await asyncio.wait_for(handled.wait(), SLACK)  # the workers are up, waiting on the queue
    queue.shutdown()
    await asyncio.wait_for(workers, SLACK)


@pytest.mark.asyncio
async def test_run_workers_refuses_zero_workers() -> None:
    async def handler(key: str) -> None:
        return None

    with pytest.raises(ValueError, match="workers"):
        await run_workers(make_queue(), handler, 0, asyncio.Event())


# --- metrics -------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_metrics_count_adds_depth_and_retries_per_queue() -> None:
    registry = CollectorRegistry()
    nodes: WorkQueue[str] = WorkQueue("nodes", registry=registry)
    pods: WorkQueue[str] = WorkQueue("pods", registry=registry)

    def sample(metric: str, name: str) -> float | None:
        return registry.get_sample_value(metric, {"name": name})

    nodes.add("a")
    nodes.add("b")
    nodes.add("a")  # de-duplicated: not counted
    pods.add("p")
    assert sample("joulie_workqueue_adds_total", "nodes") == 2
    assert sample("joulie_workqueue_depth", "nodes") == 2
    assert sample("joulie_workqueue_adds_total", "pods") == 1

    key = await asyncio.wait_for(nodes.get(), SLACK)
    assert sample("joulie_workqueue_depth", "nodes") == 1
    nodes.add_rate_limited(key)
    nodes.done(key)
    assert sample("joulie_workqueue_retries_total", "nodes") == 1
    assert sample("joulie_workqueue_retries_total", "pods") == 0
