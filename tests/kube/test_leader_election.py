"""Leader election on a real kube-apiserver: processes contending with the manager's credentials,
crash and graceful handover with client-go's default timings, and in-process checks of stepping
down, expiry judged by observed time, and the release on shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import REGISTRY, CollectorRegistry

from hack.cluster.runner import NAMESPACE, REPO, LocalCluster
from joulie.kube.client import KubeClient
from joulie.kube.leader import LeaderElectionConfig, LeaderElector
from joulie.process.runtime import health_app
from tests.support.waiting import eventually

pytestmark = pytest.mark.kube

LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
# Short timings for processes whose check does not measure client-go's defaults.
FAST_FLAGS = ("--lease-duration", "3", "--renew-deadline", "2", "--retry-period", "0.5")


# --- helpers --------------------------------------------------------------------------------


def wait_for(predicate: Callable[[], Any], timeout: float, interval: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


async def until(predicate: Callable[[], Any], timeout: float, interval: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


def read_lease(cluster: LocalCluster, name: str) -> dict[str, Any] | None:
    with cluster.api() as api:
        response = api.get(f"{LEASES}/{name}")
    if response.status_code == 404:
        return None
    response.raise_for_status()
    lease: dict[str, Any] = response.json()
    return lease


def holder(cluster: LocalCluster, name: str) -> str | None:
    lease = read_lease(cluster, name)
    return None if lease is None else lease["spec"].get("holderIdentity")


def renew_time(lease: Mapping[str, Any]) -> datetime:
    return datetime.strptime(lease["spec"]["renewTime"], "%Y-%m-%dT%H:%M:%S.%f%z")


def gauge(name: str) -> float | None:
    return REGISTRY.get_sample_value("joulie_leader", {"lease": f"{NAMESPACE}/{name}"})


@pytest.fixture
def lease_name(cluster: LocalCluster) -> Iterator[str]:
    name = f"leader-{uuid.uuid4().hex[:8]}"
    yield name
    with cluster.api() as api:
        api.delete(f"{LEASES}/{name}")


# --- candidates in their own processes ------------------------------------------------------


@dataclass
class Candidate:
    identity: str
    process: subprocess.Popen[bytes]
    state_file: Path
    log_file: Path

    def states(self) -> list[tuple[float, str, str]]:
        """(unix time, "leader" | "follower", detail) for every complete line so far."""
        if not self.state_file.exists():
            return []
        entries = []
        for line in self.state_file.read_text().splitlines(keepends=True):
            if not line.endswith("\n"):
                continue  # still being written
            stamp, state, *detail = line.split()
            entries.append((float(stamp), state, " ".join(detail)))
        return entries

    def state(self) -> str | None:
        states = self.states()
        return states[-1][1] if states else None

    def became_leader_at(self) -> float | None:
        return next((t for t, s, _ in self.states() if s == "leader"), None)

    def log(self) -> str:
        return self.log_file.read_text()[-3000:] if self.log_file.exists() else ""


@pytest.fixture
def spawn(
    cluster: LocalCluster, tmp_path: Path, lease_name: str
) -> Iterator[Callable[..., Candidate]]:
    started: list[Candidate] = []

    def start(identity: str, *flags: str) -> Candidate:
        state_file = tmp_path / f"{identity}.state"
        log_file = tmp_path / f"{identity}.log"
        with log_file.open("wb") as log:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.support.leader_process",
                    f"--kubeconfig={cluster.role_kubeconfig('manager')}",
                    f"--name={lease_name}",
                    f"--identity={identity}",
                    f"--state-file={state_file}",
                    *flags,
                ],
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )
        candidate = Candidate(identity, process, state_file, log_file)
        started.append(candidate)
        return candidate

    yield start
    for candidate in started:
        if candidate.process.poll() is None:
            candidate.process.kill()
        candidate.process.wait(timeout=10)


def leader_intervals(candidate: Candidate, end: float) -> list[tuple[float, float]]:
    intervals, since = [], None
    for stamp, state, _ in candidate.states():
        if state == "leader" and since is None:
            since = stamp
        elif state == "follower" and since is not None:
            intervals.append((since, stamp))
            since = None
    if since is not None:
        intervals.append((since, end))
    return intervals


def test_two_processes_elect_exactly_one_leader(
    cluster: LocalCluster, lease_name: str, spawn: Callable[..., Candidate]
) -> None:
    a, b = spawn("cand-a", *FAST_FLAGS), spawn("cand-b", *FAST_FLAGS)
    first = wait_for(lambda: holder(cluster, lease_name), timeout=15)
    leader, follower = (a, b) if first == a.identity else (b, a)
    wait_for(lambda: leader.state() == "leader", timeout=5)
    wait_for(lambda: follower.states(), timeout=10)

    # "Nothing else happens" is the behaviour here, so it is watched over a span that the Lease
    # itself measures: until the leader's renewals reach more than a lease duration (3 s) past
    # the first one seen, a span in which a follower would have taken an unrenewed Lease. One
    # leader all along.
    start = read_lease(cluster, lease_name)
    assert start is not None

    def renewed_past_a_lease_duration() -> bool:
        assert [a.state(), b.state()].count("leader") <= 1
        lease = read_lease(cluster, lease_name)
        assert lease is not None
        assert lease["spec"]["holderIdentity"] == leader.identity
        return (renew_time(lease) - renew_time(start)).total_seconds() > 3 + 1

    wait_for(renewed_past_a_lease_duration, timeout=15, interval=0.05)
    assert leader.state() == "leader", leader.log()
    assert follower.state() == "follower", follower.log()
    assert follower.states()[-1][2] == f"holder={leader.identity}"
    lease = read_lease(cluster, lease_name)
    assert lease is not None
    assert lease["spec"]["leaseTransitions"] == 0
    assert lease["spec"]["leaseDurationSeconds"] == 3

    now = time.time()
    for x in leader_intervals(a, now):
        for y in leader_intervals(b, now):
            assert x[1] <= y[0] or y[1] <= x[0], f"overlapping leadership {x} {y}"

    for candidate in (a, b):
        candidate.process.send_signal(signal.SIGTERM)
    assert a.process.wait(timeout=10) == 0, a.log()
    assert b.process.wait(timeout=10) == 0, b.log()


def start_leader_and_follower(
    cluster: LocalCluster, lease_name: str, spawn: Callable[..., Candidate]
) -> tuple[Candidate, Candidate]:
    """``lead`` holds the Lease (client-go default timings) and ``follow`` has seen that."""
    lead = spawn("lead")
    wait_for(lambda: lead.state() == "leader", timeout=15)
    follow = spawn("follow")
    wait_for(lambda: follow.states(), timeout=15)
    assert follow.states()[-1][1:] == ("follower", "holder=lead"), follow.log()
    assert holder(cluster, lease_name) == "lead"
    return lead, follow


def test_killed_leader_is_replaced_within_the_lease_duration(
    cluster: LocalCluster, lease_name: str, spawn: Callable[..., Candidate]
) -> None:
    lead, follow = start_leader_and_follower(cluster, lease_name, spawn)
    # Kill the leader in its steady state: once it has renewed while the follower follows (the
    # follower counts the lease duration from the last change of the record it saw).
    following = read_lease(cluster, lease_name)
    assert following is not None
    version: str = following["metadata"]["resourceVersion"]

    def renewed() -> bool:
        lease = read_lease(cluster, lease_name)
        assert lease is not None
        return bool(lease["metadata"]["resourceVersion"] != version)

    wait_for(renewed, timeout=10)
    lead.process.send_signal(signal.SIGKILL)
    killed = time.time()
    lead.process.wait(timeout=5)

    took_over = wait_for(follow.became_leader_at, timeout=25)
    takeover = took_over - killed
    print(f"\ntakeover after SIGKILL: {takeover:.2f}s (lease 15s, renew 10s, retry 2s)")
    assert takeover < 20, follow.log()
    lease = read_lease(cluster, lease_name)
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == "follow"
    assert lease["spec"]["leaseTransitions"] == 1


def test_terminated_leader_releases_and_the_follower_takes_over(
    cluster: LocalCluster, lease_name: str, spawn: Callable[..., Candidate]
) -> None:
    lead, follow = start_leader_and_follower(cluster, lease_name, spawn)
    lead.process.send_signal(signal.SIGTERM)
    terminated = time.time()

    took_over = wait_for(follow.became_leader_at, timeout=10)
    takeover = took_over - terminated
    print(f"\ntakeover after SIGTERM: {takeover:.3f}s (lease 15s, renew 10s, retry 2s)")
    assert takeover < 5, follow.log()
    assert lead.process.wait(timeout=10) == 0, lead.log()
    assert lead.state() == "follower", lead.log()
    assert "released lease" in lead.log()
    lease = read_lease(cluster, lease_name)
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == "follow"
    assert lease["spec"]["leaseDurationSeconds"] == 15
    assert lease["spec"]["leaseTransitions"] == 1


# --- in-process electors --------------------------------------------------------------------


class FakeClock:
    """Monotonic time that a test can move forward, to judge expiry without waiting for it."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


