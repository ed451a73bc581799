"""The admission policy that confines a DaemonSet agent to its own node (manifests/rbac/
agent-confinement.yaml), against the real API server: with a token bound to an agent pod on node
A, the agent writes node A's NodeHardware and NodeTwin status, and is refused node B's with a
message that says why; a token bound to no pod writes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml

from hack.cluster.runner import NAMESPACE, LocalCluster
from joulie.api import keys
from tests.support.waiting import wait_until

pytestmark = pytest.mark.kube

HARDWARE = f"/apis/{keys.API_VERSION}/{keys.NODE_HARDWARE_PLURAL}"
TWINS = f"/apis/{keys.API_VERSION}/{keys.NODE_TWIN_PLURAL}"
APPLY = {"Content-Type": "application/apply-patch+yaml"}
AGENT = {"fieldManager": "joulie-agent", "force": "true"}
NODES = ("conf-a", "conf-b")


def hardware(node: str, described: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": keys.API_VERSION,
        "kind": keys.NODE_HARDWARE_KIND,
        "metadata": {"name": node},
        "spec": {"nodeName": described or node},
    }


@pytest.fixture
def agent_on_a(cluster: LocalCluster) -> Iterator[httpx.Client]:
    """An API client holding the token of ServiceAccount joulie-agent bound to a pod on conf-a."""
    with cluster.api() as api:
        for name in NODES:
            api.post("/api/v1/nodes", json={"metadata": {"name": name}})
            api.post(
                TWINS,
                json={
                    **hardware(name),
                    "kind": keys.NODE_TWIN_KIND,
                    "spec": {"nodeName": name, "profile": "eco"},
                },
            )
        pod = api.post(
            f"/api/v1/namespaces/{NAMESPACE}/pods",
            json={
                "metadata": {"name": "conf-agent"},
                "spec": {
                    "nodeName": "conf-a",
                    "serviceAccountName": "joulie-agent",
                    "containers": [{"name": "agent", "image": "example.com/joulie:1"}],
                },
            },
        )
        pod.raise_for_status()
        token = api.post(
            f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/joulie-agent/token",
            json={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {
                    "expirationSeconds": 600,
                    "boundObjectRef": {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": "conf-agent",
                        "uid": pod.json()["metadata"]["uid"],
                    },
                },
            },
        )
        token.raise_for_status()
    client = httpx.Client(
        base_url=cluster.server,
        verify=cluster.ca_tls(),
        headers={"Authorization": f"Bearer {token.json()['status']['token']}"},
        timeout=30,
    )
    try:
        yield client
    finally:
        client.close()
        with cluster.api() as api:
            api.delete(
                f"/api/v1/namespaces/{NAMESPACE}/pods/conf-agent",
                params={"gracePeriodSeconds": "0"},
            )
            for name in NODES:
                api.delete(f"{HARDWARE}/{name}")
                api.delete(f"{TWINS}/{name}")
                api.delete(f"/api/v1/nodes/{name}")


def test_the_agent_writes_its_own_node_only(
    cluster: LocalCluster, agent_on_a: httpx.Client
) -> None:
    whoami = agent_on_a.post(
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    whoami.raise_for_status()
    extra = whoami.json()["status"]["userInfo"].get("extra", {})
    assert extra.get("authentication.kubernetes.io/node-name") == ["conf-a"]

    own = wait_until(
        lambda: agent_on_a.patch(
            f"{HARDWARE}/conf-a", params=AGENT, headers=APPLY, json=hardware("conf-a")
        ),
        20,
        "the policy and the token to be usable",
    )
    assert own.status_code in (200, 201), own.text
    status = agent_on_a.patch(
        f"{HARDWARE}/conf-a/status",
        params=AGENT,
        headers=APPLY,
        json={**hardware("conf-a"), "status": {"cpu": {"sockets": 2}}},
    )
    assert status.status_code == 200, status.text
    twin = agent_on_a.patch(
        f"{TWINS}/conf-a/status",
        params=AGENT,
        headers=APPLY,
        json={
            **hardware("conf-a"),
            "kind": keys.NODE_TWIN_KIND,
            "status": {"controlStatus": {"cpu": {"result": "applied"}}},
        },
    )
    assert twin.status_code == 200, twin.text

    other = agent_on_a.patch(
        f"{HARDWARE}/conf-b", params=AGENT, headers=APPLY, json=hardware("conf-b")
    )
    assert other.status_code == 403, other.text
    assert "the agent of node conf-a may write only its own node's objects" in other.text
    assert "conf-b" in other.text
    other_twin = agent_on_a.patch(
        f"{TWINS}/conf-b/status",
        params=AGENT,
        headers=APPLY,
        json={
            **hardware("conf-b"),
            "kind": keys.NODE_TWIN_KIND,
            "status": {"controlStatus": {"cpu": {"result": "applied"}}},
        },
    )
    assert other_twin.status_code == 403, other_twin.text
    # Its own object's name, but claiming to describe another node.
    lying = agent_on_a.patch(
        f"{HARDWARE}/conf-a",
        params=AGENT,
        headers=APPLY,
        json=hardware("conf-a", described="conf-b"),
    )
    assert lying.status_code in (403, 422), lying.text


def test_a_token_bound_to_no_pod_writes_nothing(cluster: LocalCluster) -> None:
    with cluster.api() as api:
        api.post("/api/v1/nodes", json={"metadata": {"name": "conf-c"}})
    kubeconfig = cluster.role_kubeconfig("agent")
    token = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]
    with httpx.Client(
        base_url=cluster.server,
        verify=cluster.ca_tls(),
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    ) as agent:
        refused = agent.patch(
            f"{HARDWARE}/conf-c", params=AGENT, headers=APPLY, json=hardware("conf-c")
        )
    with cluster.api() as api:
        api.delete("/api/v1/nodes/conf-c")
    assert refused.status_code == 403, refused.text
    assert "token bound to its pod" in refused.text
