"""The energy accounts' one ConfigMap against a real API server, with the manager's own
credentials: written by the leader, read back by the next one (a restart), whose totals
continue; a process that may not write writes nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio
from prometheus_client import CollectorRegistry

from hack.cluster.runner import NAMESPACE, LocalCluster
from joulie.api import keys
from joulie.kube.client import KubeClient
from joulie.kube.writes import NotPermitted, Writer
from joulie.manager import energy_store
from joulie.manager.cache import ClusterCache
from joulie.manager.energy import EnergyAccountant, EnergyCounters
from joulie.manager.power import NodePower, PowerReading
from tests.support import builders

pytestmark = [pytest.mark.kube, pytest.mark.asyncio]

INTERVAL = 60.0
CONFIGMAP = f"/api/v1/namespaces/{NAMESPACE}/configmaps/{energy_store.CONFIGMAP_NAME}"


@pytest_asyncio.fixture
async def manager(cluster: LocalCluster) -> AsyncIterator[KubeClient]:
    """The manager role's own credentials, so its RBAC is what is exercised."""
    async with await KubeClient.from_kubeconfig(str(cluster.role_kubeconfig("manager"))) as c:
        yield c


@pytest.fixture
def no_configmap(cluster: LocalCluster) -> Iterator[None]:
    with cluster.api() as api:
        api.delete(CONFIGMAP)
    yield
    with cluster.api() as api:
        api.delete(CONFIGMAP)


def stored(cluster: LocalCluster) -> dict[str, Any] | None:
    with cluster.api() as api:
        answer = api.get(CONFIGMAP)
    if answer.status_code == 404:
        return None
    answer.raise_for_status()
    data: dict[str, Any] = answer.json()["data"]
    return data


def accountant(client: KubeClient, *, may_write: bool = True) -> EnergyAccountant:
    """An accountant over one node (4 CPUs, 8 GiB) running one standard pod of half of it."""
    cache = ClusterCache(client, "joulie-manager", lambda: None)
    node = builders.node("energy-n1", rv=1, allocatable={"cpu": "4", "memory": "8Gi"})
    cache.nodes._apply({"type": "ADDED", "object": node})
    pod = builders.pod(
        "job",
        namespace="team-a",
        node_name="energy-n1",
        phase="Running",
        rv=2,
        uid="uid-job",
        annotations={keys.WORKLOAD_CLASS_ANNOTATION: "standard"},
        containers=[builders.container({"cpu": "2", "memory": "4Gi"})],
    )
    cache.pods._apply({"type": "ADDED", "object": pod})
    writer = Writer(client, "joulie-manager", may_write=lambda: may_write)
    counters = EnergyCounters.registered(CollectorRegistry())
    made = EnergyAccountant(cache, writer, NAMESPACE, INTERVAL, 500, counters)
    made.new_term()
    return made


def reading(at: float) -> PowerReading:
    return PowerReading(at, {"energy-n1": NodePower(100.0, "http")})


@pytest.mark.usefixtures("no_configmap")
async def test_a_new_leader_continues_the_stored_totals(
    cluster: LocalCluster, manager: KubeClient
) -> None:
    leader = accountant(manager)
    await leader.record(reading(1000.0))
    await leader.record(reading(1000.0 + INTERVAL))
    half = 100.0 * INTERVAL / 2  # the idle draw of one interval, by the pod's share
    data = stored(cluster)
    assert data is not None, "the leader wrote no ConfigMap"
    assert json.loads(data["accounts"]) == pytest.approx({"team-a/standard": half})
    assert float(data["through"]) == 1000.0 + INTERVAL

    successor = accountant(manager)  # a restart: nothing in memory, fresh counters
    await successor.record(reading(1000.0 + INTERVAL))  # counted already: not again
    assert successor.totals.accounts == pytest.approx({"team-a/standard": half})
    await successor.record(reading(1000.0 + 2 * INTERVAL))
    await successor.record(reading(1000.0 + 3 * INTERVAL))
    await successor.end_term()
    data = stored(cluster)
    assert data is not None
    assert json.loads(data["accounts"]) == pytest.approx({"team-a/standard": 2 * half})
    assert float(data["overhead"]) == pytest.approx(2 * 100.0 * INTERVAL - 2 * half)


@pytest.mark.usefixtures("no_configmap")
async def test_a_process_that_may_not_write_writes_nothing(
    cluster: LocalCluster, manager: KubeClient
) -> None:
    follower = accountant(manager, may_write=False)
    await follower.record(reading(1000.0))
    with pytest.raises(NotPermitted):
        await follower.record(reading(1000.0 + INTERVAL))
    await follower.end_term()  # no longer leading: not written, and no error
    assert stored(cluster) is None
