"""The node lifecycle in this process against the real API server, KWOK and kube-scheduler, with
the KWOK actuator: the races a drain must survive.

* a pod that binds after the taint cancels the drain, and the taint and cordon go;
* a manager restarted mid-drain resumes it (or rolls it back when the node became busy);
* an actuator that fails removes nothing, and the node is tried again after its backoff;
* a busy node is never shut down, nor one whose pod only looks like system work.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY

from hack.cluster.runner import LocalCluster
from joulie.api import keys
from joulie.kube.client import KubeClient
from joulie.manager.role import ManagerRole
from joulie.manager.settings import ManagerSettings
from tests.support.lifecycle_nodes import (
    E2E_LABEL,
    KWOK_RBAC,
    bind_pod,
    create_pod,
    forget_kwok_records,
    lifecycle_nodes,
    phase,
    tainted,
    untouched,
)
from tests.support.tokens import role_client
from tests.support.waiting import eventually, wait_until

pytestmark = [pytest.mark.kube, pytest.mark.asyncio]


def lifecycle_env(case: str, **overrides: str) -> dict[str, str]:
    return {
        "NODE_SELECTOR": f"{E2E_LABEL}={case}",
        "RECONCILE_INTERVAL": "1h",
        "LIFECYCLE_MODE": "enforce",
        "LIFECYCLE_ACTUATOR": "kwok",
        "LIFECYCLE_INTERVAL": "0.5s",
        "LIFECYCLE_IDLE_GRACE": "1s",
        "LIFECYCLE_DRAIN_SETTLE": "1s",
        "LIFECYCLE_BUDGET_PCT": "100",
        "LIFECYCLE_MAX_CONCURRENT_DRAINS": "10",
        "LIFECYCLE_BACKOFF": "2s",
        **overrides,
    }


def make_nodes(cluster: LocalCluster, case: str, count: int) -> list[str]:
    nodes = lifecycle_nodes(case, count)
    cluster.create_ready_nodes(nodes)
    return [n["metadata"]["name"] for n in nodes]


@pytest.fixture
def kwok_delete_granted(cluster: LocalCluster) -> Iterator[None]:
    cluster.kubectl("apply", "-f", str(KWOK_RBAC))
    yield
    cluster.kubectl("delete", "--ignore-not-found", "-f", str(KWOK_RBAC))
    forget_kwok_records(cluster)


@asynccontextmanager
async def manager(cluster: LocalCluster, env: dict[str, str]) -> AsyncIterator[ManagerRole]:
    loaded = ManagerSettings.from_env(env)
    assert not loaded.problems, loaded.problems
    client = await KubeClient.from_kubeconfig(str(cluster.role_kubeconfig("manager")))
    role = ManagerRole(loaded.settings, client)
    stopping = asyncio.Event()
    task = asyncio.create_task(role.run(stopping))
    try:
        await eventually(lambda: role.is_leader, 40, "the role to lead")
        yield role
    finally:
        stopping.set()
        await asyncio.wait_for(task, 30)
        await client.close()


def node(cluster: LocalCluster, name: str) -> dict[str, Any] | None:
    with cluster.api() as api:
        answer = api.get(f"/api/v1/nodes/{name}")
        if answer.status_code == 404:
            return None
        answer.raise_for_status()
        found: dict[str, Any] = answer.json()
        return found


async def passes_go_by(count: int) -> None:
    """Wait until the lifecycle (in this process) has made ``count`` more passes."""
    start = REGISTRY.get_sample_value("joulie_lifecycle_passes_total") or 0.0
    await eventually(
        lambda: (
            (REGISTRY.get_sample_value("joulie_lifecycle_passes_total") or 0.0) >= start + count
        ),
        30,
        f"{count} more lifecycle passes",
    )


def node_events(cluster: LocalCluster, name: str) -> dict[str, str]:
    """Reason -> note of the Events about the Node ``name``."""
    with cluster.api() as api:
        answer = api.get(
            "/apis/events.k8s.io/v1/events",
            params={"fieldSelector": f"regarding.kind=Node,regarding.name={name}"},
        )
        answer.raise_for_status()
        return {e["reason"]: e.get("note", "") for e in answer.json()["items"]}


def lifecycle_condition(cluster: LocalCluster, name: str) -> dict[str, Any] | None:
    with cluster.api() as api:
        answer = api.get(f"/apis/{keys.API_VERSION}/{keys.NODE_TWIN_PLURAL}/{name}")
        if answer.status_code == 404:
            return None
        conditions = (answer.json().get("status") or {}).get("conditions") or ()
        return next((c for c in conditions if c["type"] == keys.LIFECYCLE_CONDITION), None)


async def test_a_pod_bound_after_the_taint_cancels_the_drain(
    cluster: LocalCluster,
    namespace: str,
    kwok_delete_granted: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "joulie-system")
    (name,) = make_nodes(cluster, "race-bind", 1)
    # A long settle: the pod lands while the drain waits for the scheduler to see the taint.
    async with manager(cluster, lifecycle_env("race-bind", LIFECYCLE_DRAIN_SETTLE="1h")):
        drained = await eventually(
            lambda: phase(node(cluster, name)) == "draining" and node(cluster, name),
            30,
            "the idle node's drain to start",
        )
        assert tainted(drained)
        assert drained["spec"]["unschedulable"]
        bind_pod(cluster, namespace, name)
        await eventually(lambda: untouched(node(cluster, name)), 30, "the drain to be undone")
        # Said where an operator looks: an Event on the Node and the NodeTwin's condition.
        reasons = await eventually(
            lambda: (
                {"LifecycleStarted", "LifecycleCancelled"} <= set(node_events(cluster, name))
                and node_events(cluster, name)
            ),
            30,
            "the drain's Events",
        )
        assert "a workload pod landed" in reasons["LifecycleCancelled"]
        # The condition says so too: cancelled, then nothing to do (the node is busy).
        await eventually(
            lambda: (
                (lifecycle_condition(cluster, name) or {}).get("reason")
                in ("Cancelled", "NoAction")
            ),
            30,
            "the NodeLifecycle condition to leave Started",
        )
        # It stays up and untouched while the pod is there.
        await passes_go_by(4)
        assert untouched(node(cluster, name))


async def test_a_restarted_manager_resumes_a_drain(
    cluster: LocalCluster, kwok_delete_granted: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "joulie-system")
    (name,) = make_nodes(cluster, "restart-resume", 1)
    env = lifecycle_env("restart-resume", LIFECYCLE_DRAIN_SETTLE="1h")
    async with manager(cluster, env):
        await eventually(lambda: phase(node(cluster, name)) == "draining", 30, "a drain")
    # The first manager is gone mid-drain; its successor settles sooner and finishes the drain.
    assert phase(node(cluster, name)) == "draining"
    async with manager(cluster, {**env, "LIFECYCLE_DRAIN_SETTLE": "1s"}):
        await eventually(lambda: node(cluster, name) is None, 30, "the KWOK node to be removed")


async def test_a_restarted_manager_rolls_back_a_drain_whose_node_got_busy(
    cluster: LocalCluster,
    namespace: str,
    kwok_delete_granted: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "joulie-system")
    (name,) = make_nodes(cluster, "restart-busy", 1)
    env = lifecycle_env("restart-busy", LIFECYCLE_DRAIN_SETTLE="1h")
    async with manager(cluster, env):
        await eventually(lambda: phase(node(cluster, name)) == "draining", 30, "a drain")
    bind_pod(cluster, namespace, name)  # while no manager runs
    async with manager(cluster, {**env, "LIFECYCLE_DRAIN_SETTLE": "1s"}):
        await eventually(lambda: untouched(node(cluster, name)), 30, "the drain to be undone")
        await passes_go_by(4)
        assert untouched(node(cluster, name))


async def test_a_taint_of_ours_without_a_phase_is_rolled_back(
    cluster: LocalCluster, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manager that died between writes (or an operator who removed the phase) leaves a taint
    and a cordon that nothing explains: the next leader takes them off."""
    monkeypatch.setenv("POD_NAMESPACE", "joulie-system")
    (name,) = make_nodes(cluster, "orphan", 1)
    bind_pod(cluster, namespace, name)  # busy: only the roll-back may touch it
    with cluster.api() as api:
        api.patch(
            f"/api/v1/nodes/{name}",
            json={
                "metadata": {"annotations": {keys.LIFECYCLE_CORDONED_ANNOTATION: "true"}},
                "spec": {
                    "unschedulable": True,
                    "taints": [{"key": keys.DRAINING_TAINT, "effect": "NoSchedule"}],
                },
            },
            headers={"Content-Type": "application/merge-patch+json"},
        ).raise_for_status()
    async with manager(cluster, lifecycle_env("orphan")):
        await eventually(lambda: untouched(node(cluster, name)), 30, "the roll-back")


