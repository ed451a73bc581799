"""The webhook actuator against a real HTTP receiver on 127.0.0.1: what it sends to power a node
off and on (a body and headers a receiver can authenticate), how it reads each answer, and how
it retries, with an injected sleep so that backoff costs no time; and which powered-off Nodes it
offers to power on."""

from __future__ import annotations

import asyncio
import email.utils
import json
import socket
from typing import Any

import pytest

from joulie.api import keys
from joulie.api.lifecycle import Action, BootGrace, IdleGrace, StateTuple, Window, WorkerState
from joulie.kube.projections import SlimNode, node_projection
from joulie.manager.cache import LIFECYCLE_NODE_ANNOTATIONS
from joulie.manager.lifecycle.actuator import (
    ActuatorResult,
    Outcome,
    PowerOnRequest,
    ShutdownRequest,
)
from joulie.manager.lifecycle.actuator_webhook import WebhookActuator, verify_signature
from joulie.manager.lifecycle.actuators import build_actuator
from joulie.manager.lifecycle.facts import format_time
from tests.support.builders import node
from tests.support.power_receiver import Receiver

pytestmark = pytest.mark.asyncio

SECRET = b"s3cret-shared-with-the-receiver"
NOW = 1_767_225_600.7  # 2026-01-01T00:00:00.7Z

REQUEST = ShutdownRequest(
    node="worker-7",
    uid="3f1c2b9e-0000-4000-8000-000000000007",
    provider_id="redfish://bmc-7/Systems/1",
    action=Action.START_SHUTDOWN,
    tuple=StateTuple(WorkerState.IDLE, Window.OPEN, BootGrace.EXCEEDED, IdleGrace.EXCEEDED),
    reason="idle for 15m, the billing window is open",
    idempotency_key="3f1c2b9e-0000-4000-8000-000000000007/2026-01-01T00:00:00Z",
)
POWER_ON = PowerOnRequest(
    group="worker-7",
    node="worker-7",
    count=1,
    reason="3 pending pods no serving node can take",
    idempotency_key="3f1c2b9e-0000-4000-8000-000000000007/2026-01-01T00:00:00Z/on",
    uid="3f1c2b9e-0000-4000-8000-000000000007",
    provider_id="redfish://bmc-7/Systems/1",
)


class Sleeps(list[float]):
    """The injected sleep: records each wait and returns at once."""

    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


def actuator(
    url: str, sleeps: Sleeps, *, max_attempts: int = 4, **kwargs: float
) -> WebhookActuator:
    options: dict[str, float] = {"base_delay_s": 1.0, "max_delay_s": 30.0, "timeout_s": 5.0}
    options.update(kwargs)
    return WebhookActuator(
        url, SECRET, max_attempts=max_attempts, clock=lambda: NOW, sleep=sleeps, **options
    )


async def shutdown(
    url: str, sleeps: Sleeps | None = None, *, max_attempts: int = 4, **kwargs: float
) -> ActuatorResult:
    webhook = actuator(
        url, sleeps if sleeps is not None else Sleeps(), max_attempts=max_attempts, **kwargs
    )
    try:
        return await webhook.shutdown(REQUEST)
    finally:
        await webhook.close()


async def power_on(
    url: str, sleeps: Sleeps | None = None, request: PowerOnRequest = POWER_ON
) -> ActuatorResult:
    webhook = actuator(url, sleeps if sleeps is not None else Sleeps())
    try:
        return await webhook.power_on(request)
    finally:
        await webhook.close()


async def test_the_request_carries_the_shutdown_and_a_verifiable_signature(
    receiver: Receiver,
) -> None:
    receiver.answers(202)
    result = await shutdown(receiver.url)
    assert result.outcome is Outcome.ACCEPTED
    [sent] = receiver.received
    assert sent.headers["Content-Type"] == "application/json"
    assert sent.headers["Idempotency-Key"] == REQUEST.idempotency_key
    assert json.loads(sent.body) == {
        "node": "worker-7",
        "uid": REQUEST.uid,
        "providerID": "redfish://bmc-7/Systems/1",
        "action": "START_SHUTDOWN",
        "tuple": ["idle", "open", "boot exceeded", "idle exceeded"],
        "reason": "idle for 15m, the billing window is open",
        "idempotencyKey": REQUEST.idempotency_key,
    }
    stamp = sent.headers["X-Joulie-Timestamp"]
    signature = sent.headers["X-Joulie-Signature"]
    assert stamp == str(int(NOW))
    assert signature.startswith("sha256=")
    assert verify_signature(SECRET, stamp, sent.body, signature, now=NOW)
    assert verify_signature(SECRET, stamp, sent.body, signature, now=NOW + 60)
    # Without a clock given, the machine's: a request signed in January 2026 is a replay now
    # (the check was off unless the caller passed one).
    assert not verify_signature(SECRET, stamp, sent.body, signature)
    # What a receiver must reject: another secret, a changed body, a changed timestamp, an old
    # request replayed, garbage.
    assert not verify_signature(b"another secret", stamp, sent.body, signature, now=NOW)
    tampered = sent.body.replace(b"worker-7", b"worker-8")
    assert not verify_signature(SECRET, stamp, tampered, signature, now=NOW)
    assert not verify_signature(SECRET, str(int(NOW) + 1), sent.body, signature, now=NOW)
    assert not verify_signature(SECRET, stamp, sent.body, signature, now=NOW + 3600)
    assert not verify_signature(SECRET, "soon", sent.body, signature)
    assert not verify_signature(SECRET, stamp, sent.body, "sha256=Ω")


