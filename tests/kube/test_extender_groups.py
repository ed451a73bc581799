"""The extender's PodGroup view against the real API server, with the extender's own account:
PodGroups are found served, a pod's group and its scheduled members are read from Pods, and a
preemption candidate that takes part of an all-or-nothing gang is dropped while a whole
alternative exists."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio

from hack.cluster.runner import LocalCluster
from joulie.core.preemption_candidates import Candidate, screen_candidates
from joulie.extender.groups import PODGROUP_API, GroupCache, podgroups_served
from joulie.kube.client import KubeClient
from tests.support.builders import container, pod_manifest
from tests.support.waiting import eventually

pytestmark = [pytest.mark.kube, pytest.mark.asyncio]


class Gangs:
    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.namespace = f"gangs-{uuid.uuid4().hex[:6]}"
        self.uids: dict[str, str] = {}

    def podgroup(self, name: str, mode: dict[str, Any] | None) -> None:
        spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": 2}}}
        if mode is not None:
            spec["disruptionMode"] = mode
        with self.cluster.api() as api:
            api.post(
                f"{PODGROUP_API}/namespaces/{self.namespace}/podgroups",
                json={
                    "apiVersion": "scheduling.k8s.io/v1beta1",
                    "kind": "PodGroup",
                    "metadata": {"name": name},
                    "spec": spec,
                },
            ).raise_for_status()

    def pod(self, name: str, group: str | None, node: str) -> None:
        body = pod_manifest(
            name,
            node_name=node,
            containers=[container(image="example.com/c:1")],
            spec={"schedulingGroup": {"podGroupName": group}} if group is not None else None,
        )
        with self.cluster.api() as api:
            created = api.post(f"/api/v1/namespaces/{self.namespace}/pods", json=body)
            created.raise_for_status()
            self.uids[name] = created.json()["metadata"]["uid"]


@pytest.fixture
def gangs(cluster: LocalCluster) -> Iterator[Gangs]:
    g = Gangs(cluster)
    with cluster.api() as api:
        api.post("/api/v1/namespaces", json={"metadata": {"name": g.namespace}})
    yield g
    with cluster.api() as api:
        api.delete(f"/api/v1/namespaces/{g.namespace}", params={"gracePeriodSeconds": "0"})


@pytest_asyncio.fixture
async def extender_client(cluster: LocalCluster) -> AsyncIterator[KubeClient]:
    async with await KubeClient.from_kubeconfig(str(cluster.role_kubeconfig("extender"))) as c:
        yield c


async def test_group_membership_from_pods_and_podgroups(
    gangs: Gangs, extender_client: KubeClient
) -> None:
    assert await podgroups_served(extender_client)
    gangs.podgroup("whole", {"all": {}})
    gangs.podgroup("loose", None)  # unset: one pod at a time
    # Nodes need not exist for this: the pods are only records of where they were bound.
    gangs.pod("w1", "whole", "node-a")
    gangs.pod("w2", "whole", "node-b")
    gangs.pod("l1", "loose", "node-a")
    gangs.pod("solo", None, "node-c")
    cache = GroupCache(extender_client, podgroups=True)
    stopping = asyncio.Event()
    tasks = [asyncio.create_task(i.run(stopping)) for i in cache.informers]
    try:
        u = gangs.uids
        # Only pods in a group are indexed by UID: the rest cost the cache their keys alone.
        in_groups = [u["w1"], u["w2"], u["l1"]]
        await eventually(
            lambda: (
                all(cache.pods.by_index("uid", x) for x in in_groups)
                and cache.pods.get(f"{gangs.namespace}/solo") is not None
                and cache.groups is not None
                and cache.groups.get(f"{gangs.namespace}/whole") is not None
            ),
            20,
            "the pods and groups in the caches",
        )
        membership = cache.membership([u["w1"], u["l1"], u["solo"]])
        assert membership.group_of == {
            u["w1"]: f"{gangs.namespace}/whole",
            u["l1"]: f"{gangs.namespace}/loose",
        }
        assert membership.all_or_nothing_members == {
            f"{gangs.namespace}/whole": frozenset({u["w1"], u["w2"]})
        }
        part = Candidate("node-a", (u["w1"], u["l1"]))
        other = Candidate("node-c", (u["solo"],))
        kept = screen_candidates(
            [part, other],
            performance_pod=False,
            kept_off=lambda _: False,
            groups=cache.membership([*part.victims, *other.victims]),
        )
        assert kept == [other]
    finally:
        stopping.set()
        await asyncio.gather(*tasks)
