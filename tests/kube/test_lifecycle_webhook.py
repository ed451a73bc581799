"""A shutdown through the webhook actuator, end to end against the real API server: the receiver
accepts it (202), the node stays in shutting-down and is asked again after the shutdown timeout
(a new idempotency key, the same node); once it goes NotReady it is marked off and left alone;
Ready again long after, it was powered on, and everything of ours comes off it.

And a power-on: a pod the scheduler cannot place makes the manager mark an off node booting and
send the receiver a signed POWER_ON; once the node is Ready, everything of ours comes off it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from hack.cluster.runner import LocalCluster
from joulie.api import keys
from joulie.manager.lifecycle.actuator_webhook import verify_signature
from tests.kube.test_lifecycle_races import lifecycle_env, make_nodes, manager, node
from tests.support.lifecycle_nodes import E2E_LABEL, create_pod, phase, untouched
from tests.support.power_receiver import Receiver
from tests.support.waiting import eventually

pytestmark = [pytest.mark.kube, pytest.mark.asyncio]


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
    key = tmp_path / "key"
    key.write_text("shared-secret\n")
    receiver.answers(202)
    (name,) = make_nodes(cluster, "webhook", 1)
    env = lifecycle_env(
        "webhook",
        LIFECYCLE_ACTUATOR="webhook",
        LIFECYCLE_WEBHOOK_URL=receiver.url,
        LIFECYCLE_WEBHOOK_SECRET_FILE=str(key),
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


async def test_a_pod_that_waits_powers_an_off_node_on_through_the_receiver(
    cluster: LocalCluster,
    namespace: str,
    receiver: Receiver,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "joulie-system")
    key = tmp_path / "key"
    key.write_text("shared-secret\n")
    receiver.answers(202)
    (name,) = make_nodes(cluster, "webhook-on", 1)
    # The node as the test above leaves it: powered off by the webhook, still registered,
    # NotReady, cordoned and tainted by us, marked off (and no longer kept Ready by KWOK).
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
    env = lifecycle_env(
        "webhook-on",
        LIFECYCLE_ACTUATOR="webhook",
        LIFECYCLE_WEBHOOK_URL=receiver.url,
        LIFECYCLE_WEBHOOK_SECRET_FILE=str(key),
        LIFECYCLE_HEARTBEAT_STALE="1h",
        LIFECYCLE_NOT_READY_GRACE="1h",
    )
    async with manager(cluster, env):
        # Only the off node could run it: the scheduler finds no node and the pod waits.
        create_pod(
            cluster,
            namespace,
            "waits",
            {"nodeSelector": {E2E_LABEL: "webhook-on"}, "requests": {"cpu": "100m"}},
        )
        await eventually(lambda: receiver.received, 40, "the power-on asked for")
        [sent] = receiver.received
        assert verify_signature(
            b"shared-secret",
            sent.headers["X-Joulie-Timestamp"],
            sent.body,
            sent.headers["X-Joulie-Signature"],
        )
        body = json.loads(sent.body)
        assert (body["node"], body["action"]) == (name, "POWER_ON")
        assert sent.headers["Idempotency-Key"] == body["idempotencyKey"]
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
