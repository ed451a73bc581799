"""The extender's caches against the real API server: twins,
hardware and the manager's Lease arrive by watch, a twin's change reaches the scores without a
re-list, a performance pod is filtered off eco and draining nodes, a twin whose reading failed
is neutral, and a Lease that runs out makes every score neutral."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio

from hack.cluster.runner import LocalCluster
from joulie.api import keys
from joulie.core.scoring import NEUTRAL_PRIORITY as NEUTRAL
from joulie.extender.cache import NODEHARDWARES, NODETWINS, ExtenderCache
from joulie.extender.placement import CachePlacement
from joulie.kube.client import KubeClient
from tests.support.builders import container, nodehardware, nodetwin, pod

pytestmark = [pytest.mark.kube, pytest.mark.asyncio]


def performance_pod(performance: bool = True) -> dict[str, Any]:
    klass = "performance" if performance else "standard"
    return pod(
        namespace="default",
        annotations={keys.WORKLOAD_CLASS_ANNOTATION: klass},
        containers=[container({"cpu": "4"})],
    )


def twin_status(klass: str, measured: float, capped: float = 1000.0) -> dict[str, Any]:
    return {
        "schedulableClass": klass,
        "predictedPowerHeadroomScore": (capped - measured) / capped * 100,
        "predictedCoolingStressScore": 20,
        "powerMeasurement": {
            "source": "http",
            "measuredNodePowerW": measured,
            "nodeCappedPowerW": capped,
            "powerTrendWPerMin": 0,
        },
    }


class World:
    """Nodes' twins and hardware, and a manager Lease in a namespace of the test's own."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.tag = uuid.uuid4().hex[:6]
        self.namespace = f"exc-{self.tag}"
        self.nodes = [f"exc-{self.tag}-{i}" for i in range(4)]

    def name(self, i: int) -> str:
        return self.nodes[i]

    def twin(self, node: str, status: dict[str, Any] | Any) -> None:
        with self.cluster.api() as api:
            if api.get(f"{NODETWINS}/{node}").status_code == 404:
                api.post(NODETWINS, json=nodetwin(node)).raise_for_status()
            api.patch(
                f"{NODETWINS}/{node}/status",
                headers={"Content-Type": "application/merge-patch+json"},
                json={"status": status},
            ).raise_for_status()

    def hardware(self, node: str, cores: int, max_watts_per_socket: float) -> None:
        with self.cluster.api() as api:
            api.post(NODEHARDWARES, json=nodehardware(node)).raise_for_status()
            api.patch(
                f"{NODEHARDWARES}/{node}/status",
                headers={"Content-Type": "application/merge-patch+json"},
                json={
                    "status": {
                        "cpu": {
                            "sockets": 2,
                            "totalCores": cores,
                            "capRange": {"maxWattsPerSocket": max_watts_per_socket},
                        }
                    }
                },
            ).raise_for_status()

    def lease(self, renewed: datetime, duration_s: int = 15) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases"
        metadata: dict[str, str] = {"name": keys.MANAGER_LEASE}
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": "manager-0",
                "leaseDurationSeconds": duration_s,
                "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            },
        }
        with self.cluster.api() as api:
            current = api.get(f"{path}/{keys.MANAGER_LEASE}")
            if current.status_code == 404:
                api.post(path, json=body).raise_for_status()
            else:
                metadata["resourceVersion"] = current.json()["metadata"]["resourceVersion"]
                api.put(f"{path}/{keys.MANAGER_LEASE}", json=body).raise_for_status()


@pytest.fixture
def world(cluster: LocalCluster) -> Iterator[World]:
    w = World(cluster)
    with cluster.api() as api:
        api.post("/api/v1/namespaces", json={"metadata": {"name": w.namespace}})
    yield w
    with cluster.api() as api:
        for node in w.nodes:
            api.delete(f"{NODETWINS}/{node}")
            api.delete(f"{NODEHARDWARES}/{node}")
        api.delete(f"/api/v1/namespaces/{w.namespace}")


@pytest_asyncio.fixture
async def placement(cluster: LocalCluster, world: World) -> AsyncIterator[CachePlacement]:
    # Admin credentials: the Lease lives in a namespace of the test's own, so that no manager of
    # another test is held up by it (the extender's own rights are tested in test_rbac).
    async with await KubeClient.from_kubeconfig(str(cluster.admin_kubeconfig)) as client:
        cache = ExtenderCache(client, world.namespace)
        stopping = asyncio.Event()
        tasks = [asyncio.create_task(i.run(stopping)) for i in cache.informers]
        try:
            yield CachePlacement(cache)
        finally:
            stopping.set()
            await asyncio.gather(*tasks)


