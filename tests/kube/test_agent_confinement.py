"""The admission policies that confine the agents, against the real API server.

The DaemonSet agent (manifests/rbac/agent-confinement.yaml): with a token bound to an agent pod on
node A, it writes node A's NodeHardware and NodeTwin status, and is refused node B's with a
message that says why; a token bound to no pod writes nothing.

The pool-mode agent (manifests/rbac/agent-pool-confinement.yaml): it writes the status of a twin
the manager labelled simulated and NodeHardware labelled simulated, and is refused a real node's
twin and NodeHardware, unlabelled NodeHardware, and a NodeHardware describing another node.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from hack.cluster.runner import NAMESPACE, LocalCluster
from joulie.api import keys
from tests.support.builders import joulie_object, node, nodehardware, nodetwin
from tests.support.tokens import pod_bound_token, role_client, token_client
from tests.support.waiting import wait_until

pytestmark = pytest.mark.kube

HARDWARE = f"/apis/{keys.API_VERSION}/{keys.NODE_HARDWARE_PLURAL}"
TWINS = f"/apis/{keys.API_VERSION}/{keys.NODE_TWIN_PLURAL}"
APPLY = {"Content-Type": "application/apply-patch+yaml"}
AGENT = {"fieldManager": "joulie-agent", "force": "true"}
NODES = ("conf-a", "conf-b")


def control_status(name: str) -> dict[str, Any]:
    return {
        **joulie_object(keys.NODE_TWIN_KIND, name),
        "status": {"controlStatus": {"cpu": {"result": "applied"}}},
    }


@pytest.fixture
def agent_on_a(cluster: LocalCluster) -> Iterator[httpx.Client]:
    """An API client holding the token of ServiceAccount joulie-agent bound to a pod on conf-a."""
    with cluster.api() as api:
        for name in NODES:
            api.post("/api/v1/nodes", json=node(name))
            api.post(TWINS, json=nodetwin(name))
        token = pod_bound_token(api, "conf-agent", "conf-a", ttl_s=600)
    client = token_client(cluster, token)
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
            f"{HARDWARE}/conf-a", params=AGENT, headers=APPLY, json=nodehardware("conf-a")
        ),
        20,
        "the policy and the token to be usable",
    )
    assert own.status_code in (200, 201), own.text
    status = agent_on_a.patch(
        f"{HARDWARE}/conf-a/status",
        params=AGENT,
        headers=APPLY,
        json=nodehardware("conf-a", status={"cpu": {"sockets": 2}}),
    )
    assert status.status_code == 200, status.text
    twin = agent_on_a.patch(
        f"{TWINS}/conf-a/status",
        params=AGENT,
        headers=APPLY,
        json={**control_status("conf-a"), "spec": {"nodeName": "conf-a"}},
    )
    assert twin.status_code == 200, twin.text

    other = agent_on_a.patch(
        f"{HARDWARE}/conf-b", params=AGENT, headers=APPLY, json=nodehardware("conf-b")
    )
    assert other.status_code == 403, other.text
    assert "the agent of node conf-a may write only its own node's objects" in other.text
    assert "conf-b" in other.text
    other_twin = agent_on_a.patch(
        f"{TWINS}/conf-b/status",
        params=AGENT,
        headers=APPLY,
        json={**control_status("conf-b"), "spec": {"nodeName": "conf-b"}},
    )
    assert other_twin.status_code == 403, other_twin.text
    # Its own object's name, but claiming to describe another node.
    lying = agent_on_a.patch(
        f"{HARDWARE}/conf-a",
        params=AGENT,
        headers=APPLY,
        json=nodehardware("conf-a", node_name="conf-b"),
    )
    assert lying.status_code in (403, 422), lying.text


def test_a_token_bound_to_no_pod_writes_nothing(cluster: LocalCluster) -> None:
    with cluster.api() as api:
        api.post("/api/v1/nodes", json=node("conf-c"))
    with role_client(cluster, "agent") as agent:
        refused = agent.patch(
            f"{HARDWARE}/conf-c", params=AGENT, headers=APPLY, json=nodehardware("conf-c")
        )
    with cluster.api() as api:
        api.delete("/api/v1/nodes/conf-c")
    assert refused.status_code == 403, refused.text
    assert "token bound to its pod" in refused.text


SIMULATED = "pool-sim"
REAL = "pool-real"
LABELLED_TRUE = {keys.SIMULATED_LABEL: "true"}
LABELLED_FALSE = {keys.SIMULATED_LABEL: "false"}


@pytest.fixture
def pool_agent(cluster: LocalCluster) -> Iterator[httpx.Client]:
    """An API client with joulie-agent-pool's token, and the objects the manager and a real
    node's agent would have written: a twin labelled simulated, a twin labelled real, and the
    real node's NodeHardware labelled real."""
    with cluster.api() as api:
        for name, simulated in ((SIMULATED, "true"), (REAL, "false")):
            twin = nodetwin(name, labels={keys.SIMULATED_LABEL: simulated})
            api.post(TWINS, json=twin).raise_for_status()
        api.post(HARDWARE, json=nodehardware(REAL, labels=LABELLED_FALSE)).raise_for_status()
    client = role_client(cluster, "agent-pool")
    try:
        yield client
    finally:
        client.close()
        with cluster.api() as api:
            for name in (SIMULATED, REAL, "pool-new"):
                api.delete(f"{HARDWARE}/{name}")
                api.delete(f"{TWINS}/{name}")