@pytest.mark.parametrize("status", [200, 204])
async def test_a_plain_success_means_the_node_is_off(receiver: Receiver, status: int) -> None:
    receiver.answers(status)
    result = await shutdown(receiver.url)
    assert result.outcome is Outcome.DONE
    assert len(receiver.received) == 1


async def test_a_server_error_is_retried_with_the_same_key(receiver: Receiver) -> None:
    receiver.answers(503, 500, 202)
    sleeps = Sleeps()
    result = await shutdown(receiver.url, sleeps)
    assert result.outcome is Outcome.ACCEPTED
    assert sleeps == [1.0, 2.0]
    assert len(receiver.received) == 3
    assert {r.headers["Idempotency-Key"] for r in receiver.received} == {REQUEST.idempotency_key}
    assert {r.body for r in receiver.received} == {receiver.received[0].body}


async def test_retry_after_is_honoured_up_to_the_longest_delay(receiver: Receiver) -> None:
    http_date = email.utils.formatdate(NOW + 20, usegmt=True)
    receiver.answers(
        (429, {"Retry-After": "2"}, "slow down"),
        (503, {"Retry-After": http_date}, ""),
        (503, {"Retry-After": "3600"}, ""),
        (503, {"Retry-After": "whenever"}, ""),
        202,
    )
    sleeps = Sleeps()
    result = await shutdown(receiver.url, sleeps, max_attempts=5, max_delay_s=30.0)
    assert result.outcome is Outcome.ACCEPTED
    # 2 s as asked; the date 20 s ahead (less the fraction of the current second); an hour
    # capped at 30 s; an unreadable value leaves the backoff (1, 2, 4, 8 s) in charge.
    assert sleeps[0] == 2.0
    assert sleeps[1] == pytest.approx(20, abs=1)
    assert sleeps[2:] == [30.0, 8.0]


async def test_exhausted_retries_fail_with_the_last_answer(receiver: Receiver) -> None:
    receiver.answers((503, {"Retry-After": "7"}, "maintenance until 03:00"))
    sleeps = Sleeps()
    result = await shutdown(receiver.url, sleeps, max_attempts=3)
    assert result.outcome is Outcome.FAILED
    assert "3 attempts" in result.message
    assert "503" in result.message
    assert "maintenance until 03:00" in result.message
    assert result.retry_after_s == 7.0
    assert len(receiver.received) == 3
    assert sleeps == [7.0, 7.0]


async def test_backoff_doubles_up_to_the_cap_and_no_retry_after_is_reported(
    receiver: Receiver,
) -> None:
    receiver.answers(502)
    sleeps = Sleeps()
    result = await shutdown(receiver.url, sleeps, max_attempts=5, max_delay_s=3.0)
    assert result.outcome is Outcome.FAILED
    assert result.retry_after_s is None
    assert sleeps == [1.0, 2.0, 3.0, 3.0]


async def test_a_client_error_fails_at_once(receiver: Receiver) -> None:
    receiver.answers((400, {}, "unknown node worker-7\nsecond line"))
    sleeps = Sleeps()
    result = await shutdown(receiver.url, sleeps)
    assert result.outcome is Outcome.FAILED
    assert "400" in result.message
    assert "unknown node worker-7" in result.message
    assert len(receiver.received) == 1
    assert sleeps == []


async def test_a_closed_port_fails_after_the_retries() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # Nothing listens there any more: every attempt is refused.
    sleeps = Sleeps()
    result = await shutdown(f"http://127.0.0.1:{port}/power-off", sleeps, max_attempts=3)
    assert result.outcome is Outcome.FAILED
    assert "ConnectError" in result.message
    assert "3 attempts" in result.message
    assert sleeps == [1.0, 2.0]


