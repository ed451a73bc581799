"""A de-duplicating, rate-limited work queue for reconcilers, with client-go's semantics.

Informer events only say *which* key changed; the queue turns a burst of events into one
reconcile per key, keeps one key off two workers at once, and spaces out retries of failing keys.
It is pure asyncio and knows nothing about Kubernetes.

Rules a caller can rely on:

* ``add`` of a key that is already waiting is a no-op, so a key is reconciled once per burst.
* A key handed out by ``get`` is *processing* until ``done``; adding it meanwhile marks it dirty
  and it is queued again by ``done``, never handed to a second worker in parallel.
* ``get`` raises :class:`ShutDown` once the queue is shutting down and nothing is left to hand
  out. Keys queued before the shutdown are still handed out; new adds are ignored and keys still
  waiting on a delay are dropped (their owners resync on the next start anyway).

Not thread-safe: call every method from the event loop that runs the workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import math
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import structlog
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge

__all__ = [
    "MAX_TIMER_WAIT_SECONDS",
    "BucketRateLimiter",
    "Clock",
    "ItemExponentialRateLimiter",
    "MaxOfRateLimiter",
    "RateLimiter",
    "ShutDown",
    "WorkQueue",
    "default_controller_rate_limiter",
    "run_workers",
]

K = TypeVar("K", bound=Hashable)
Clock = Callable[[], float]

# Upper bound on one timer sleep: a clock that jumps (or a test clock that is advanced by hand)
# is noticed within this time, like client-go's heartbeat.
MAX_TIMER_WAIT_SECONDS = 10.0

log = structlog.get_logger("joulie.kube.workqueue")


class ShutDown(Exception):
    """Raised by :meth:`WorkQueue.get` once the queue is shutting down and empty."""


# --- rate limiters -------------------------------------------------------------------------------


class RateLimiter(Protocol):
    """Decides how long a key waits before it is retried."""

    def when(self, key: Hashable) -> float:
        """Seconds to wait before ``key`` is queued again; records one more failure."""
        ...

    def forget(self, key: Hashable) -> None:
        """Clear what is remembered about ``key`` (it succeeded)."""
        ...

    def num_requeues(self, key: Hashable) -> int:
        """How many times ``key`` has been rate-limited since it was last forgotten."""
        ...


class ItemExponentialRateLimiter:
    """Per-key backoff: ``base * 2**failures`` seconds, capped at ``max_delay_seconds``."""

    def __init__(
        self, base_delay_seconds: float = 0.005, max_delay_seconds: float = 1000.0
    ) -> None:
        if not base_delay_seconds > 0:
            raise ValueError(f"base_delay_seconds must be > 0, got {base_delay_seconds!r}")
        if not max_delay_seconds >= base_delay_seconds:
            raise ValueError(
                f"max_delay_seconds must be >= base_delay_seconds ({base_delay_seconds!r}), "
                f"got {max_delay_seconds!r}"
            )
        self.base_delay_seconds = base_delay_seconds
        self.max_delay_seconds = max_delay_seconds
        self._failures: dict[Hashable, int] = {}

    def when(self, key: Hashable) -> float:
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        # Bounding the exponent keeps 2.0**n from raising OverflowError on a key that has
        # failed for a very long time; the cap applies long before that.
        return min(self.base_delay_seconds * 2.0 ** min(failures, 1000), self.max_delay_seconds)

    def forget(self, key: Hashable) -> None:
        self._failures.pop(key, None)

    def num_requeues(self, key: Hashable) -> int:
        return self._failures.get(key, 0)


class BucketRateLimiter:
    """One token bucket for all keys: ``qps`` tokens a second, at most ``burst`` saved up.

    Protects the API server when many keys fail at once; it starts full, so the first ``burst``
    retries are not delayed by it.
    """

    def __init__(
        self, qps: float = 10.0, burst: int = 100, *, clock: Clock = time.monotonic
    ) -> None:
        if not qps > 0:
            raise ValueError(f"qps must be > 0, got {qps!r}")
        if burst < 1:
            raise ValueError(f"burst must be >= 1, got {burst!r}")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last: float | None = None

    def when(self, key: Hashable) -> float:
        now = self._clock()
        if self._last is not None:
            # A clock that steps back must not take tokens away.
            elapsed = max(now - self._last, 0.0)
            self._tokens = min(float(self.burst), self._tokens + elapsed * self.qps)
        self._last = now
        # Reserve a token even when there is none: the debt is what spaces later callers out.
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def forget(self, key: Hashable) -> None:
        """The bucket is shared, so a single key's success changes nothing."""

    def num_requeues(self, key: Hashable) -> int:
        return 0


class MaxOfRateLimiter:
    """The longest delay of several limiters (each of them records every call)."""

    def __init__(self, *limiters: RateLimiter) -> None:
        if not limiters:
            raise ValueError("MaxOfRateLimiter needs at least one limiter")
        self.limiters = limiters

    def when(self, key: Hashable) -> float:
        return max([limiter.when(key) for limiter in self.limiters])

    def forget(self, key: Hashable) -> None:
        for limiter in self.limiters:
            limiter.forget(key)

    def num_requeues(self, key: Hashable) -> int:
        return max(limiter.num_requeues(key) for limiter in self.limiters)


