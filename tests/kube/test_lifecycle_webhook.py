"""A shutdown through the webhook actuator, end to end against the real API server: the receiver
accepts it (202), the node stays in shutting-down and is asked again after the shutdown timeout
(a new idempotency key, the same node); once it goes NotReady it is marked off and left alone;
Ready again long after, it was powered on, and everything of ours comes off it.

And a power-on: a pod the scheduler cannot place makes the manager mark an off node booting and
send the receiver a signed POWER_ON; once the node is Ready, everything of ours comes off it. One
that never comes up is off again after its boot grace, and powered on again (a new idempotency
key) only once its backoff is over."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from hack.cluster.runner import LocalCluster
from joulie.api import keys
from joulie.manager.lifecycle.actuator_webhook import verify_signature
from tests.kube.test_lifecycle_races import (
    lifecycle_env,
    make_nodes,
    manager,
    node,
    node_events,
)
from tests.support.lifecycle_nodes import E2E_LABEL, create_pod, phase, untouched
from tests.support.power_receiver import Received, Receiver
from tests.support.waiting import eventually

pytestmark = [pytest.mark.kube, pytest.mark.asyncio]


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


class Arrivals(list[Received]):
    """The receiver's requests, with the time each arrived (put in place of its list)."""

    def __init__(self) -> None:
        super().__init__()
        self.at: list[float] = []

    def append(self, request: Received) -> None:
        self.at.append(time.time())
        super().append(request)


def set_ready(cluster: LocalCluster, name: str, status: str, at: str) -> None:
    with cluster.api() as api:
        api.patch(
            f"/api/v1/nodes/{name}/status",
            json={
                "status": {
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": status,
                            "reason": "Test",
                            "lastHeartbeatTime": at,
                            "lastTransitionTime": at,
                        }
                    ]
                }
            },
            headers={"Content-Type": "application/strategic-merge-patch+json"},
        ).raise_for_status()


async def test_an_accepted_shutdown_is_waited_for_asked_again_and_its_node_marked_off(
    cluster: LocalCluster, receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "joulie-system")
    (name,) = make_nodes(cluster, "webhook", 1)
    env = webhook_env(
        "webhook",
        receiver,
        tmp_path,
        LIFECYCLE_SHUTDOWN_TIMEOUT="3s",
        LIFECYCLE_HEARTBEAT_STALE="1h",
        LIFECYCLE_NOT_READY_GRACE="1s",
    )
    async with manager(cluster, env):
        await eventually(lambda: len(receiver.received) >= 2, 40, "the shutdown asked again")
        assert phase(node(cluster, name)) == "shutting-down"
        bodies = [json.loads(r.body) for r in receiver.received[:2]]
        assert {b["node"] for b in bodies} == {name}
        assert bodies[0]["tuple"] == ["idle", "open", "boot exceeded", "idle exceeded"]
        assert bodies[0]["idempotencyKey"] != bodies[1]["idempotencyKey"]
        # Asked again after the timeout, not at every pass.
        passes = REGISTRY.get_sample_value("joulie_lifecycle_passes_total") or 0.0
        await eventually(
            lambda: (REGISTRY.get_sample_value("joulie_lifecycle_passes_total") or 0) >= passes + 3,
            30,
            "three more passes",
        )
        assert len(receiver.received) <= 3

        # The power goes: KWOK no longer keeps the node, and it turns NotReady.
        with cluster.api() as api:
            api.patch(
                f"/api/v1/nodes/{name}",
                json={"metadata": {"annotations": {keys.KWOK_NODE_ANNOTATION: None}}},
                headers={"Content-Type": "application/merge-patch+json"},
            ).raise_for_status()
        set_ready(cluster, name, "False", utc_now())
        await eventually(lambda: phase(node(cluster, name)) == "off", 30, "the node marked off")
        asked = len(receiver.received)
        found = node(cluster, name)
        assert found is not None
        assert found["spec"]["unschedulable"]  # off nodes stay cordoned
        passes = REGISTRY.get_sample_value("joulie_lifecycle_passes_total") or 0.0
        await eventually(
            lambda: (REGISTRY.get_sample_value("joulie_lifecycle_passes_total") or 0) >= passes + 8,
            30,
            "eight more passes",
        )
        assert len(receiver.received) == asked  # an off node is never asked again
        assert phase(node(cluster, name)) == "off"

    # Powered on again by someone: Ready, and for longer than a power-off could explain (a
    # manager with short graces, which also shows the phase survives a restart).
    short = {**env, "LIFECYCLE_HEARTBEAT_STALE": "1s", "LIFECYCLE_NOT_READY_GRACE": "1s"}
    async with manager(cluster, short):
        set_ready(cluster, name, "True", utc_now())
        await eventually(lambda: untouched(node(cluster, name)), 30, "everything of ours undone")


def powered_off_node(cluster: LocalCluster, case: str) -> str:
    """A node as the first test leaves it: powered off by the webhook, still registered,
    NotReady, cordoned and tainted by us, marked off (and no longer kept Ready by KWOK)."""
    (name,) = make_nodes(cluster, case, 1)
    with cluster.api() as api:
        api.patch(
            f"/api/v1/nodes/{name}",
            json={
                "metadata": {
                    "annotations": {
                        keys.KWOK_NODE_ANNOTATION: None,
                        keys.LIFECYCLE_PHASE_ANNOTATION: "off",
                        keys.LIFECYCLE_SINCE_ANNOTATION: utc_now(),
                        keys.LIFECYCLE_CORDONED_ANNOTATION: "true",
                    }
                },
                "spec": {
                    "unschedulable": True,
                    "taints": [{"key": keys.DRAINING_TAINT, "effect": "NoSchedule"}],
                },
            },
            headers={"Content-Type": "application/merge-patch+json"},
        ).raise_for_status()
    set_ready(cluster, name, "False", utc_now())
    return name


