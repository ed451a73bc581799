"""Leader election on a coordination.k8s.io/v1 Lease, following client-go's rules.

One process at a time holds the Lease and may write; the others wait, ready to take over.

How it decides, and why:

- Expiry is judged on this process's own monotonic clock: a Lease held by someone else counts as
  expired once its record (spec) has stayed unchanged for ``leaseDurationSeconds`` since *we*
  first saw it in that state. The ``renewTime`` another machine wrote is never compared with our
  wall clock, so clock skew between nodes cannot make two leaders.
- Every write is a PUT carrying the resourceVersion that was read (optimistic concurrency): when
  two candidates race, the API server accepts one and answers 409 to the other.
- The leader renews every retry period. If no renewal succeeds within the renew deadline,
  counted from the moment the last successful write was *sent*, it steps down. The deadline is
  shorter than the lease duration, and followers count the lease duration from a moment after
  that write, so the old leader has stopped before anyone else may start. A renewal that finds
  another holder in a still-valid record steps down at once (client-go would keep trying until
  the deadline, but the outcome is already certain).
- On graceful shutdown the leader first stops its own work, which still counts as leading while
  it stops (the Lease is held and the renew deadline fences its writes as ever), so the work can
  hand over what it holds, then releases the Lease (client-go's ReleaseOnCancel): it writes an
  empty ``holderIdentity``, which candidates treat as free at once, together with
  ``leaseDurationSeconds: 1``, so that a client that only checks expiry still takes over about a
  second later. ``leaseTransitions`` is left unchanged; the next
  holder increments it. If the work does not stop in time, the Lease is *not* released and simply
  expires, because a successor must never overlap with a writer that is still running.
- Followers poll every retry period with client-go's jitter (2 to 4.4 s by default) and, in
  addition, watch the Lease. The watch changes no decision; it only makes a follower look again
  the moment the Lease is released or deleted, and it dates observations precisely, so that a
  takeover after a crash comes ``leaseDurationSeconds`` after the last renewal rather than up to
  two poll periods later. If the watch fails, polling alone still works.

The elector is also a runtime Role (``name``, ``run``, ``is_ready``): it is ready once it knows
whether it leads or follows, since a follower is healthy, it just does not write.
"""

from __future__ import annotations

import asyncio
import inspect
import random
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog
from prometheus_client import Gauge

from joulie.kube.client import ApiError

LEADER = Gauge(
    "joulie_leader",
    "1 while this process holds the leader-election Lease, else 0",
    ["lease"],
)

StartedCallback = Callable[[], Awaitable[None] | None]
StoppedCallback = Callable[[], Awaitable[None] | None]
NewLeaderCallback = Callable[[str], Awaitable[None] | None]


class LeaseClient(Protocol):
    """The part of ``KubeClient`` the elector uses (a fault-injecting wrapper fits too)."""

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        timeout: float = 30.0,
    ) -> Any: ...

    def watch(
        self, path: str, *, params: Mapping[str, Any], idle_timeout: float
    ) -> AsyncIterator[dict[str, Any]]: ...


