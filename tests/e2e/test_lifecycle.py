"""The node lifecycle end to end: the manager as its own process with its own ServiceAccount (and
the KWOK actuator's grant), dry-run off, against the local KWOK cluster.

* Idle KWOK nodes past their idle grace are drained and deleted, never more at once than the
  limits allow, down to the minimum node count; busy nodes are untouched.
* With half of the managed nodes NotReady, the circuit breaker stops every shutdown.
* A burst of pods that the nodes left on cannot take powers on exactly enough of the nodes
  powered off, the pods are placed on them and nothing is evicted; a manager killed mid-boot is
  succeeded by one that boots nothing more.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hack.cluster.runner import LocalCluster, free_port
from joulie.api import keys
from tests.support.lifecycle_nodes import (
    E2E_LABEL,
    KWOK_RBAC,
    bind_pod,
    create_pod,
    forget_kwok_records,
    lifecycle_nodes,
    untouched,
)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

JOULIE = str(Path(sys.executable).parent / "joulie")


class Manager:
    """``joulie --role=manager`` with the lifecycle enforcing through the KWOK actuator."""

    def __init__(
        self, cluster: LocalCluster, tmp: Path, case: str, log_as: str = "", **env: str
    ) -> None:
        self.metrics_port = free_port()
        self.log = tmp / f"manager-{log_as or case}.log"
        full = {
            **os.environ,
            "KUBECONFIG": str(cluster.role_kubeconfig("manager")),
            "METRICS_ADDR": f"127.0.0.1:{self.metrics_port}",
            "POD_NAMESPACE": "joulie-system",
            "LOG_FORMAT": "json",
            "NODE_SELECTOR": f"{E2E_LABEL}={case}",
            "RECONCILE_INTERVAL": "1h",
            "LIFECYCLE_MODE": "enforce",
            "LIFECYCLE_ACTUATOR": "kwok",
            "LIFECYCLE_INTERVAL": "0.5s",
            "LIFECYCLE_IDLE_GRACE": "2s",
            "LIFECYCLE_DRAIN_SETTLE": "1s",
            **env,
        }
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                [JOULIE, "--role=manager"], env=full, stdout=out, stderr=subprocess.STDOUT
            )

    def sample(self, name: str, **labels: str) -> float:
        assert self.process.poll() is None, self.log.read_text()[-4000:]
        text = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text
        return sum(
            sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
        )

    def passes(self) -> float:
        """Lifecycle passes so far (0 while its metrics are not served yet)."""
        try:
            return self.sample("joulie_lifecycle_passes_total")
        except httpx.HTTPError:
            return 0.0

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        assert self.process.returncode == 0, self.log.read_text()[-4000:]


@pytest.fixture(scope="module")
def kwok_delete_granted(cluster: LocalCluster) -> Iterator[None]:
    cluster.kubectl("apply", "-f", str(KWOK_RBAC))
    yield
    cluster.kubectl("delete", "--ignore-not-found", "-f", str(KWOK_RBAC))
    forget_kwok_records(cluster)


def names(nodes: list[dict[str, Any]]) -> list[str]:
    return [n["metadata"]["name"] for n in nodes]


def listed(cluster: LocalCluster, case: str) -> dict[str, dict[str, Any]]:
    with cluster.api() as api:
        answer = api.get("/api/v1/nodes", params={"labelSelector": f"{E2E_LABEL}={case}"})
        answer.raise_for_status()
        return {n["metadata"]["name"]: n for n in answer.json()["items"]}


def in_flight(node: dict[str, Any]) -> bool:
    annotations = node["metadata"].get("annotations") or {}
    return annotations.get(keys.LIFECYCLE_PHASE_ANNOTATION) in ("draining", "shutting-down")


def test_idle_nodes_are_drained_and_deleted_within_the_limits(
    cluster: LocalCluster,
    namespace: str,
    kwok_delete_granted: None,
    tmp_path: Path,
) -> None:
    case = "lifecycle-limits"
    nodes = lifecycle_nodes(case, 10)
    cluster.create_ready_nodes(nodes)
    busy = names(nodes)[:2]
    for name in busy:
        bind_pod(cluster, namespace, name)
    # At most 2 drains and 2 shutdowns at once, 30 % of 10 nodes disrupted at once, and never
    # fewer than 5 serving: 5 idle nodes go, 3 stay with the 2 busy ones.
    manager = Manager(
        cluster,
        tmp_path,
        case,
        LIFECYCLE_MAX_CONCURRENT_DRAINS="2",
        LIFECYCLE_MAX_CONCURRENT_SHUTDOWNS="2",
        LIFECYCLE_BUDGET_PCT="30",
        LIFECYCLE_MIN_NODES="5",
    )
    most_at_once = 0
    stop = threading.Event()

    def watch() -> None:
        nonlocal most_at_once
        while not stop.is_set():
            try:
                now = sum(1 for n in listed(cluster, case).values() if in_flight(n))
            except httpx.HTTPError:
                continue
            most_at_once = max(most_at_once, now)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        wait_until(lambda: len(listed(cluster, case)) == 5, 90, "5 idle nodes to be removed")
        passes = manager.sample("joulie_lifecycle_passes_total")
        wait_until(
            lambda: manager.sample("joulie_lifecycle_passes_total") >= passes + 6,
            30,
            "six more lifecycle passes",
        )
        left = listed(cluster, case)
        assert len(left) == 5, sorted(left)  # the floor held
        for name in busy:
            assert name in left
            assert untouched(left[name])
        assert all(untouched(n) for n in left.values())
        assert 1 <= most_at_once <= 3, most_at_once  # the budget: ceil(30 % of 10)
        assert manager.sample("joulie_lifecycle_outcomes_total", outcome="shut_down") == 5
    finally:
        stop.set()
        watcher.join(5)
        manager.stop()


def breaker_open_for(manager: Manager, passes: int) -> None:
    """Wait for the circuit breaker to open, then for ``passes`` more lifecycle passes."""
    wait_until(
        lambda: manager.sample("joulie_lifecycle_circuit_breaker_open") == 1,
        30,
        "the circuit breaker to open",
    )
    before = manager.sample("joulie_lifecycle_passes_total")
    wait_until(
        lambda: manager.sample("joulie_lifecycle_passes_total") >= before + passes,
        30,
        f"{passes} more lifecycle passes",
    )


def test_the_circuit_breaker_stops_every_shutdown_while_half_the_nodes_are_not_ready(
    cluster: LocalCluster,
    kwok_delete_granted: None,
    tmp_path: Path,
) -> None:
    case = "lifecycle-breaker"
    ready = lifecycle_nodes(case, 4)
    broken = lifecycle_nodes(case, 4, kwok=False)
    cluster.create_ready_nodes(ready)
    cluster.create_nodes(broken)
    manager = Manager(cluster, tmp_path, case, LIFECYCLE_BUDGET_PCT="100")
    try:
        breaker_open_for(manager, passes=10)
        left = listed(cluster, case)
        assert sorted(left) == sorted(names(ready) + names(broken))
        assert all(untouched(n) for n in left.values())
        assert manager.sample("joulie_lifecycle_outcomes_total", outcome="held") >= 1
        # Once the broken machines are gone, the idle nodes are drained again.
        with cluster.api() as api:
            for name in names(broken):
                api.delete(f"/api/v1/nodes/{name}").raise_for_status()
        wait_until(lambda: not listed(cluster, case), 60, "the idle nodes to be removed")
    finally:
        manager.stop()


def test_the_circuit_breaker_opens_when_every_one_of_three_nodes_is_not_ready(
    cluster: LocalCluster,
    kwok_delete_granted: None,
    tmp_path: Path,
) -> None:
    # With at most 3 managed nodes NotReady the breaker never opened: 3 of 3 NotReady, all 3
    # shutdowns were admitted.
    case = "lifecycle-breaker-3"
    broken = lifecycle_nodes(case, 3, kwok=False)
    cluster.create_nodes(broken)
    manager = Manager(cluster, tmp_path, case, LIFECYCLE_BUDGET_PCT="100")
    try:
        breaker_open_for(manager, passes=5)
        assert sorted(listed(cluster, case)) == sorted(names(broken))
    finally:
        manager.stop()
        with cluster.api() as api:
            for name in names(broken):
                api.delete(f"/api/v1/nodes/{name}")


def pod_nodes(cluster: LocalCluster, namespace: str) -> dict[str, tuple[str, str]]:
    """Each pod of the namespace: its uid and the node it is bound to ("" while pending)."""
    with cluster.api() as api:
        answer = api.get(f"/api/v1/namespaces/{namespace}/pods")
        answer.raise_for_status()
        return {
            p["metadata"]["name"]: (p["metadata"]["uid"], p["spec"].get("nodeName", ""))
            for p in answer.json()["items"]
        }


def test_a_burst_boots_exactly_enough_nodes_and_a_restart_mid_boot_boots_no_more(
    cluster: LocalCluster,
    namespace: str,
    kwok_delete_granted: None,
    tmp_path: Path,
) -> None:
    case = "lifecycle-boot"
    nodes = lifecycle_nodes(case, 5)
    cluster.create_ready_nodes(nodes)
    limits = {
        "LIFECYCLE_MIN_NODES": "1",
        "LIFECYCLE_BUDGET_PCT": "100",
        "LIFECYCLE_MAX_CONCURRENT_DRAINS": "5",
        "LIFECYCLE_MAX_CONCURRENT_SHUTDOWNS": "5",
    }
    manager = Manager(cluster, tmp_path, case, **limits)
    restarted: Manager | None = None
    try:
        wait_until(lambda: len(listed(cluster, case)) == 1, 90, "4 idle nodes powered off")
        # Three pods that each take most of a node: one fits the node left on, two need a boot.
        cores = int(next(iter(listed(cluster, case).values()))["status"]["allocatable"]["cpu"])
        spec = {
            "nodeSelector": {E2E_LABEL: case},
            "tolerations": [{"operator": "Exists", "effect": "NoSchedule"}],
            "requests": {"cpu": str(cores * 3 // 4)},
        }
        burst = [create_pod(cluster, namespace, "burst", spec) for _ in range(3)]
        wait_until(lambda: len(listed(cluster, case)) > 1, 60, "a node powered on")
        # The manager dies mid-boot (its lease is not released); its successor takes over.
        manager.process.kill()
        manager.process.wait(timeout=10)
        restarted = Manager(cluster, tmp_path, case, log_as=f"{case}-2", **limits)
        wait_until(
            lambda: all(node for _, node in pod_nodes(cluster, namespace).values()),
            120,
            "every pod of the burst to be placed",
        )
        wait_until(lambda: restarted.passes() >= 6, 60, "six passes of the new leader")
        left = listed(cluster, case)
        assert len(left) == 3, sorted(left)  # the node left on and exactly two booted
        placed = pod_nodes(cluster, namespace)
        assert sorted(placed) == sorted(burst)  # nothing evicted, nothing re-created
        assert len({node for _, node in placed.values()}) == 3
        for name, node in left.items():
            annotations = node["metadata"].get("annotations") or {}
            assert keys.LIFECYCLE_PHASE_ANNOTATION not in annotations, name  # in service
    finally:
        if restarted is not None:
            restarted.stop()
        if manager.process.poll() is None:
            manager.stop()