async def test_a_slow_receiver_times_out_and_is_retried(receiver: Receiver) -> None:
    receiver.answers(202)
    receiver.delay_s = 1.0
    sleeps = Sleeps()
    result = await shutdown(receiver.url, sleeps, max_attempts=2, timeout_s=0.1)
    assert result.outcome is Outcome.FAILED
    assert "no whole answer within 0.1 s" in result.message
    assert len(receiver.received) == 2
    assert sleeps == [1.0]


async def test_messages_do_not_show_credentials_in_the_url(receiver: Receiver) -> None:
    receiver.answers(403)
    url = receiver.url.replace("http://", "http://admin:hunter2@") + "?token=abc"
    result = await shutdown(url)
    assert result.outcome is Outcome.FAILED
    assert "403" in result.message
    assert "hunter2" not in result.message
    assert "abc" not in result.message


async def test_an_unusable_configuration_is_refused() -> None:
    with pytest.raises(ValueError, match="http"):
        WebhookActuator("ftp://bmc/power", SECRET)
    with pytest.raises(ValueError, match="secret"):
        WebhookActuator("https://bmc/power", b"")
    with pytest.raises(ValueError, match="max_attempts"):
        WebhookActuator("https://bmc/power", SECRET, max_attempts=0)


async def test_the_factory_names_the_kinds_it_accepts() -> None:
    with pytest.raises(ValueError, match="kwok, webhook, cluster-api"):
        build_actuator("ipmi", client=None, writer=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="URL"):
        build_actuator("webhook", client=None, writer=None)  # type: ignore[arg-type]


async def test_a_dripping_receiver_meets_one_deadline_per_attempt(receiver: Receiver) -> None:
    # The timeout was per read: a byte every 2 s kept shutdown() running past 45 s with 3 s.
    receiver.answers(500)
    receiver.drip = (0.2, 100)  # 20 s for the whole body
    started = asyncio.get_running_loop().time()
    result = await asyncio.wait_for(shutdown(receiver.url, max_attempts=2, timeout_s=1.0), 15)
    assert asyncio.get_running_loop().time() - started < 4.0
    assert result.outcome is Outcome.FAILED
    assert "no whole answer within 1 s" in result.message


async def test_an_endless_answer_is_quoted_from_its_start_and_not_held(receiver: Receiver) -> None:
    # The answer was read whole: 300 MiB took the manager from 62 to 962 MiB.
    receiver.answers(403)
    receiver.drip = (0.0, -1)
    result = await asyncio.wait_for(shutdown(receiver.url), 15)
    assert result.outcome is Outcome.FAILED
    assert "HTTP 403 Forbidden: xxxx" in result.message
    assert receiver.sent < 64 * 1024**2


# --- powering on ---------------------------------------------------------------------------


async def test_a_power_on_carries_the_node_and_a_verifiable_signature(
    receiver: Receiver,
) -> None:
    receiver.answers(202)
    result = await power_on(receiver.url)
    assert result.outcome is Outcome.ACCEPTED
    assert "power-on of node worker-7" in result.message
    [sent] = receiver.received
    assert sent.headers["Content-Type"] == "application/json"
    # Compact, with no state tuple: a power-on is no matrix decision.
    assert b", " not in sent.body
    assert json.loads(sent.body) == {
        "node": "worker-7",
        "uid": POWER_ON.uid,
        "providerID": "redfish://bmc-7/Systems/1",
        "action": "POWER_ON",
        "reason": "3 pending pods no serving node can take",
        "idempotencyKey": POWER_ON.idempotency_key,
    }
    assert sent.headers["Idempotency-Key"] == json.loads(sent.body)["idempotencyKey"]
    stamp = sent.headers["X-Joulie-Timestamp"]
    assert stamp == str(int(NOW))
    signature = sent.headers["X-Joulie-Signature"]
    assert verify_signature(SECRET, stamp, sent.body, signature, now=NOW)
    # Signed over the body as sent: a receiver cannot be made to power on another machine.
    tampered = sent.body.replace(b"worker-7", b"worker-8")
    assert not verify_signature(SECRET, stamp, tampered, signature, now=NOW)


async def test_a_busy_receiver_is_asked_again_for_the_same_power_on(receiver: Receiver) -> None:
    receiver.answers((503, {"Retry-After": "5"}, "BMC busy"), 200)
    sleeps = Sleeps()
    result = await power_on(receiver.url, sleeps)
    assert result.outcome is Outcome.DONE
    assert result.message.endswith("answered 200: node worker-7 is on")
    assert sleeps == [5.0]  # Retry-After, longer than the 1 s backoff
    first, second = receiver.received
    assert first.body == second.body
    assert first.headers["Idempotency-Key"] == second.headers["Idempotency-Key"]
    assert verify_signature(
        SECRET,
        second.headers["X-Joulie-Timestamp"],
        second.body,
        second.headers["X-Joulie-Signature"],
        now=NOW,
    )