def webhook_env(case: str, receiver: Receiver, tmp_path: Path, **overrides: str) -> dict[str, str]:
    """The manager's settings for the webhook actuator, posting to ``receiver`` (which accepts
    every request) with a shared secret."""
    key = tmp_path / "key"
    key.write_text("shared-secret\n")
    receiver.answers(202)
    return lifecycle_env(
        case,
        LIFECYCLE_ACTUATOR="webhook",
        LIFECYCLE_WEBHOOK_URL=receiver.url,
        LIFECYCLE_WEBHOOK_SECRET_FILE=str(key),
        **overrides,
    )


def waiting_for(cluster: LocalCluster, namespace: str, case: str) -> None:
    """A pod only the nodes of ``case`` could run: while they are off, the scheduler finds no
    node and the pod waits."""
    create_pod(
        cluster,
        namespace,
        "waits",
        {"nodeSelector": {E2E_LABEL: case}, "requests": {"cpu": "100m"}},
    )


def power_on_asked(sent: Received, name: str) -> dict[str, Any]:
    """The body of a signed POWER_ON for ``name`` (its signature verified)."""
    assert verify_signature(
        b"shared-secret",
        sent.headers["X-Joulie-Timestamp"],
        sent.body,
        sent.headers["X-Joulie-Signature"],
    )
    body: dict[str, Any] = json.loads(sent.body)
    assert (body["node"], body["action"]) == (name, "POWER_ON")
    assert sent.headers["Idempotency-Key"] == body["idempotencyKey"]
    return body


async def test_a_pod_that_waits_powers_an_off_node_on_through_the_receiver(
    cluster: LocalCluster,
    namespace: str,
    receiver: Receiver,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "joulie-system")
    name = powered_off_node(cluster, "webhook-on")
    env = webhook_env(
        "webhook-on",
        receiver,
        tmp_path,
        LIFECYCLE_HEARTBEAT_STALE="1h",
        LIFECYCLE_NOT_READY_GRACE="1h",
    )
    async with manager(cluster, env):
        waiting_for(cluster, namespace, "webhook-on")
        await eventually(lambda: receiver.received, 40, "the power-on asked for")
        [sent] = receiver.received
        body = power_on_asked(sent, name)
        found = node(cluster, name)
        assert found is not None
        assert found["metadata"]["uid"] == body["uid"]
        assert phase(found) == "booting"
        # Booting, it is not asked for again while the pod still waits.
        passes = REGISTRY.get_sample_value("joulie_lifecycle_passes_total") or 0.0
        await eventually(
            lambda: (REGISTRY.get_sample_value("joulie_lifecycle_passes_total") or 0) >= passes + 4,
            30,
            "four more passes",
        )
        assert len(receiver.received) == 1

        # The machine comes up: Ready, it serves again.
        set_ready(cluster, name, "True", utc_now())
        await eventually(lambda: untouched(node(cluster, name)), 30, "everything of ours undone")


async def test_a_node_not_up_within_its_boot_grace_is_off_again_and_retried_after_the_backoff(
    cluster: LocalCluster,
    namespace: str,
    receiver: Receiver,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "joulie-system")
    arrivals = receiver.received = Arrivals()
    name = powered_off_node(cluster, "webhook-dud")
    env = webhook_env(
        "webhook-dud",
        receiver,
        tmp_path,
        LIFECYCLE_HEARTBEAT_STALE="1h",
        LIFECYCLE_NOT_READY_GRACE="1h",
        LIFECYCLE_BOOT_GRACE="3s",
        LIFECYCLE_BACKOFF="5s",
    )
    timed_out = {"actuator": "webhook", "outcome": "timed_out"}
    before = REGISTRY.get_sample_value("joulie_lifecycle_boots_total", timed_out) or 0.0
    async with manager(cluster, env):
        waiting_for(cluster, namespace, "webhook-dud")
        await eventually(lambda: arrivals, 40, "the first power-on asked for")
        first = power_on_asked(arrivals[0], name)

        # The machine never comes up (nothing makes the node Ready): past its boot grace it is
        # off again, one failure down, and cools down for the backoff.
        def cooling() -> dict[str, str] | None:
            found = node(cluster, name)
            annotations = (found or {}).get("metadata", {}).get("annotations") or {}
            off = phase(found) == "off"
            failed = annotations.get(keys.LIFECYCLE_FAILURES_ANNOTATION) == "1"
            return annotations if off and failed else None

        annotations = await eventually(cooling, 40, "the node off again after its boot grace")
        since = rfc3339(annotations[keys.LIFECYCLE_SINCE_ANNOTATION])
        retry_after = rfc3339(annotations[keys.LIFECYCLE_RETRY_AFTER_ANNOTATION])
        assert retry_after - since == 5  # the first failure waits the backoff itself
        # Reported after the patch: on the Node, and counted.
        await eventually(
            lambda: "LifecyclePowerOnFailed" in node_events(cluster, name), 30, "the Event"
        )
        await eventually(
            lambda: (
                (REGISTRY.get_sample_value("joulie_lifecycle_boots_total", timed_out) or 0.0)
                >= before + 1
            ),
            30,
            "the timed-out boot counted",
        )

        # The pod still waits: powered on again, but not before the backoff is over, and as a
        # new boot (a new idempotency key).
        await eventually(lambda: len(arrivals) >= 2, 40, "the second power-on asked for")
        assert all(at >= retry_after for at in arrivals.at[1:])
        second = power_on_asked(arrivals[1], name)
        assert second["uid"] == first["uid"]
        assert second["idempotencyKey"] != first["idempotencyKey"]