class FlakyClient:
    """A real KubeClient whose requests can be made to fail, as in a network partition. It counts
    the requests the server answered, by verb: a poll is a GET, a renewal or takeover a PUT."""

    def __init__(self, inner: KubeClient) -> None:
        self.inner = inner
        self.failing = False
        self.answered: Counter[str] = Counter()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        timeout: float = 30.0,
    ) -> Any:
        if self.failing:
            raise aiohttp.ClientConnectionError("injected: API server unreachable")
        answer = await self.inner.request(method, path, params=params, body=body, timeout=timeout)
        self.answered[method] += 1
        return answer

    async def watch(
        self,
        path: str,
        *,
        params: Mapping[str, Any],
        idle_timeout: float,
        on_open: Callable[[], None] | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        if self.failing:
            raise aiohttp.ClientConnectionError("injected: API server unreachable")
        async for event in self.inner.watch(
            path, params=params, idle_timeout=idle_timeout, on_open=on_open
        ):
            yield event


@asynccontextmanager
async def manager_client(cluster: LocalCluster) -> AsyncIterator[KubeClient]:
    async with await KubeClient.from_kubeconfig(str(cluster.role_kubeconfig("manager"))) as c:
        yield c


@asynccontextmanager
async def running(elector: LeaderElector) -> AsyncIterator[asyncio.Event]:
    """Run ``elector`` in the background; stop it (gracefully) when the block ends."""
    stopping = asyncio.Event()
    task = asyncio.create_task(elector.run(stopping))
    try:
        yield stopping
    finally:
        stopping.set()
        await asyncio.wait_for(task, timeout=15)


def fast_config(name: str, identity: str, **overrides: Any) -> LeaderElectionConfig:
    """Short timings for the checks whose acceptance numbers do not depend on the defaults."""
    timings: dict[str, Any] = {"lease_duration": 3, "renew_deadline": 1.5, "retry_period": 0.3}
    return LeaderElectionConfig(NAMESPACE, name, identity=identity, **(timings | overrides))


def micro_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_settings_are_validated_like_client_go() -> None:
    LeaderElectionConfig(NAMESPACE, "x")  # client-go's 15 / 10 / 2 s are valid
    with pytest.raises(ValueError, match="must exceed renew_deadline"):
        LeaderElectionConfig(NAMESPACE, "x", lease_duration=10, renew_deadline=10)
    with pytest.raises(ValueError, match="jitter_factor"):
        LeaderElectionConfig(NAMESPACE, "x", renew_deadline=2.4, retry_period=2)
    with pytest.raises(ValueError, match="whole seconds"):
        LeaderElectionConfig(NAMESPACE, "x", lease_duration=2.5, renew_deadline=1)
    assert (
        LeaderElectionConfig(NAMESPACE, "x").identity
        != LeaderElectionConfig(NAMESPACE, "x").identity
    )


@pytest.mark.asyncio
async def test_leader_that_cannot_renew_steps_down_and_stops_its_work(
    cluster: LocalCluster, lease_name: str
) -> None:
    stopped_at: list[float] = []
    work_cancelled = asyncio.Event()
    may_write: list[bool] = []

    async def work() -> None:
        try:
            await asyncio.Event().wait()  # leader work that runs until it is cancelled
        except asyncio.CancelledError:
            may_write.append(elector.is_leader)
            work_cancelled.set()
            raise

    async with manager_client(cluster) as inner:
        flaky = FlakyClient(inner)
        config = fast_config(lease_name, "flaky")
        elector = LeaderElector(
            flaky,
            config,
            on_started_leading=work,
            on_stopped_leading=lambda: stopped_at.append(time.monotonic()),
        )
        async with running(elector):
            await eventually(lambda: elector.is_leader, 5, "leadership")
            assert elector.is_leader
            assert gauge(lease_name) == 1
            await until(lambda: flaky.answered["PUT"] >= 2, timeout=5)  # a couple of renewals

            flaky.failing = True
            cut = time.monotonic()
            await until(lambda: stopped_at, timeout=5)
            stepped_down = stopped_at[0] - cut
            print(f"\nstepped down {stepped_down:.2f}s after requests began to fail")
            # The deadline counts from the last renewal sent before the cut.
            assert stepped_down <= config.renew_deadline + 0.3
            assert work_cancelled.is_set()
            assert may_write == [False]  # leadership lost: the work's writes stop at once
            assert not elector.is_leader
            assert gauge(lease_name) == 0
            assert elector.is_ready()  # a follower still serves

            # Nobody else took the Lease meanwhile: once requests work, the same record is
            # renewed, which is no transition.
            flaky.failing = False
            await eventually(lambda: elector.is_leader, 5, "leadership")
            lease = read_lease(cluster, lease_name)
            assert lease is not None
            assert lease["spec"]["holderIdentity"] == "flaky"
            assert lease["spec"]["leaseTransitions"] == 0


@pytest.mark.asyncio
async def test_leader_steps_down_at_once_when_another_holder_appears(
    cluster: LocalCluster, lease_name: str
) -> None:
    stopped = asyncio.Event()
    async with manager_client(cluster) as inner:
        client = FlakyClient(inner)  # never failing here: it counts the polls and writes
        config = fast_config(lease_name, "usurped")
        elector = LeaderElector(client, config, on_stopped_leading=stopped.set)
        async with running(elector):
            await eventually(lambda: elector.is_leader, 5, "leadership")
            lease = read_lease(cluster, lease_name)
            assert lease is not None
            lease["spec"].update(
                holderIdentity="intruder",
                leaseDurationSeconds=30,
                renewTime=micro_time(datetime.now(UTC) + timedelta(hours=1)),
            )
            with cluster.api() as api:
                api.put(f"{LEASES}/{lease_name}", json=lease).raise_for_status()
            replaced = time.monotonic()
            await asyncio.wait_for(stopped.wait(), timeout=5)
            print(
                f"\nstepped down {time.monotonic() - replaced:.2f}s after the lease changed hands"
            )
            assert time.monotonic() - replaced < config.retry_period * 2 + 0.5
            assert not elector.is_leader
            assert elector.holder == "intruder"

            # As a follower it no longer writes: the intruder's record stays untouched. Not
            # writing is the behaviour, so it is observed over something that does happen: three
            # more polls, each of which reads the record and leaves it alone.
            before = read_lease(cluster, lease_name)
            writes = client.answered["PUT"] + client.answered["POST"]
            polls = client.answered["GET"]
            await until(lambda: client.answered["GET"] >= polls + 3, timeout=5)
            assert client.answered["PUT"] + client.answered["POST"] == writes
            after = read_lease(cluster, lease_name)
            assert before is not None
            assert after is not None
            assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


@pytest.mark.asyncio
@pytest.mark.parametrize("renew_skew", [timedelta(hours=1), -timedelta(hours=1)])
async def test_expiry_is_judged_by_observed_time_not_renew_time(
    cluster: LocalCluster, lease_name: str, renew_skew: timedelta
) -> None:
    """A renewTime an hour ahead (or behind) our wall clock changes nothing: the record is taken
    over only after it has stayed unchanged for leaseDurationSeconds as this process saw it."""
    ghost = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": lease_name},
        "spec": {
            "holderIdentity": "ghost",
            "leaseDurationSeconds": 15,
            "acquireTime": micro_time(datetime.now(UTC) + renew_skew),
            "renewTime": micro_time(datetime.now(UTC) + renew_skew),
            "leaseTransitions": 3,
        },
    }
    with cluster.api() as api:
        api.post(LEASES, json=ghost).raise_for_status()

    clock = FakeClock()
    async with manager_client(cluster) as inner:
        client = FlakyClient(inner)  # never failing here: it counts the polls
        config = fast_config(lease_name, "observer")
        elector = LeaderElector(client, config, clock=clock)
        async with running(elector):
            await until(elector.is_ready, timeout=5)
            # The elector first saw the record no later than this (it is ready from then on).
            seen = clock()

            def age_to(seconds: float) -> None:
                """Move the clock so the record has stayed unchanged ``seconds`` (or a little
                more, the time between that first sight and ``seen``)."""
                clock.offset += seconds - (clock() - seen)

            await until(lambda: client.answered["GET"] >= 3, timeout=5)  # several polls
            assert not elector.is_leader
            assert elector.holder == "ghost"

            # 12 s of the 15: one more poll judges the record young still.
            age_to(12)
            polls = client.answered["GET"]
            await until(lambda: client.answered["GET"] > polls, timeout=5)
            assert not elector.is_leader
            assert holder(cluster, lease_name) == "ghost"

            age_to(16)  # unchanged for longer than leaseDurationSeconds: expired
            advanced = time.monotonic()
            await eventually(lambda: elector.is_leader, 5, "leadership")
            print(f"\ntook over {time.monotonic() - advanced:.2f}s after the record expired")
            lease = read_lease(cluster, lease_name)
            assert lease is not None
            assert lease["spec"]["holderIdentity"] == "observer"
            assert lease["spec"]["leaseTransitions"] == 4


