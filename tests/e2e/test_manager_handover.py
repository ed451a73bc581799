"""Two controller managers against the local KWOK cluster: when the leader dies the follower takes
over within the Lease duration and leaves every node's profile as it was; and queue_aware_v1 grows
the performance set with pending performance pods and shrinks it back once they are gone."""

from __future__ import annotations

import math
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hack.cluster.runner import LocalCluster, free_port
from joulie.api import keys
from joulie.api.inventory import load_inventory
from tests.e2e.test_manager import INVENTORY, JOULIE, Manager
from tests.support.builders import kwok_nodes, pod_manifest
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

E2E_LABEL = "joulie.io/e2e"
E2E_VALUE = "handover"
PREFIX = "mgh"
NODES_PER_FAMILY = 5
FAMILIES = 8
HP_FRAC = 0.25
INTERVAL_S = 2.0
TAKEOVER_LIMIT_S = 20.0
LEASE = "/apis/coordination.k8s.io/v1/namespaces/joulie-system/leases/joulie-manager"


class HandoverManager(Manager):
    """test_manager's Manager (alive, metrics, stop), started on this file's nodes with its own
    settings and log."""

    def __init__(self, cluster: LocalCluster, tmp: Path, name: str, **settings: str) -> None:
        self.name = name
        self.metrics_port = free_port()
        self.log = tmp / f"{name}.log"
        env = {
            **os.environ,
            "KUBECONFIG": str(cluster.role_kubeconfig("manager")),
            "METRICS_ADDR": f"127.0.0.1:{self.metrics_port}",
            "RECONCILE_INTERVAL": f"{INTERVAL_S:g}s",
            "NODE_SELECTOR": f"{E2E_LABEL}={E2E_VALUE}",
            "POD_NAMESPACE": "joulie-system",
            "LOG_FORMAT": "json",
            **settings,
        }
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                [JOULIE, "--role=manager"], env=env, stdout=out, stderr=subprocess.STDOUT
            )

    def readyz(self) -> str:
        self.alive()
        return httpx.get(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=5).text

    def is_leader(self) -> bool:
        return "(leader)" in self.readyz()

    def followed_leader(self) -> str | None:
        """The leader this process sees while it follows, from its /readyz text."""
        found = re.search(r"\(follower, leader ([^)\s]+)\)", self.readyz())
        return found.group(1) if found else None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def stop_quietly(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)


def handover_nodes() -> list[dict[str, Any]]:
    """40 nodes, 5 of each of the 8 hardware families, under this file's own prefix and label."""
    groups = load_inventory(INVENTORY).nodes
    return kwok_nodes(PREFIX, groups, NODES_PER_FAMILY, labels={E2E_LABEL: E2E_VALUE})


@pytest.fixture(scope="module")
def nodes(cluster: LocalCluster) -> Iterator[set[str]]:
    manifests = handover_nodes()
    names = {n["metadata"]["name"] for n in manifests}
    cluster.create_ready_nodes(manifests)
    yield names
    with cluster.api() as api:
        for name in names:
            api.delete(f"/api/v1/nodes/{name}")


def profiles(cluster: LocalCluster) -> dict[str, str | None]:
    """The power-profile label of every node of this file (None where it has none yet)."""
    with cluster.api() as api:
        listed = api.get("/api/v1/nodes", params={"labelSelector": f"{E2E_LABEL}={E2E_VALUE}"})
    listed.raise_for_status()
    return {
        n["metadata"]["name"]: n["metadata"].get("labels", {}).get(keys.POWER_PROFILE_LABEL)
        for n in listed.json()["items"]
    }


def labelled(cluster: LocalCluster, names: set[str]) -> dict[str, str] | None:
    current = profiles(cluster)
    if set(current) != names or any(p is None for p in current.values()):
        return None
    return {n: p for n, p in current.items() if p is not None}


def performance(current: dict[str, str]) -> set[str]:
    return {n for n, p in current.items() if p == "performance"}


def lease_holder(cluster: LocalCluster) -> str | None:
    with cluster.api() as api:
        response = api.get(LEASE)
    if response.status_code == 404:
        return None
    response.raise_for_status()
    return response.json()["spec"].get("holderIdentity") or None