def default_identity() -> str:
    """Host name plus a random suffix: unique even when a pod restarts under the same name."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


@dataclass(frozen=True)
class LeaderElectionConfig:
    """Which Lease, who we are, and the timings (client-go's defaults: 15 s / 10 s / 2 s)."""

    namespace: str
    name: str
    identity: str = field(default_factory=default_identity)
    lease_duration: float = 15.0
    """How long a record must stay unchanged before others may take the Lease; whole seconds,
    because the Lease stores it as an integer."""
    renew_deadline: float = 10.0
    """How long the leader keeps trying to renew before it gives up leadership."""
    retry_period: float = 2.0
    """Time between renewals, and the base interval of a follower's polling."""
    jitter_factor: float = 1.2
    """A follower waits ``retry_period * (1 + U[0, jitter_factor))`` between polls."""
    release_on_cancel: bool = True
    """Release the Lease on graceful shutdown so a follower takes over without waiting."""
    release_timeout: float = 5.0
    """Bound on each shutdown step: the leader's work stopping, on_stopped_leading, the release."""
    watch: bool = True
    """Followers also watch the Lease, to notice a release at once (polling stays the floor)."""
    field_manager: str = "joulie-leader-election"

    def __post_init__(self) -> None:
        problems = []
        if not self.namespace or not self.name:
            problems.append("namespace and name of the Lease are required")
        if not self.identity:
            problems.append("identity must not be empty")
        if self.lease_duration < 1 or self.lease_duration != int(self.lease_duration):
            problems.append(f"lease_duration={self.lease_duration} must be whole seconds >= 1")
        if self.retry_period <= 0 or self.renew_deadline <= 0 or self.release_timeout <= 0:
            problems.append("retry_period, renew_deadline and release_timeout must be positive")
        if self.jitter_factor < 0:
            problems.append(f"jitter_factor={self.jitter_factor} must not be negative")
        if self.lease_duration <= self.renew_deadline:
            problems.append(
                f"lease_duration={self.lease_duration} must exceed "
                f"renew_deadline={self.renew_deadline}"
            )
        if self.renew_deadline <= self.jitter_factor * self.retry_period:
            problems.append(
                f"renew_deadline={self.renew_deadline} must exceed jitter_factor * retry_period"
                f" = {self.jitter_factor * self.retry_period:g}"
            )
        if problems:
            raise ValueError("invalid leader election settings: " + "; ".join(problems))

    @property
    def lease_key(self) -> str:
        return f"{self.namespace}/{self.name}"


class LeaderElector:
    """Campaigns for one Lease until ``stopping`` is set; see the module docstring for the rules.

    Writers guard each write with ``is_leader``, which turns False as soon as the renew deadline
    has passed, even before the renew loop has noticed (a stalled event loop, for instance).

    ``on_started_leading`` is called when leadership begins; if it returns an awaitable, that runs
    as a task for as long as leadership lasts and is cancelled (and awaited, within
    ``release_timeout``) when it ends. ``on_stopped_leading`` is called after that, and only if
    this process did lead. ``on_new_leader`` gets the holder's identity whenever the observed
    holder changes ("" once a Lease has been released).
    """

    def __init__(
        self,
        client: LeaseClient,
        config: LeaderElectionConfig,
        *,
        on_started_leading: StartedCallback | None = None,
        on_stopped_leading: StoppedCallback | None = None,
        on_new_leader: NewLeaderCallback | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        rng: random.Random | None = None,
        name: str = "leader-election",
    ) -> None:
        self.name = name
        self.config = config
        self._client = client
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._on_new_leader = on_new_leader
        self._clock = clock
        self._wall_clock = wall_clock
        self._rng = rng or random.Random()
        self._collection = f"/apis/coordination.k8s.io/v1/namespaces/{config.namespace}/leases"
        self._path = f"{self._collection}/{config.name}"
        self._log = structlog.get_logger("joulie.leader").bind(
            lease=config.lease_key, identity=config.identity
        )
        self._gauge = LEADER.labels(config.lease_key)
        self._gauge.set(0)

        # What we last saw: the whole object (its resourceVersion is the base of the next write)
        # and, separately, its spec with the monotonic time at which the spec last changed.
        self._lease: dict[str, Any] | None = None
        self._record: dict[str, Any] | None = None
        self._observed_at = 0.0
        self._holder: str | None = None

        self._leading = False
        self._renewed_at = 0.0
        self._wake = asyncio.Event()
        self._ready = False
        self._failing = False
        self._work: asyncio.Task[Any] | None = None
        self._background: set[asyncio.Task[Any]] = set()

    # --- what others read ----------------------------------------------------------------

    @property
    def identity(self) -> str:
        return self.config.identity

    @property
    def is_leader(self) -> bool:
        """True while we lead and our last renewal is younger than the renew deadline."""
        return self._leading and self._clock() < self._renewed_at + self.config.renew_deadline

    @property
    def holder(self) -> str | None:
        """The holder identity in the record we last saw ("" when released, None if unknown)."""
        return self._holder

    def is_ready(self) -> bool:
        """Ready once the elector knows whether it leads or follows."""
        return self._ready

    def status(self) -> str:
        """What ``/readyz`` shows beside readiness: who leads."""
        if self.is_leader:
            return "leader"
        if not self._ready:
            return "electing"
        return f"follower, leader {self._holder or '(none)'}"

    # --- the campaign --------------------------------------------------------------------

    async def run(self, stopping: asyncio.Event) -> None:
        """Follow or lead until ``stopping`` is set; then stop leading and release the Lease."""
        watcher: asyncio.Task[None] | None = None
        try:
            while not stopping.is_set():
                if self.config.watch and watcher is None:
                    watcher = asyncio.create_task(self._watch(), name=f"{self.name}-watch")
                if not await self._acquire(stopping):
                    break
                # A leader learns everything it needs from its own writes.
                if watcher is not None:
                    watcher.cancel()
                    await asyncio.gather(watcher, return_exceptions=True)
                    watcher = None
                self._start_leading()
                reason = await self._lead(stopping)
                await self._stop_leading(
                    reason, release=stopping.is_set() and self.config.release_on_cancel
                )
        finally:
            if watcher is not None:
                watcher.cancel()
            if self._leading:
                # Cancelled from outside while leading: no time to release, but stop the work
                # and say we no longer lead.
                self._leading = False
                if self._work is not None:
                    self._work.cancel()
                    self._work = None
            self._gauge.set(0)
            self._ready = False

    async def _acquire(self, stopping: asyncio.Event) -> bool:
        """Try until we hold the Lease (True) or ``stopping`` is set (False)."""
        attempt = True
        next_poll = 0.0
        while not stopping.is_set():
            if attempt:
                if await self._attempt(stopping, self.config.renew_deadline):
                    return True
                next_poll = self._clock() + self._jittered_retry()
            now = self._clock()
            wake_at = next_poll
            expiry = self._expires_at()
            # Look again right when the observed record expires, not at the next poll after it;
            # an expiry already past was just tried and waits for the regular poll.
            if expiry is not None and now < expiry < wake_at:
                wake_at = expiry
            await _wait_any(wake_at - now, stopping, self._wake)
            self._wake.clear()
            attempt = self._clock() >= next_poll or self._acquirable()
        return False

    async def _lead(self, stopping: asyncio.Event) -> str:
        """Renew every retry period until leadership is lost or ``stopping`` is set; say why."""
        while True:
            if await _wait_any(self.config.retry_period, stopping):
                return "shutdown"
            outcome = await self._renew(stopping)
            if outcome is not None:
                return outcome

    async def _renew(self, stopping: asyncio.Event) -> str | None:
        """One renewal round: None once renewed, else the reason leadership ended."""
        while True:
            remaining = self._renewed_at + self.config.renew_deadline - self._clock()
            if remaining <= 0:
                return "renew deadline exceeded"
            renewed = await self._attempt(stopping, remaining)
            if stopping.is_set():
                return "shutdown"
            if renewed:
                return None
            if self._held_by_other():
                return "lease taken by another holder"
            remaining = self._renewed_at + self.config.renew_deadline - self._clock()
            if await _wait_any(min(self.config.retry_period, max(remaining, 0)), stopping):
                return "shutdown"

    async def _attempt(self, stopping: asyncio.Event, timeout: float) -> bool:
        """One tryAcquireOrRenew, bounded by ``timeout`` and cut short by ``stopping``."""
        task = asyncio.create_task(self._try_acquire_or_renew())
        stop = asyncio.create_task(stopping.wait())
        try:
            await asyncio.wait({task, stop}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not task.done():
                # Not awaited: a cancelled request may still have reached the server, which the
                # next attempt learns from a 409 and a fresh read.
                task.cancel()
        if task.cancelled() or not task.done():
            if not stopping.is_set():
                self._note_failure(TimeoutError(f"no answer within {timeout:.1f}s"))
            return False
        exc = task.exception()
        if exc is not None:
            self._note_failure(exc)
            return False
        if self._failing:
            self._failing = False
            self._log.info("lease requests succeed again")
        return task.result()

    async def _try_acquire_or_renew(self) -> bool:
        sent = self._clock()
        if self._leading and self._lease is not None:
            # Fast path: a leader writes on top of its own last write without reading first.
            try:
                lease = await self._put(self._claimed(self._lease, renew=True))
            except Exception as exc:
                self._log.debug("optimistic renewal failed, reading the lease", error=str(exc))
            else:
                self._observe(lease)
                self._renewed_at = sent
                return True
        try:
            lease = await self._get()
        except ApiError as exc:
            if not exc.not_found:
                raise
            return await self._create(sent)
        self._observe(lease)
        holder = _holder_of(lease)
        if holder and holder != self.identity and not self._expired():
            return False
        try:
            lease = await self._put(self._claimed(lease, renew=holder == self.identity))
        except ApiError as exc:
            if exc.conflict:  # someone else wrote first
                return False
            raise
        self._observe(lease)
        self._renewed_at = sent
        return True

    async def _create(self, sent: float) -> bool:
        now = _micro_time(self._wall_clock())
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.config.name, "namespace": self.config.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.config.lease_duration),
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }
        try:
            lease = _object(
                await self._client.request(
                    "POST",
                    self._collection,
                    params={"fieldManager": self.config.field_manager},
                    body=body,
                    timeout=self.config.renew_deadline,
                )
            )
        except ApiError as exc:
            if exc.conflict:  # created by another candidate a moment ago
                return False
            raise
        self._observe(lease)
        self._renewed_at = sent
        return True

    # --- transitions ---------------------------------------------------------------------

    def _start_leading(self) -> None:
        self._leading = True
        self._gauge.set(1)
        self._log.info("became leader", transitions=(self._record or {}).get("leaseTransitions", 0))
        if self._on_started is None:
            return
        try:
            result = self._on_started()
        except Exception:
            self._log.exception("on_started_leading failed")
            return
        if inspect.isawaitable(result):
            self._work = asyncio.ensure_future(result)
            self._work.add_done_callback(self._work_ended)

    def _work_ended(self, task: asyncio.Future[Any]) -> None:
        if not task.cancelled() and (exc := task.exception()) is not None:
            self._log.error("leader work failed", exc_info=exc)

    async def _stop_leading(self, reason: str, *, release: bool) -> None:
        if reason == "shutdown":
            # The Lease is still ours: the work's own last writes (what it must hand over, such
            # as totals counted since its last write) may go out while it stops, fenced by the
            # renew deadline as every write is. Lost leadership stops writes at once.
            self._log.info("stopping leadership for shutdown")
        else:
            self._leading = False
            self._gauge.set(0)
            self._log.warning("leadership lost", reason=reason, holder=self._holder)
        work_stopped = await self._stop_work()
        self._leading = False
        self._gauge.set(0)
        await self._call("on_stopped_leading", self._on_stopped)
        if not release:
            return
        if not work_stopped:
            self._log.error(
                "leader work did not stop in time; not releasing the lease, it will expire",
                timeout_s=self.config.release_timeout,
            )
            return
        await self._release()

    async def _stop_work(self) -> bool:
        """Cancel the leader's work and wait for it (bounded); True once it has stopped."""
        work, self._work = self._work, None
        if work is None or work.done():
            return True
        work.cancel()
        done, _ = await asyncio.wait({work}, timeout=self.config.release_timeout)
        return bool(done)

    async def _release(self) -> None:
        """Hand the Lease back: empty holder, 1 s duration, renewTime now (see module doc)."""
        if self._lease is None or _holder_of(self._lease) != self.identity:
            return
        try:
            async with asyncio.timeout(self.config.release_timeout):
                try:
                    lease = await self._put(self._released(self._lease))
                except ApiError as exc:
                    if not exc.conflict:
                        raise
                    # Our cached version is stale (a cancelled renewal may have landed); release
                    # only if the fresh record still names us.
                    current = await self._get()
                    if _holder_of(current) != self.identity:
                        self._observe(current)
                        self._log.info("lease already held by another, nothing to release")
                        return
                    lease = await self._put(self._released(current))
        except Exception as exc:
            self._log.warning("could not release the lease; it will expire", error=repr(exc))
            return
        self._holder = ""  # our own release is not news: no "leader observed" line for it
        self._observe(lease)
        self._log.info("released lease")

    async def _call(self, what: str, callback: StoppedCallback | None) -> None:
        if callback is None:
            return
        try:
            result = callback()
            if inspect.isawaitable(result):
                async with asyncio.timeout(self.config.release_timeout):
                    await result
        except Exception:
            self._log.exception(f"{what} failed")

    def _note_failure(self, exc: BaseException) -> None:
        # One line when requests start failing, not one per retry.
        if not self._failing:
            self._failing = True
            self._log.warning("lease request failed", error=repr(exc), leading=self._leading)

    # --- observations --------------------------------------------------------------------

    def _observe(self, lease: dict[str, Any]) -> bool:
        """Remember ``lease``; True when its record differs from the last one we saw."""
        if self._lease is not None and _older(lease, self._lease):
            return False  # a watch event that arrives after a newer read
        self._lease = lease
        self._ready = True
        spec = dict(lease.get("spec") or {})
        if spec == self._record:
            return False
        self._record = spec
        self._observed_at = self._clock()
        self._set_holder(_holder_of(lease))
        return True

    def _forget(self, lease: dict[str, Any]) -> bool:
        """The Lease was deleted: nothing to respect any more."""
        if self._lease is not None and _older(lease, self._lease):
            return False
        self._lease = None
        self._record = None
        self._set_holder("")
        return True

    def _set_holder(self, holder: str) -> None:
        if holder == self._holder:
            return
        self._holder = holder
        if holder != self.identity:
            self._log.info("leader observed", holder=holder or None)
        if self._on_new_leader is None:
            return
        try:
            result = self._on_new_leader(holder)
        except Exception:
            self._log.exception("on_new_leader failed")
            return
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    def _duration(self) -> float:
        seconds = (self._record or {}).get("leaseDurationSeconds")
        # A record without a usable duration gets ours, rather than counting as expired.
        if isinstance(seconds, int) and seconds > 0:
            return float(seconds)
        return self.config.lease_duration

    def _expired(self) -> bool:
        return self._clock() >= self._observed_at + self._duration()

    def _expires_at(self) -> float | None:
        """When the observed record held by someone else expires (our clock), if it is held."""
        if self._record is None or not self._holder or self._holder == self.identity:
            return None
        return self._observed_at + self._duration()

    def _acquirable(self) -> bool:
        if self._record is None or not self._holder or self._holder == self.identity:
            return True
        return self._expired()

    def _held_by_other(self) -> bool:
        return bool(self._holder) and self._holder != self.identity and not self._expired()

    def _jittered_retry(self) -> float:
        return self.config.retry_period * (1 + self._rng.random() * self.config.jitter_factor)

    # --- records and requests ------------------------------------------------------------

    def _claimed(self, lease: dict[str, Any], *, renew: bool) -> dict[str, Any]:
        spec = dict(lease.get("spec") or {})
        now = _micro_time(self._wall_clock())
        spec["holderIdentity"] = self.identity
        spec["leaseDurationSeconds"] = int(self.config.lease_duration)
        spec["renewTime"] = now
        if not renew or not spec.get("acquireTime"):
            spec["acquireTime"] = now
        if not renew:
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        return {**lease, "spec": spec}

    def _released(self, lease: dict[str, Any]) -> dict[str, Any]:
        spec = dict(lease.get("spec") or {})
        now = _micro_time(self._wall_clock())
        spec.update(holderIdentity="", leaseDurationSeconds=1, acquireTime=now, renewTime=now)
        return {**lease, "spec": spec}

    async def _get(self) -> dict[str, Any]:
        return _object(
            await self._client.request("GET", self._path, timeout=self.config.renew_deadline)
        )

    async def _put(self, lease: dict[str, Any]) -> dict[str, Any]:
        return _object(
            await self._client.request(
                "PUT",
                self._path,
                params={"fieldManager": self.config.field_manager},
                body=lease,
                timeout=self.config.renew_deadline,
            )
        )

    async def _watch(self) -> None:
        """Observe every change of the Lease while following; restarts until cancelled."""
        params = {
            "fieldSelector": f"metadata.name={self.config.name}",
            "allowWatchBookmarks": True,
            "timeoutSeconds": 300,
        }
        while True:
            try:
                async for event in self._client.watch(
                    self._collection, params=params, idle_timeout=90
                ):
                    kind, obj = event.get("type"), event["object"]
                    if kind in ("ADDED", "MODIFIED"):
                        changed = self._observe(obj)
                    elif kind == "DELETED":
                        changed = self._forget(obj)
                    elif kind == "ERROR":
                        raise ApiError.from_status(obj)
                    else:
                        continue
                    if changed:
                        self._wake.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Polling still decides correctly without the watch; it only gets slower.
                self._log.debug("lease watch ended", error=repr(exc))
            await asyncio.sleep(self._jittered_retry())


async def _wait_any(timeout: float, *events: asyncio.Event) -> bool:
    """Sleep up to ``timeout`` seconds, or less if an event is set; True if the first is set."""
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=max(timeout, 0), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
    return events[0].is_set()


def _holder_of(lease: Mapping[str, Any]) -> str:
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


def _older(candidate: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Whether ``candidate`` is an older version than ``current`` (etcd revisions are integers;
    anything that does not parse as one is taken as new)."""
    try:
        new = int(candidate["metadata"]["resourceVersion"])
        old = int(current["metadata"]["resourceVersion"])
    except (KeyError, TypeError, ValueError):
        return False
    return new < old


def _micro_time(moment: datetime) -> str:
    """A Kubernetes MicroTime (RFC 3339, microseconds, UTC)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _object(answer: Any) -> dict[str, Any]:
    if not isinstance(answer, dict):
        raise ApiError(500, "InvalidResponse", f"expected a Lease object, got {type(answer)}")
    return answer