async def test_a_failing_actuator_removes_nothing_and_is_retried_after_its_backoff(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the grant to delete nodes the KWOK actuator fails (403): the node stays, its taint
    and cordon are undone, a backoff is written; once granted, the retry removes it."""
    monkeypatch.setenv("POD_NAMESPACE", "joulie-system")
    cluster.kubectl("delete", "--ignore-not-found", "-f", str(KWOK_RBAC))
    forget_kwok_records(cluster)
    (name,) = make_nodes(cluster, "fail", 1)
    try:
        async with manager(cluster, lifecycle_env("fail", LIFECYCLE_BACKOFF="3s")):
            failed = await eventually(
                lambda: (
                    (found := node(cluster, name)) is not None
                    and (found["metadata"].get("annotations") or {}).get(
                        keys.LIFECYCLE_FAILURES_ANNOTATION
                    )
                    and found
                ),
                30,
                "a failed shutdown",
            )
            annotations = failed["metadata"]["annotations"]
            assert keys.LIFECYCLE_RETRY_AFTER_ANNOTATION in annotations
            assert untouched(failed)
            cluster.kubectl("apply", "-f", str(KWOK_RBAC))
            await eventually(lambda: node(cluster, name) is None, 40, "the retry to remove it")
    finally:
        cluster.kubectl("delete", "--ignore-not-found", "-f", str(KWOK_RBAC))
    forget_kwok_records(cluster)


async def test_a_busy_node_is_never_shut_down(
    cluster: LocalCluster,
    namespace: str,
    kwok_delete_granted: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "joulie-system")
    busy, idle = make_nodes(cluster, "busy", 2)
    bind_pod(cluster, namespace, busy)
    async with manager(cluster, lifecycle_env("busy")):
        await eventually(lambda: node(cluster, idle) is None, 30, "the idle node to be removed")
        await passes_go_by(6)
        assert untouched(node(cluster, busy))


async def test_dry_run_decides_and_reports_but_changes_nothing(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "joulie-system")
    (name,) = make_nodes(cluster, "dry-run", 1)
    before = node(cluster, name)
    assert before is not None
    env = lifecycle_env("dry-run")
    del env["LIFECYCLE_MODE"], env["LIFECYCLE_ACTUATOR"]  # the default mode is dry-run
    async with manager(cluster, env) as role:
        assert role.lifecycle is not None
        assert role.lifecycle.dry_run
        reasons = await eventually(
            lambda: "LifecycleDryRun" in node_events(cluster, name) and node_events(cluster, name),
            30,
            "the dry-run's Event",
        )
        note = reasons["LifecycleDryRun"]
        assert "(idle, open, boot exceeded, idle exceeded) -> START_DRAIN" in note, note
        await passes_go_by(4)
    after = node(cluster, name)
    assert after is not None
    assert untouched(after)
    kept = before["metadata"].get("annotations") or {}
    assert (after["metadata"].get("annotations") or {}) == kept  # not even the idle spell


async def test_no_action_on_a_stale_cache(
    cluster: LocalCluster, kwok_delete_granted: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass acts only on caches recently confirmed current by the API server; with a bound of
    1 ms, no watch is ever that fresh, so the idle node is left alone and the passes say so."""
    monkeypatch.setenv("POD_NAMESPACE", "joulie-system")
    (name,) = make_nodes(cluster, "stale", 1)
    skipped = REGISTRY.get_sample_value("joulie_lifecycle_skipped_passes_total") or 0.0
    async with manager(cluster, lifecycle_env("stale", LIFECYCLE_STALE_AFTER="1ms")) as role:
        assert role.lifecycle is not None
        await eventually(
            lambda: (
                (REGISTRY.get_sample_value("joulie_lifecycle_skipped_passes_total") or 0)
                >= skipped + 6
            ),
            30,
            "six skipped passes",
        )
    assert untouched(node(cluster, name))


async def test_an_idle_node_a_pending_pod_could_use_is_held(
    cluster: LocalCluster,
    namespace: str,
    kwok_delete_granted: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pod waiting for a node keeps an idle node it would fit from being drained (the check
    reads CPU and GPUs only: this pod's node selector matches nothing, so it keeps waiting);
    once it is gone, the node is drained and removed."""
    monkeypatch.setenv("POD_NAMESPACE", "joulie-system")
    (name,) = make_nodes(cluster, "demand", 1)
    spec = {"nodeSelector": {"joulie.io/e2e": "no-such-node"}, "requests": {"cpu": "1"}}
    pod = create_pod(cluster, namespace, "waiting", spec)
    async with manager(cluster, lifecycle_env("demand")):
        notes = await eventually(
            lambda: "LifecycleHeld" in node_events(cluster, name) and node_events(cluster, name),
            30,
            "the node held",
        )
        assert "pending pods could use the node" in notes["LifecycleHeld"]
        await passes_go_by(4)
        assert untouched(node(cluster, name))
        with cluster.api() as api:
            api.delete(f"/api/v1/namespaces/{namespace}/pods/{pod}").raise_for_status()
        await eventually(lambda: node(cluster, name) is None, 30, "the node drained and removed")


def tenant_pod(cluster: LocalCluster, namespace: str, node: str, metadata: dict[str, Any]) -> None:
    """A pod on ``node`` created by a ServiceAccount that may only create pods in
    ``namespace`` (impersonated), with ``metadata`` of its choosing."""
    account = f"system:serviceaccount:{namespace}:tenant"
    with cluster.api() as api:
        for path, body in (
            (f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": "tenant"}}),
            (
                f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
                {
                    "metadata": {"name": "pods"},
                    "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}],
                },
            ),
            (
                f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
                {
                    "metadata": {"name": "tenant-pods"},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "Role",
                        "name": "pods",
                    },
                    "subjects": [
                        {"kind": "ServiceAccount", "name": "tenant", "namespace": namespace}
                    ],
                },
            ),
        ):
            answer = api.post(path, json=body)
            if answer.status_code != 409:
                answer.raise_for_status()
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"generateName": "lookalike-", **metadata},
            "spec": {
                "nodeName": node,
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "c", "image": "busybox"}],
            },
        }

        def create() -> httpx.Response | None:
            answer = api.post(
                f"/api/v1/namespaces/{namespace}/pods",
                headers={"Impersonate-User": account},
                json=pod,
            )
            return None if answer.status_code == 403 else answer

        # The API server's authorizer learns a new RoleBinding a moment after it is stored
        # (a 403 came back under CI's load): wait for the grant, not a fixed time.
        wait_until(create, 20, "the tenant's grant to reach the authorizer").raise_for_status()


async def test_a_pod_that_only_looks_like_system_work_keeps_its_node_on(
    cluster: LocalCluster,
    namespace: str,
    kwok_delete_granted: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tenant that may only create pods writes the mirror annotation and a Node owner
    reference itself: such pods were taken for static pods, and their nodes drained and
    deleted about 2 s later (with a real actuator, powered off under a running pod)."""
    monkeypatch.setenv("POD_NAMESPACE", "joulie-system")
    annotated, owned, idle = make_nodes(cluster, "lookalike", 3)
    live = node(cluster, owned)
    assert live is not None
    node_owner = {
        "apiVersion": "v1",
        "kind": "Node",
        "name": owned,
        "uid": live["metadata"]["uid"],
        "controller": True,
    }
    tenant_pod(cluster, namespace, annotated, {"annotations": {"kubernetes.io/config.mirror": "x"}})
    tenant_pod(cluster, namespace, owned, {"ownerReferences": [node_owner]})
    async with manager(cluster, lifecycle_env("lookalike")):
        await eventually(lambda: node(cluster, idle) is None, 30, "the idle node to be removed")
        await passes_go_by(6)
        assert untouched(node(cluster, annotated))
        assert untouched(node(cluster, owned))


async def test_the_manager_may_delete_only_nodes_kwok_fakes(
    cluster: LocalCluster, kwok_delete_granted: None
) -> None:
    # Its grant covered every Node: with it, a real Node (and every pod bound to it) could go.
    fake, real = lifecycle_nodes("vap", 1)[0], lifecycle_nodes("vap", 1, kwok=False)[0]
    cluster.create_ready_nodes([fake])
    with cluster.api() as api:
        api.post("/api/v1/nodes", json=real).raise_for_status()  # no kubelet: never Ready
    with role_client(cluster, "manager") as as_manager:
        real_path = f"/api/v1/nodes/{real['metadata']['name']}"
        # Tried without effect (dryRun) until the API server has loaded the policy.
        wait_until(
            lambda: as_manager.delete(real_path, params={"dryRun": "All"}).status_code == 403,
            30,
            "the admission policy to be in force",
        )
        refused = as_manager.delete(real_path)
        assert refused.status_code == 403
        assert "deletes only Nodes that KWOK fakes" in refused.text
        deleted = as_manager.delete(f"/api/v1/nodes/{fake['metadata']['name']}")
        assert deleted.status_code == 200, deleted.text
    with cluster.api() as api:
        assert api.get(real_path).status_code == 200
        api.delete(real_path)