@pytest.mark.asyncio
async def test_follower_is_ready_and_reported_by_readyz(
    cluster: LocalCluster, lease_name: str
) -> None:
    async with manager_client(cluster) as client:
        first = LeaderElector(client, fast_config(lease_name, "one"))
        second = LeaderElector(client, fast_config(lease_name, "two"))
        assert not first.is_ready()
        async with running(first):
            await eventually(lambda: first.is_leader, 5, "leadership")
            async with running(second):
                await until(second.is_ready, timeout=5)
                assert not second.is_leader
                assert second.holder == "one"
                app = health_app([first, second], asyncio.Event(), CollectorRegistry())
                async with TestClient(TestServer(app)) as http:
                    response = await http.get("/readyz")
                    assert response.status == 200
                    text = await response.text()
                    assert "leader-election: ready (leader)" in text
                    assert "leader-election: ready (follower, leader one)" in text
        assert not first.is_ready()


@pytest.mark.asyncio
async def test_graceful_stop_stops_the_work_then_releases(
    cluster: LocalCluster, lease_name: str
) -> None:
    order: list[str] = []

    async def work() -> None:
        try:
            await asyncio.Event().wait()  # leader work that runs until it is cancelled
        except asyncio.CancelledError:
            # The Lease is still held: the work's last writes (totals it hands over) may go out.
            order.append(f"work stopped, may write: {elector.is_leader}")
            raise

    def on_stopped() -> None:
        lease = read_lease(cluster, lease_name)
        assert lease is not None
        order.append(f"stopped leading, holder={lease['spec']['holderIdentity']}")

    async with manager_client(cluster) as client:
        config = fast_config(lease_name, "leaving")
        elector = LeaderElector(
            client, config, on_started_leading=work, on_stopped_leading=on_stopped
        )
        async with running(elector):
            await eventually(lambda: elector.is_leader, 5, "leadership")
            held = read_lease(cluster, lease_name)
        assert order == ["work stopped, may write: True", "stopped leading, holder=leaving"]
        assert gauge(lease_name) == 0

    released = read_lease(cluster, lease_name)
    assert held is not None
    assert released is not None
    assert released["spec"]["holderIdentity"] == ""
    assert released["spec"]["leaseDurationSeconds"] == 1
    assert released["spec"]["leaseTransitions"] == held["spec"]["leaseTransitions"]
    assert released["spec"]["renewTime"] > held["spec"]["renewTime"]


@pytest.mark.asyncio
async def test_lease_is_not_released_while_the_work_keeps_running(
    cluster: LocalCluster, lease_name: str
) -> None:
    let_go = asyncio.Event()

    async def stubborn() -> None:
        while not let_go.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                # Ignores cancellation: a successor must not overlap with this writer.
                await let_go.wait()

    async with manager_client(cluster) as client:
        config = fast_config(lease_name, "stubborn", release_timeout=0.5)
        elector = LeaderElector(client, config, on_started_leading=stubborn)
        async with running(elector):
            await eventually(lambda: elector.is_leader, 5, "leadership")
        lease = read_lease(cluster, lease_name)
        assert lease is not None
        assert lease["spec"]["holderIdentity"] == "stubborn"
        assert lease["spec"]["leaseDurationSeconds"] == 3
        let_go.set()