def test_the_pool_writes_simulated_nodes_only(
    cluster: LocalCluster, pool_agent: httpx.Client
) -> None:
    def apply(path: str, body: dict[str, Any]) -> httpx.Response:
        return pool_agent.patch(path, params=AGENT, headers=APPLY, json=body)

    def publish_simulated() -> httpx.Response | None:
        answer = apply(f"{HARDWARE}/{SIMULATED}", nodehardware(SIMULATED, labels=LABELLED_TRUE))
        return answer if answer.status_code in (200, 201) else None

    own = wait_until(publish_simulated, 20, "the pool to publish a simulated node's NodeHardware")
    assert own.json()["metadata"]["labels"][keys.SIMULATED_LABEL] == "true"
    status = apply(
        f"{HARDWARE}/{SIMULATED}/status",
        nodehardware(SIMULATED, status={"cpu": {"sockets": 2}}),
    )
    assert status.status_code == 200, status.text
    twin = apply(f"{TWINS}/{SIMULATED}/status", control_status(SIMULATED))
    assert twin.status_code == 200, twin.text

    # A real node's twin (the manager labelled it "false") and NodeHardware (its own agent's).
    real_twin = apply(f"{TWINS}/{REAL}/status", control_status(REAL))
    assert real_twin.status_code == 403, real_twin.text
    assert (
        f"joulie-agent-pool may write only for nodes KWOK fakes, and NodeTwin {REAL} is not "
        "labelled joulie.io/simulated=true" in real_twin.text
    )
    taken = apply(f"{HARDWARE}/{REAL}", nodehardware(REAL, labels=LABELLED_TRUE))
    assert taken.status_code == 403, taken.text
    assert f"NodeHardware {REAL} is not labelled joulie.io/simulated=true" in taken.text
    real_status = apply(
        f"{HARDWARE}/{REAL}/status", nodehardware(REAL, status={"cpu": {"sockets": 1}})
    )
    assert real_status.status_code == 403, real_status.text

    # New NodeHardware only labelled simulated (the CRD makes it describe its namesake node).
    unlabelled = apply(f"{HARDWARE}/pool-new", nodehardware("pool-new"))
    assert unlabelled.status_code == 403, unlabelled.text
    assert (
        "joulie-agent-pool may write NodeHardware pool-new only labelled "
        "joulie.io/simulated=true" in unlabelled.text
    )
    lying = apply(
        f"{HARDWARE}/pool-new", nodehardware("pool-new", node_name=REAL, labels=LABELLED_TRUE)
    )
    assert lying.status_code == 422, lying.text
    # Nor may it drop the label from one it wrote.
    unlabel = apply(f"{HARDWARE}/{SIMULATED}", nodehardware(SIMULATED, labels=LABELLED_FALSE))
    assert unlabel.status_code == 403, unlabel.text
    with cluster.api() as api:
        stored = api.get(f"{HARDWARE}/{REAL}").json()
    assert stored["metadata"]["labels"][keys.SIMULATED_LABEL] == "false"
    assert "status" not in stored