def test_follower_takes_over_without_relabelling(
    cluster: LocalCluster, nodes: set[str], tmp_path: Path
) -> None:
    settings = {"POLICY_TYPE": "static_partition", "STATIC_HP_FRAC": str(HP_FRAC)}
    first = HandoverManager(cluster, tmp_path, "first", **settings)
    second = HandoverManager(cluster, tmp_path, "second", **settings)
    managers = [first, second]
    try:
        before = wait_until(lambda: labelled(cluster, nodes), 30, "every node to be labelled")
        assert len(performance(before)) == math.floor(len(nodes) * HP_FRAC + 0.5)

        def roles() -> tuple[HandoverManager, HandoverManager, str] | None:
            holder = lease_holder(cluster)
            leaders = [m for m in managers if m.is_leader()]
            followers = [m for m in managers if m.followed_leader() == holder]
            if holder is None or len(leaders) != 1 or len(followers) != 1:
                return None
            return leaders[0], followers[0], holder

        leader, survivor, holder = wait_until(roles, 30, "one leader and one follower")
        print(f"\nleader {leader.name} ({holder}), follower {survivor.name}")

        leader.kill()
        killed_at = time.monotonic()
        wait_until(survivor.is_leader, TAKEOVER_LIMIT_S + 1, "the follower to take over")
        takeover_s = time.monotonic() - killed_at
        print(f"takeover after SIGKILL of the leader: {takeover_s:.2f} s")
        assert takeover_s <= TAKEOVER_LIMIT_S
        new_holder = wait_until(
            lambda: (h := lease_holder(cluster)) != holder and h, 10, "the Lease to change hands"
        )
        assert survivor.followed_leader() is None
        assert new_holder != holder

        survivor.wait_reconciles(3)  # several reconciles by the new leader
        survivor.alive()
        after = labelled(cluster, nodes)
        assert after is not None
        assert after == before
        assert performance(after) == performance(before)

        survivor.stop()
        assert survivor.process.returncode == 0, survivor.log.read_text()[-4000:]
    finally:
        for manager in managers:
            manager.stop_quietly()


def pending_performance_pod(name: str) -> dict[str, Any]:
    return pod_manifest(
        name,
        annotations={keys.WORKLOAD_CLASS_ANNOTATION: "performance"},
        # No node carries this label: the pod stays Pending.
        spec={"nodeSelector": {E2E_LABEL: "nowhere"}},
    )


def test_queue_aware_follows_pending_performance_pods(
    cluster: LocalCluster, nodes: set[str], tmp_path: Path, namespace: str
) -> None:
    pods, per_node = 20, 2
    expected_with_pods = math.ceil(pods / per_node)
    bound = 2 * INTERVAL_S + 5
    manager = HandoverManager(
        cluster,
        tmp_path,
        "queue",
        POLICY_TYPE="queue_aware_v1",
        QUEUE_HP_BASE_FRAC="0",
        QUEUE_PERF_PER_HP_NODE=str(per_node),
    )

    def performance_count(count: int) -> dict[str, str] | None:
        current = labelled(cluster, nodes)
        return current if current is not None and len(performance(current)) == count else None

    try:
        idle = wait_until(
            lambda: performance_count(FAMILIES), 30, "one performance node per family"
        )
        # The family floor: one performance node of each family.
        assert len({name.rsplit("-", 1)[0] for name in performance(idle)}) == FAMILIES

        with cluster.api() as api:
            for i in range(pods):
                created = api.post(
                    f"/api/v1/namespaces/{namespace}/pods", json=pending_performance_pod(f"p{i}")
                )
                assert created.status_code == 201, created.text
        created_at = time.monotonic()
        busy = wait_until(
            lambda: performance_count(expected_with_pods), bound, "the performance set to grow"
        )
        print(f"\ngrew to {expected_with_pods} in {time.monotonic() - created_at:.2f} s")
        # Nodes already in performance stay there.
        assert performance(idle) <= performance(busy)
        with cluster.api() as api:
            listed = api.get(f"/api/v1/namespaces/{namespace}/pods").json()["items"]
        assert {p["status"]["phase"] for p in listed} == {"Pending"}

        with cluster.api() as api:
            for i in range(pods):
                deleted = api.delete(
                    f"/api/v1/namespaces/{namespace}/pods/p{i}",
                    params={"gracePeriodSeconds": "0"},
                )
                assert deleted.status_code in (200, 202), deleted.text
        deleted_at = time.monotonic()
        wait_until(lambda: performance_count(FAMILIES), bound, "the performance set to shrink")
        print(f"shrank to {FAMILIES} in {time.monotonic() - deleted_at:.2f} s")

        manager.stop()
        assert manager.process.returncode == 0, manager.log.read_text()[-4000:]
    finally:
        manager.stop_quietly()