def default_controller_rate_limiter(
    *,
    base_delay_seconds: float = 0.005,
    max_delay_seconds: float = 1000.0,
    qps: float = 10.0,
    burst: int = 100,
    clock: Clock = time.monotonic,
) -> MaxOfRateLimiter:
    """Per-key exponential backoff combined with an overall token bucket (client-go defaults)."""
    return MaxOfRateLimiter(
        ItemExponentialRateLimiter(base_delay_seconds, max_delay_seconds),
        BucketRateLimiter(qps, burst, clock=clock),
    )


# --- metrics -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Metrics:
    depth: Gauge
    adds: Counter
    retries: Counter


# One set of metric objects per registry, shared by every queue on it (told apart by the `name`
# label): registering the same metric name twice in a registry is an error.
_METRICS: weakref.WeakKeyDictionary[CollectorRegistry, _Metrics] = weakref.WeakKeyDictionary()


def _metrics_for(registry: CollectorRegistry) -> _Metrics:
    metrics = _METRICS.get(registry)
    if metrics is None:
        metrics = _Metrics(
            depth=Gauge(
                "joulie_workqueue_depth",
                "Keys queued and waiting for a worker",
                ["name"],
                registry=registry,
            ),
            adds=Counter(
                "joulie_workqueue_adds_total",
                "Keys accepted by the queue (adds of a key already waiting are not counted)",
                ["name"],
                registry=registry,
            ),
            retries=Counter(
                "joulie_workqueue_retries_total",
                "Delayed adds: rate-limited retries and explicit add_after requeues",
                ["name"],
                registry=registry,
            ),
        )
        _METRICS[registry] = metrics
    return metrics


# --- the queue -----------------------------------------------------------------------------------


