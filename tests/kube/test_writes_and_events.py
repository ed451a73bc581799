"""Change-only writes and de-duplicated events against a real API server, counted through the
client's own request metrics."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from hack.cluster.runner import LocalCluster
from joulie.api import keys
from joulie.kube import metrics
from joulie.kube.client import APPLY_PATCH, KubeClient
from joulie.kube.events import WARNING, EventRecorder, ObjectRef
from joulie.kube.informer import Informer
from joulie.kube.ownership import Observed, observe
from joulie.kube.writes import NotPermitted, Writer
from tests.support.builders import joulie_object, nodetwin
from tests.support.waiting import eventually

pytestmark = [pytest.mark.kube, pytest.mark.asyncio]

TWINS = "/apis/joulie.io/v1alpha1/nodetwins"


@pytest_asyncio.fixture
async def manager(cluster: LocalCluster) -> AsyncIterator[KubeClient]:
    """The manager role's own credentials, so its RBAC is what is exercised."""
    async with await KubeClient.from_kubeconfig(str(cluster.role_kubeconfig("manager"))) as c:
        yield c


def twin(name: str, profile: str, pct: int) -> dict[str, Any]:
    return nodetwin(name, profile, spec={"cpu": {"packagePowerCapPctOfMax": pct}})


async def test_unchanged_desired_state_is_written_once(manager: KubeClient) -> None:
    """Without a cache entry the writer's own memory of its last apply stops repeats; with one,
    the owned-field comparison does, also for a fresh writer that remembers nothing."""
    writer = Writer(manager, "joulie-manager")
    path = f"{TWINS}/writes-1"
    before = metrics.write_count("nodetwins")
    first = await writer.apply(path, twin("writes-1", "eco", 60), observed=None)
    assert first is not None
    stale = observe(first, "joulie-manager")  # what a cache shows until it catches up
    for _ in range(100):
        await writer.apply(path, twin("writes-1", "eco", 60), observed=stale)
    assert metrics.write_count("nodetwins") - before == 1

    informer: Informer[Observed] = Informer(
        manager, TWINS, lambda raw: observe(raw, "joulie-manager")
    )
    stopping = asyncio.Event()
    task = asyncio.create_task(informer.run(stopping))
    await informer.wait_synced(10)
    fresh = Writer(manager, "joulie-manager")  # no memory of earlier writes
    before = metrics.write_count()
    for _ in range(100):
        await fresh.apply(path, twin("writes-1", "eco", 60), observed=informer.get("writes-1"))
    assert metrics.write_count() - before == 0

    # A real change is written, and only once, while the cache catches up and after.
    await fresh.apply(path, twin("writes-1", "eco", 50), observed=informer.get("writes-1"))
    assert metrics.write_count() - before == 1

    def caught_up() -> bool:
        cached = informer.get("writes-1")
        return cached is not None and cached.fields["spec"]["cpu"]["packagePowerCapPctOfMax"] == 50

    for _ in range(20):
        await fresh.apply(path, twin("writes-1", "eco", 50), observed=informer.get("writes-1"))
    await eventually(caught_up, 10, "the informer to see the change")
    for _ in range(20):
        await fresh.apply(path, twin("writes-1", "eco", 50), observed=informer.get("writes-1"))
    assert metrics.write_count() - before == 1
    stopping.set()
    await task


async def test_foreign_fields_do_not_cause_writes(manager: KubeClient) -> None:
    """Another field manager's spec field and condition leave this manager's apply a no-op;
    dropping one of its own fields is a change. Read from the real server's managedFields."""
    path = f"{TWINS}/writes-4"
    writer = Writer(manager, "joulie-manager", map_lists={"conditions": ("type",)})
    desired = twin("writes-4", "eco", 60)
    await writer.apply(path, desired, observed=None)
    status = {
        **desired,
        "status": {
            "schedulableClass": "eco",
            "conditions": [
                {
                    "type": "AgentReporting",
                    "status": "True",
                    "reason": "R",
                    "message": "m",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
        },
    }
    del status["spec"]
    await writer.apply(f"{path}/status", status, observed=None)
    other = joulie_object(keys.NODE_TWIN_KIND, "writes-4")
    await manager.request(
        "PATCH",
        path,
        params={"fieldManager": "someone-else", "force": "true"},
        body={**other, "spec": {"cpu": {"governor": {"preset": "balanced"}}}},
        content_type=APPLY_PATCH,
    )
    raw = await manager.request(
        "PATCH",
        f"{path}/status",
        params={"fieldManager": "someone-else", "force": "true"},
        body={
            **other,
            "status": {
                "conditions": [
                    {
                        "type": "Foreign",
                        "status": "False",
                        "reason": "X",
                        "message": "y",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ]
            },
        },
        content_type=APPLY_PATCH,
    )
    fresh = Writer(manager, "joulie-manager", map_lists={"conditions": ("type",)})
    before = metrics.write_count()
    assert await fresh.apply(path, desired, observed=observe(raw, "joulie-manager")) is None
    assert (
        await fresh.apply(
            f"{path}/status",
            status,
            observed=observe(raw, "joulie-manager", "status", keep=("status",)),
        )
        is None
    )
    assert metrics.write_count() == before
    # Our own cpu cap leaves the spec: that is a change (the apply removes it).
    smaller = {**desired, "spec": {"nodeName": "writes-4", "profile": "eco"}}
    answer = await fresh.apply(path, smaller, observed=observe(raw, "joulie-manager"))
    assert answer is not None
    assert answer["spec"]["cpu"] == {"governor": {"preset": "balanced"}}  # theirs stays


async def test_writes_stop_when_not_permitted(manager: KubeClient) -> None:
    allowed = [True]
    writer = Writer(manager, "joulie-manager", may_write=lambda: allowed[0])
    await writer.apply(f"{TWINS}/writes-5", twin("writes-5", "eco", 60), observed=None)
    allowed[0] = False
    before = metrics.write_count()
    with pytest.raises(NotPermitted):
        await writer.apply(f"{TWINS}/writes-5", twin("writes-5", "eco", 70), observed=None)
    with pytest.raises(NotPermitted):
        await writer.delete(f"{TWINS}/writes-5")
    assert metrics.write_count() == before


async def test_status_goes_through_the_subresource(manager: KubeClient) -> None:
    writer = Writer(manager, "joulie-manager")
    await writer.apply(f"{TWINS}/writes-2", twin("writes-2", "performance", 100), observed=None)
    status = {
        **joulie_object(keys.NODE_TWIN_KIND, "writes-2"),
        "status": {"schedulableClass": "performance"},
    }
    stored = await writer.apply(f"{TWINS}/writes-2/status", status, observed=None)
    assert stored is not None
    assert stored["status"]["schedulableClass"] == "performance"
    # Status in the main resource is ignored by the server, which is why the subresource exists.
    spec_only = await manager.request("GET", f"{TWINS}/writes-2")
    assert spec_only["status"] == {"schedulableClass": "performance"}
    writer.forget(f"{TWINS}/writes-2")
    assert len(writer) == 0  # the object and its status path are both forgotten


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
    node = await writer.merge_patch("/api/v1/nodes/label-node", patch, observed=None)
    assert node is not None
    assert node["metadata"]["labels"]["joulie.io/power-profile"] == "eco"
    before = metrics.write_count("nodes")
    assert (
        await Writer(manager, "x").merge_patch("/api/v1/nodes/label-node", patch, observed=node)
        is None
    )
    assert metrics.write_count("nodes") == before


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
