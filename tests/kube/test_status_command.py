"""`joulie status` and `kubectl joulie status` against the real API server: twins, pods and the
manager's Lease as they are in the cluster, as a table, as JSON and under --watch, and one line
of error when the cluster cannot be reached."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.cluster.runner import LocalCluster, free_port
from joulie.api import keys
from tests.support.builders import container, nodetwin, pod_manifest
from tests.support.interrupts import interruptible

pytestmark = pytest.mark.kube

BIN = Path(sys.executable).parent
TWINS = f"/apis/{keys.API_VERSION}/{keys.NODE_TWIN_PLURAL}"


class World:
    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.tag = uuid.uuid4().hex[:6]
        self.namespace = f"status-{self.tag}"
        self.perf, self.eco = f"st-{self.tag}-perf", f"st-{self.tag}-eco"

    def twin(self, name: str, profile: str, status: dict[str, Any]) -> None:
        with self.cluster.api() as api:
            api.post(TWINS, json=nodetwin(name, profile)).raise_for_status()
            api.patch(
                f"{TWINS}/{name}/status",
                headers={"Content-Type": "application/merge-patch+json"},
                json={"status": status},
            ).raise_for_status()

    def lease(self) -> None:
        renewed = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        with self.cluster.api() as api:
            api.post(
                f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases",
                json={
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": keys.MANAGER_LEASE},
                    # Long enough for the whole test: the status must call these twins fresh.
                    "spec": {"leaseDurationSeconds": 3600, "renewTime": renewed},
                },
            ).raise_for_status()

    def pending_pod(self, name: str, workload: str) -> None:
        with self.cluster.api() as api:
            pending = pod_manifest(
                name,
                annotations={keys.WORKLOAD_CLASS_ANNOTATION: workload},
                containers=[container(image="example.com/c:1")],
                # No node has this label: the pod stays Pending.
                spec={"nodeSelector": {"joulie.io/e2e": f"nowhere-{self.tag}"}},
            )
            api.post(f"/api/v1/namespaces/{self.namespace}/pods", json=pending).raise_for_status()


@pytest.fixture
def world(cluster: LocalCluster) -> Iterator[World]:
    w = World(cluster)
    with cluster.api() as api:
        api.post("/api/v1/namespaces", json={"metadata": {"name": w.namespace}})
    w.lease()
    measurement = {"source": "http", "measuredNodePowerW": 640.0, "nodeCappedPowerW": 900.0}
    w.twin(
        w.perf,
        "performance",
        {
            "schedulableClass": "performance",
            "predictedPowerHeadroomScore": 28.9,
            "powerMeasurement": measurement,
            "controlStatus": {"cpu": {"result": "applied"}},
        },
    )
    w.twin(
        w.eco,
        "eco",
        {
            "schedulableClass": "draining",
            "powerMeasurement": {"source": "http-error"},
            "conditions": [
                {
                    "type": "AgentReporting",
                    "status": "False",
                    "reason": "NodeHardwareStale",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                    "message": "stale",
                }
            ],
        },
    )
    w.pending_pod("train", "performance")
    yield w
    with cluster.api() as api:
        for name in (w.perf, w.eco):
            api.delete(f"{TWINS}/{name}")
        api.delete(f"/api/v1/namespaces/{w.namespace}", params={"gracePeriodSeconds": "0"})


def status(
    kubeconfig: Path, *args: str, program: list[str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PATH": f"{BIN}:{os.environ['PATH']}"}
    return subprocess.run(
        [*(program or [str(BIN / "joulie")]), "status", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_status_as_json_shows_the_twins_pods_and_freshness(
    cluster: LocalCluster, world: World
) -> None:
    done = status(cluster.admin_kubeconfig, "-o", "json", "--manager-namespace", world.namespace)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    rows = {row["node"]: row for row in data["nodes"]}
    perf, eco = rows[world.perf], rows[world.eco]
    assert (perf["profile"], perf["schedulable_class"], perf["fresh"]) == (
        "performance",
        "performance",
        True,
    )
    assert (perf["power_w"], perf["budget_w"], perf["headroom"]) == (640.0, 900.0, 28.9)
    assert perf["controls"] == {"cpu": "applied"}
    # A failed reading is stale even while the Lease is current; its agent is not reporting.
    assert (eco["schedulable_class"], eco["fresh"], eco["agent"]) == (
        "draining",
        False,
        "NodeHardwareStale",
    )
    assert data["summary"]["manager_lease_current"] is True
    assert data["summary"]["pending_pods"]["performance"] >= 1


def test_kubectl_runs_it_as_a_plugin(cluster: LocalCluster, world: World) -> None:
    assert cluster.binaries is not None
    kubectl = str(cluster.binaries / "kubectl")
    done = status(
        cluster.admin_kubeconfig,
        "--manager-namespace",
        world.namespace,
        program=[kubectl, "joulie"],
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("nodes ")
    table = {line.split()[0]: line.split() for line in lines if line.startswith("st-")}
    assert table[world.perf][:4] == [world.perf, "performance", "performance", "640"]
    assert "(stale)" in " ".join(table[world.eco])


def test_watch_redraws_until_interrupted(cluster: LocalCluster, world: World) -> None:
    env = {**os.environ, "KUBECONFIG": str(cluster.admin_kubeconfig)}
    args = ["status", "-w", "-o", "json", "--interval", "0.2", "--manager-namespace"]
    process = subprocess.Popen(
        [str(BIN / "joulie"), *args, world.namespace],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )
    assert process.stdout is not None
    documents = [json.loads(process.stdout.readline()) for _ in range(3)]
    process.send_signal(2)  # Ctrl-C
    assert process.wait(timeout=20) == 0
    assert all(world.perf in {n["node"] for n in d["nodes"]} for d in documents)


def test_an_unreachable_cluster_is_one_line_and_status_1(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    config = yaml.safe_load(cluster.admin_kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    broken = tmp_path / "kubeconfig"
    broken.write_text(yaml.safe_dump(config))
    done = status(broken, "--timeout", "2")
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith("joulie: ")
    assert "Traceback" not in done.stderr


def test_energy_shows_the_managers_accounts_per_namespace_and_class(
    cluster: LocalCluster, world: World
) -> None:
    # The accounts as the manager's leader leaves them (joulie.manager.energy_store's format).
    accounts = {"team-a/standard": 2 * 3.6e6, "team-b/performance": 6 * 3.6e6}
    with cluster.api() as api:
        api.post(
            f"/api/v1/namespaces/{world.namespace}/configmaps",
            json={
                "metadata": {"name": "joulie-energy-accounts"},
                "data": {
                    "accounts": json.dumps(accounts),
                    "overhead": repr(2 * 3.6e6),
                    "through": "1790000000.0",
                    # team-a's capped work would have drawn 0.5 kWh more without Joulie.
                    "saved": json.dumps({"team-a/standard": 0.5 * 3.6e6}),
                },
            },
        ).raise_for_status()
    args = ("--energy", "--manager-namespace", world.namespace)
    done = status(cluster.admin_kubeconfig, *args, "-o", "json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["total_kwh"] == 10.0
    assert [a["namespace"] for a in data["accounts"]] == ["team-b", "team-a"]
    table = status(cluster.admin_kubeconfig, *args)
    assert table.returncode == 0, table.stderr
    rows = [line.split() for line in table.stdout.splitlines()]
    assert ["team-b", "performance", "6.000", "60.0", "%", "0.000", "0.0", "%"] in rows
    assert ["team-a", "standard", "2.000", "20.0", "%", "0.500", "20.0", "%"] in rows
    assert data["saved_kwh"] == 0.5
    # Accounts someone broke are one line of error, not a traceback.
    with cluster.api() as api:
        api.patch(
            f"/api/v1/namespaces/{world.namespace}/configmaps/joulie-energy-accounts",
            headers={"Content-Type": "application/merge-patch+json"},
            json={"data": {"overhead": "-1"}},
        ).raise_for_status()
    broken = status(cluster.admin_kubeconfig, *args)
    assert broken.returncode == 1
    assert broken.stderr.strip().count("\n") == 0
    assert "energy accounts cannot be read" in broken.stderr