async def until(check: Any, what: str, timeout: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def test_the_caches_feed_filter_and_scores(world: World, placement: CachePlacement) -> None:
    eco, perf, draining, unknown = world.nodes
    world.twin(eco, twin_status("eco", measured=200))
    world.twin(perf, twin_status("performance", measured=600))
    world.twin(draining, twin_status("draining", measured=400))
    world.hardware(perf, cores=64, max_watts_per_socket=250)
    world.lease(datetime.now(UTC))
    cache = placement.cache
    # Other tests' twins may be in the cluster too: wait for this test's own.
    await until(
        lambda: placement.ready() and all(n in cache.table for n in (eco, perf, draining)),
        "the caches",
    )

    verdicts = placement.filter(performance_pod(), world.nodes, None)
    reasons = dict(zip(world.nodes, verdicts, strict=True))
    assert [n for n, r in reasons.items() if r is None] == [perf, unknown]
    assert "eco" in str(reasons[eco])
    assert "draining" in str(reasons[draining])
    # Standard pods are never filtered.
    assert placement.filter(performance_pod(False), world.nodes, None) == [None] * len(world.nodes)

    ranked = list(placement.prioritize(performance_pod(False), world.nodes))
    scores = dict(zip(world.nodes, ranked, strict=True))
    assert scores[unknown] == NEUTRAL
    assert scores[eco] > scores[perf]  # more headroom, and eco's bonus for standard pods

    # A change of one twin reaches its score by watch.
    before = scores[eco]
    world.twin(eco, twin_status("eco", measured=990))
    await until(
        lambda: placement.prioritize(performance_pod(False), [eco])[0] < before,
        "the new reading in the score",
    )
    # The pod's own power counts where the node's hardware is known.
    terms = placement.explain(performance_pod(), perf)
    assert terms["podMarginalW"] > 0


async def test_an_expired_lease_makes_every_score_neutral(
    world: World, placement: CachePlacement
) -> None:
    eco = world.nodes[0]
    world.twin(eco, twin_status("eco", measured=100))
    world.lease(datetime.now(UTC))
    await until(lambda: placement.ready() and eco in placement.cache.table, "the caches")
    assert list(placement.prioritize(performance_pod(False), [eco])) != [NEUTRAL]
    world.lease(datetime.now(UTC) - timedelta(seconds=60))
    await until(
        lambda: list(placement.prioritize(performance_pod(False), [eco])) == [NEUTRAL],
        "neutral scores once the Lease has run out",
    )
    assert "Lease" in str(placement.explain(performance_pod(False), eco)["neutral"])


async def test_a_twin_whose_reading_failed_is_neutral(
    world: World, placement: CachePlacement
) -> None:
    good, failed = world.nodes[:2]
    world.twin(good, twin_status("eco", measured=100))
    world.twin(
        failed,
        {**twin_status("eco", measured=100), "powerMeasurement": {"source": "http-error"}},
    )
    world.lease(datetime.now(UTC))
    await until(
        lambda: (
            placement.ready() and good in placement.cache.table and failed in placement.cache.table
        ),
        "the caches",
    )
    scores = placement.prioritize(performance_pod(False), [good, failed])
    assert scores[0] != NEUTRAL
    assert scores[1] == NEUTRAL
    # The filter still knows its class: a performance pod stays off it.
    assert placement.filter(performance_pod(), [failed], None)[0] is not None


async def test_names_only_a_performance_pod_is_kept_off_a_twinless_node_labelled_eco(
    cluster: LocalCluster, world: World, placement: CachePlacement
) -> None:
    """The shipped configuration sends names, not Nodes: the extender's own metadata-only watch
    of the eco label keeps the fallback, and a node relabelled performance is let in again."""
    labelled, plain = world.nodes[:2]
    nodes = "/api/v1/nodes"
    with cluster.api() as api:
        for node, labels in ((labelled, {keys.POWER_PROFILE_LABEL: "eco"}), (plain, {})):
            api.post(
                nodes,
                json={
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": node, "labels": labels},
                },
            ).raise_for_status()
    try:
        cache = placement.cache
        await until(lambda: placement.ready() and labelled in cache.eco_labelled, "the eco label")
        assert plain not in cache.eco_labelled  # only the labelled nodes are watched
        verdicts = placement.filter(performance_pod(), [labelled, plain], None)
        assert "eco" in str(verdicts[0])
        assert verdicts[1] is None
        assert placement.filter(performance_pod(False), [labelled, plain], None) == [None, None]
        # A twin class, where there is one, still decides over the label.
        world.twin(labelled, twin_status("performance", measured=100))
        await until(lambda: labelled in cache.table, "the twin")
        assert placement.filter(performance_pod(), [labelled], None) == [None]
        world.twin(labelled, {"schedulableClass": None})
        with cluster.api() as api:
            api.patch(
                f"{nodes}/{labelled}",
                headers={"Content-Type": "application/merge-patch+json"},
                json={"metadata": {"labels": {keys.POWER_PROFILE_LABEL: "performance"}}},
            ).raise_for_status()
        await until(lambda: labelled not in cache.eco_labelled, "the relabelled node to leave")
        assert placement.filter(performance_pod(), [labelled], None) == [None]
    finally:
        with cluster.api() as api:
            for node in (labelled, plain):
                api.delete(f"{nodes}/{node}")
