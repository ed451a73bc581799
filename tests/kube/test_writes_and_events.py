"""Change-only writes and de-duplicated events against a real API server, counted through the
client's own request metrics."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from hack.cluster.runner import LocalCluster
from joulie.kube import metrics
from joulie.kube.client import KubeClient
from joulie.kube.events import WARNING, EventRecorder, ObjectRef
from joulie.kube.informer import Informer
from joulie.kube.projections import identity
from joulie.kube.writes import Writer, retry_on_conflict

pytestmark = [pytest.mark.kube, pytest.mark.asyncio]

TWINS = "/apis/joulie.io/v1alpha1/nodetwins"


@pytest_asyncio.fixture
async def manager(cluster: LocalCluster) -> AsyncIterator[KubeClient]:
    """The manager role's own credentials, so its RBAC is what is exercised."""
    async with await KubeClient.from_kubeconfig(str(cluster.role_kubeconfig("manager"))) as c:
        yield c


def twin(name: str, profile: str, pct: int) -> dict[str, Any]:
    return {
        "apiVersion": "joulie.io/v1alpha1",
        "kind": "NodeTwin",
        "metadata": {"name": name},
        "spec": {"nodeName": name, "profile": profile, "cpu": {"packagePowerCapPctOfMax": pct}},
    }


async def test_unchanged_desired_state_is_written_once(manager: KubeClient) -> None:
    writer = Writer(manager, "joulie-manager")
    path = f"{TWINS}/writes-1"
    before = metrics.write_count("nodetwins")
    for _ in range(100):
        await writer.apply(path, twin("writes-1", "eco", 60))
    assert metrics.write_count("nodetwins") - before == 1

    # The same through the informer cache, as a role does: the first apply happened already.
    informer: Informer[Any] = Informer(manager, TWINS, identity)
    stopping = asyncio.Event()
    task = asyncio.create_task(informer.run(stopping))
    await informer.wait_synced(10)
    fresh = Writer(manager, "joulie-manager")  # no memory of earlier writes
    before = metrics.write_count()
    for _ in range(100):
        await fresh.apply(path, twin("writes-1", "eco", 60), observed=informer.get("writes-1"))
    assert metrics.write_count() - before == 0

    # A real change is written, and only once.
    await fresh.apply(path, twin("writes-1", "eco", 50), observed=informer.get("writes-1"))
    assert metrics.write_count() - before == 1
    for _ in range(50):
        await asyncio.sleep(0.05)
        if informer.get("writes-1")["spec"]["cpu"]["packagePowerCapPctOfMax"] == 50:
            break
    for _ in range(20):
        await fresh.apply(path, twin("writes-1", "eco", 50), observed=informer.get("writes-1"))
    assert metrics.write_count() - before == 1
    stopping.set()
    await task


async def test_status_goes_through_the_subresource(manager: KubeClient) -> None:
    writer = Writer(manager, "joulie-manager")
    await writer.apply(f"{TWINS}/writes-2", twin("writes-2", "performance", 100))
    status = {
        "apiVersion": "joulie.io/v1alpha1",
        "kind": "NodeTwin",
        "metadata": {"name": "writes-2"},
        "status": {"schedulableClass": "performance"},
    }
    stored = await writer.apply(f"{TWINS}/writes-2/status", status)
    assert stored is not None
    assert stored["status"]["schedulableClass"] == "performance"
    # Status in the main resource is ignored by the server, which is why the subresource exists.
    spec_only = await manager.request("GET", f"{TWINS}/writes-2")
    assert spec_only["status"] == {"schedulableClass": "performance"}


async def test_node_label_merge_patch_skips_when_already_there(
    cluster: LocalCluster, manager: KubeClient
) -> None:
    with cluster.api() as api:
        api.post(
            "/api/v1/nodes",
            json={"apiVersion": "v1", "kind": "Node", "metadata": {"name": "label-node"}},
        )
    writer = Writer(manager, "joulie-manager")
    patch = {"metadata": {"labels": {"joulie.io/power-profile": "eco"}}}
    node = await writer.merge_patch("/api/v1/nodes/label-node", patch)
    assert node is not None
    assert node["metadata"]["labels"]["joulie.io/power-profile"] == "eco"
    before = metrics.write_count("nodes")
    assert (
        await Writer(manager, "x").merge_patch("/api/v1/nodes/label-node", patch, observed=node)
        is None
    )
    assert metrics.write_count("nodes") == before


async def test_conflicts_are_retried(manager: KubeClient) -> None:
    await Writer(manager, "joulie-manager").apply(f"{TWINS}/writes-3", twin("writes-3", "eco", 60))
    attempts = 0

    async def update() -> Any:
        nonlocal attempts
        attempts += 1
        current = await manager.request("GET", f"{TWINS}/writes-3")
        if attempts == 1:
            # Someone else writes in between: our resourceVersion is now stale.
            await manager.request(
                "PATCH",
                f"{TWINS}/writes-3",
                body={"spec": {"profile": "performance"}},
                content_type="application/merge-patch+json",
            )
        # A merge patch carrying the resourceVersion read above: optimistic concurrency.
        patch = {
            "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
            "spec": {"cpu": {"packagePowerCapPctOfMax": 70}},
        }
        return await manager.request(
            "PATCH", f"{TWINS}/writes-3", body=patch, content_type="application/merge-patch+json"
        )

    result = await retry_on_conflict(update)
    assert attempts == 2
    assert result["spec"]["cpu"]["packagePowerCapPctOfMax"] == 70


async def test_repeated_events_do_not_flood(cluster: LocalCluster, manager: KubeClient) -> None:
    clock = [1000.0]
    recorder = EventRecorder(
        manager, "joulie.io/manager", "test-pod", series_interval=30, clock=lambda: clock[0]
    )
    node = ObjectRef(kind="Node", name="event-node")
    before = metrics.REQUESTS.labels("create", "events", "201")._value.get()
    for _ in range(50):
        await recorder.emit(
            node, WARNING, "DowngradeDeferred", "Reconcile", "performance pods still running"
        )
        clock[0] += 1  # 50 repeats over 50 s: one create, one series patch
    with cluster.api() as admin:  # the manager may write events, not read them
        listed = admin.get("/apis/events.k8s.io/v1/namespaces/default/events").json()
    mine = [e for e in listed["items"] if e["regarding"]["name"] == "event-node"]
    assert len(mine) == 1
    assert mine[0]["reason"] == "DowngradeDeferred"
    assert mine[0]["series"]["count"] == 31
    assert metrics.REQUESTS.labels("create", "events", "201")._value.get() - before == 1