class WorkQueue(Generic[K]):
    """De-duplicating work queue with delayed and rate-limited adds.

    ``clock`` is read for delay deadlines and by the default rate limiter; the waiting itself is
    done with event-loop timers (one at a time, for the earliest deadline). ``registry=None``
    disables metrics.
    """

    def __init__(
        self,
        name: str = "default",
        *,
        rate_limiter: RateLimiter | None = None,
        clock: Clock = time.monotonic,
        registry: CollectorRegistry | None = REGISTRY,
    ) -> None:
        self.name = name
        self._clock = clock
        self._rate_limiter: RateLimiter = (
            rate_limiter
            if rate_limiter is not None
            else default_controller_rate_limiter(clock=clock)
        )
        self._queue: deque[K] = deque()
        # Keys that need processing: queued, or re-added while processing.
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._getters: deque[asyncio.Future[None]] = deque()
        self._shutting_down = False

        # Delayed adds: a heap of (deadline, sequence, key) and the live entry per key. Entries
        # replaced by an earlier deadline stay in the heap and are skipped when they surface.
        self._heap: list[tuple[float, int, K]] = []
        self._waiting: dict[K, tuple[float, int]] = {}
        self._sequence = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

        if registry is None:
            self._depth: Gauge | None = None
            self._adds: Counter | None = None
            self._retries: Counter | None = None
        else:
            metrics = _metrics_for(registry)
            self._depth = metrics.depth.labels(name=name)
            self._adds = metrics.adds.labels(name=name)
            self._retries = metrics.retries.labels(name=name)
            self._depth.set(0)

    # -- state ---------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Keys queued and ready to be handed out (not those processing or delayed)."""
        return len(self._queue)

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    # -- adding ---------------------------------------------------------------------------------

    def add(self, key: K) -> None:
        """Queue ``key`` unless it is already waiting; ignored once shutting down."""
        if self._shutting_down or key in self._dirty:
            return
        self._dirty.add(key)
        if self._adds is not None:
            self._adds.inc()
        if key in self._processing:
            return  # done() queues it again, so two workers never hold it at once
        self._push(key)

    def add_after(self, key: K, delay_seconds: float) -> None:
        """Queue ``key`` after ``delay_seconds``; if it is already waiting, the earlier wins."""
        if math.isnan(delay_seconds):
            raise ValueError("delay_seconds is NaN")
        if self._shutting_down:
            return
        if self._retries is not None:
            self._retries.inc()
        if delay_seconds <= 0:
            self.add(key)
            return
        deadline = self._clock() + delay_seconds
        current = self._waiting.get(key)
        if current is not None and current[0] <= deadline:
            return
        sequence = next(self._sequence)
        self._waiting[key] = (deadline, sequence)
        heapq.heappush(self._heap, (deadline, sequence, key))
        if len(self._heap) > 64 and len(self._heap) > 2 * len(self._waiting):
            self._compact_heap()
        self._arm_timer()

    def add_rate_limited(self, key: K) -> None:
        """Queue ``key`` after the rate limiter's delay (one more failure for it)."""
        if self._shutting_down:
            return  # don't count a failure for a retry that will never happen
        self.add_after(key, self._rate_limiter.when(key))

    def forget(self, key: K) -> None:
        """Reset ``key``'s backoff, typically after it was processed successfully."""
        self._rate_limiter.forget(key)

    def num_requeues(self, key: K) -> int:
        return self._rate_limiter.num_requeues(key)

    # -- handing out ---------------------------------------------------------------------------

    async def get(self) -> K:
        """Wait for a key and mark it processing; the caller must call :meth:`done` with it.

        Raises :class:`ShutDown` once the queue is shutting down and has nothing left.
        """
        while not self._queue:
            if self._shutting_down:
                raise ShutDown(self.name)
            getter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._getters.append(getter)
            try:
                await getter
            except asyncio.CancelledError:
                getter.cancel()
                with contextlib.suppress(ValueError):
                    self._getters.remove(getter)
                # If this getter had already been woken for a key, pass the wake-up on so the
                # key is not left sitting in the queue with a worker waiting.
                if self._queue and not getter.cancelled():
                    self._wake_one()
                raise
        key = self._queue.popleft()
        self._dirty.discard(key)
        self._processing.add(key)
        self._set_depth()
        return key

    def done(self, key: K) -> None:
        """Mark ``key`` finished; it is queued again if it was added while processing."""
        if key not in self._processing:
            return
        self._processing.discard(key)
        if key in self._dirty:
            # Accepted before any shutdown, so it is honoured even while shutting down.
            self._push(key)

    # -- stopping ------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop accepting keys and drop delayed ones; waiting getters see :class:`ShutDown`."""
        if self._shutting_down:
            return
        self._shutting_down = True
        self._cancel_timer()
        self._heap.clear()
        self._waiting.clear()
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_result(None)

    # -- internals -----------------------------------------------------------------------------

    def _push(self, key: K) -> None:
        self._queue.append(key)
        self._set_depth()
        self._wake_one()

    def _wake_one(self) -> None:
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_result(None)
                return

    def _set_depth(self) -> None:
        if self._depth is not None:
            self._depth.set(len(self._queue))

    def _arm_timer(self) -> None:
        """Make sure one timer fires no later than the earliest deadline."""
        if not self._heap:
            self._cancel_timer()
            return
        next_at = self._heap[0][0]
        if self._timer is not None and self._timer_at <= next_at:
            return
        self._cancel_timer()
        now = self._clock()
        wait = min(max(next_at - now, 0.0), MAX_TIMER_WAIT_SECONDS)
        self._timer_at = now + wait
        self._timer = asyncio.get_running_loop().call_later(wait, self._on_timer)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._timer_at = math.inf

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = math.inf
        now = self._clock()
        while self._heap and self._heap[0][0] <= now:
            deadline, sequence, key = heapq.heappop(self._heap)
            if self._waiting.get(key) == (deadline, sequence):
                del self._waiting[key]
                self.add(key)
        # Also re-arms after an early wake-up (timer resolution, or a heartbeat sleep).
        self._arm_timer()

    def _compact_heap(self) -> None:
        self._heap = [(at, seq, key) for key, (at, seq) in self._waiting.items()]
        heapq.heapify(self._heap)


# --- workers -------------------------------------------------------------------------------------


async def run_workers(
    queue: WorkQueue[K],
    handler: Callable[[K], Awaitable[object]],
    workers: int,
    stopping: asyncio.Event,
) -> None:
    """Run ``workers`` tasks that feed keys from ``queue`` to ``handler`` until ``stopping``.

    A handler exception is logged and the key is retried with the queue's rate limiter; a
    success forgets the key's backoff. When ``stopping`` is set the queue is shut down,
    handlers already running finish, and keys still queued are left alone: the work is
    level-triggered, so the next process (or leader) resyncs them. Returns once every worker
    has stopped; cancelling it cancels the workers.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers!r}")

    async def work() -> None:
        while True:
            try:
                key = await queue.get()
            except ShutDown:
                return
            try:
                if stopping.is_set():
                    return
                await handler(key)
            except Exception:
                queue.add_rate_limited(key)
                log.warning(
                    "handler failed, key requeued with backoff",
                    queue=queue.name,
                    key=key,
                    requeues=queue.num_requeues(key),
                    exc_info=True,
                )
            else:
                queue.forget(key)
            finally:
                queue.done(key)

    async def shut_down_when_stopping() -> None:
        await stopping.wait()
        queue.shutdown()

    tasks = [
        asyncio.create_task(work(), name=f"workqueue-{queue.name}-{index}")
        for index in range(workers)
    ]
    watcher = asyncio.create_task(shut_down_when_stopping())
    try:
        await asyncio.gather(*tasks)
    finally:
        watcher.cancel()
        for task in tasks:
            task.cancel()
        await asyncio.gather(watcher, *tasks, return_exceptions=True)