async def test_a_refused_power_on_fails_at_once_naming_the_status(receiver: Receiver) -> None:
    receiver.answers((400, {}, "no BMC for worker-7"))
    sleeps = Sleeps()
    result = await power_on(receiver.url, sleeps)
    assert result.outcome is Outcome.FAILED
    assert result.message.startswith("power-on webhook ")
    assert "node worker-7" in result.message
    assert "HTTP 400 Bad Request: no BMC for worker-7" in result.message
    assert len(receiver.received) == 1
    assert sleeps == []


async def test_a_power_on_that_never_gets_through_fails_with_the_wait_asked_for(
    receiver: Receiver,
) -> None:
    receiver.answers((429, {"Retry-After": "9"}, ""))
    sleeps = Sleeps()
    result = await power_on(receiver.url, sleeps)
    assert result.outcome is Outcome.FAILED
    assert "power-on webhook" in result.message
    assert "4 attempts" in result.message
    assert result.retry_after_s == 9.0  # the node's cool-down honours it
    assert sleeps == [9.0, 9.0, 9.0]


async def test_a_group_without_a_node_is_not_sent(receiver: Receiver) -> None:
    receiver.answers(200)
    group = PowerOnRequest("pool-a", "", 3, "pods wait", "pool-a/2026-01-01T00:00:00Z")
    result = await power_on(receiver.url, request=group)
    assert result.outcome is Outcome.FAILED
    assert "3 nodes of pool-a" in result.message
    assert receiver.received == []


SHAPE = {"cpu": "32", "memory": "128Gi", "pods": "110"}
GPU_SHAPE = {**SHAPE, "nvidia.com/gpu": "4"}


def slim(
    name: str,
    *,
    ready: bool = False,
    allocatable: dict[str, str] = SHAPE,
    **annotations: str,
) -> SlimNode:
    """A Node as the manager's cache keeps it: ``annotations`` by keyword (phase, since,
    retry_after) under the lifecycle's keys."""
    named = {
        "phase": keys.LIFECYCLE_PHASE_ANNOTATION,
        "since": keys.LIFECYCLE_SINCE_ANNOTATION,
        "retry_after": keys.LIFECYCLE_RETRY_AFTER_ANNOTATION,
    }
    raw: dict[str, Any] = node(
        name,
        labels={"kubernetes.io/hostname": name},
        annotations={named[k]: v for k, v in annotations.items()},
        allocatable=allocatable,
    )
    raw["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    return node_projection(annotation_keys=LIFECYCLE_NODE_ANNOTATIONS)(raw)


async def test_bootable_offers_the_powered_off_nodes_by_shape() -> None:
    since = format_time(NOW - 3600)
    later = format_time(NOW + 600)
    nodes = [
        slim("worker-1", phase="off", since=since),
        slim("worker-2", phase="off", since=since),
        slim("worker-3", phase="off", since=since, retry_after=later),  # cooling down
        slim("worker-4", phase="off", since=since, allocatable=GPU_SHAPE),
        slim("worker-5", phase="booting", since=since),
        slim("worker-6", ready=True),  # serving
        slim("worker-7", ready=True, phase="off", since=since),  # powered on by someone
        slim("worker-8"),  # NotReady, but not powered off by the lifecycle
    ]
    webhook = actuator("http://127.0.0.1:9/power", Sleeps())  # never contacted
    try:
        offers = {o.group: o for o in await webhook.bootable(nodes, NOW)}
        assert set(offers) == {"worker-1", "worker-4"}
        cpu = offers["worker-1"]
        assert cpu.nodes == ("worker-1", "worker-2")
        assert (cpu.can_boot, cpu.booting) == (2, 1)
        assert cpu.allocatable["cpu"] == "32"
        gpu = offers["worker-4"]
        assert gpu.nodes == ("worker-4",)
        assert (gpu.can_boot, gpu.booting) == (1, 0)
        assert gpu.allocatable["nvidia.com/gpu"] == "4"
        # Its cool-down over, the node that did not register is offered again.
        offers = {o.group: o for o in await webhook.bootable(nodes, NOW + 601)}
        assert offers["worker-1"].nodes == ("worker-1", "worker-2", "worker-3")
    finally:
        await webhook.close()


async def test_bootable_reports_a_shape_whose_nodes_all_cool_down() -> None:
    until = NOW + 600
    nodes = [
        slim("worker-1", phase="off", retry_after=format_time(until)),
        slim("worker-2", phase="booting"),
    ]
    webhook = actuator("http://127.0.0.1:9/power", Sleeps())
    try:
        [offer] = await webhook.bootable(nodes, NOW)
        assert (offer.can_boot, offer.booting, offer.nodes) == (0, 1, ())
        assert offer.cooling_until == pytest.approx(until, abs=1)
    finally:
        await webhook.close()
