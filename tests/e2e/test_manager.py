"""The controller manager as its own process, with its own ServiceAccount, against the local KWOK
cluster: it labels and twins every selected node, keeps the planned performance split, writes
nothing at constant demand, and drains a node that still runs a performance pod."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hack.cluster.runner import LocalCluster, free_port
from hack.cluster.stages import RUN_DURATION_ANNOTATION
from joulie.api import keys
from joulie.api.inventory import load_inventory
from joulie.core.policies import PlanNode, performance_set, static_hp_count
from joulie.hardware.catalog import Catalog
from joulie.hardware.recognition import hardware_view
from joulie.kube.metrics import WRITE_VERBS
from tests.support.builders import joulie_object, kwok_nodes, nodehardware, pod_manifest
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

INVENTORY = Path(__file__).resolve().parents[1] / "data/inventories/02-cluster-nodes.yaml"
JOULIE = str(Path(sys.executable).parent / "joulie")
E2E_LABEL = "joulie.io/e2e"
NODES_PER_FAMILY = 5
HP_FRAC = 0.25
INTERVAL_S = 2.0


def test_nodes() -> list[dict[str, Any]]:
    """40 nodes, 5 of each of the 8 hardware families, under a prefix of this test's own."""
    groups = load_inventory(INVENTORY).nodes
    return kwok_nodes("mgr", groups, NODES_PER_FAMILY, labels={E2E_LABEL: "manager"})


test_nodes.__test__ = False  # type: ignore[attr-defined]


class Manager:
    def __init__(self, cluster: LocalCluster, tmp: Path) -> None:
        self.metrics_port = free_port()
        self.log = tmp / "manager.log"
        env = {
            **os.environ,
            "KUBECONFIG": str(cluster.role_kubeconfig("manager")),
            "METRICS_ADDR": f"127.0.0.1:{self.metrics_port}",
            "RECONCILE_INTERVAL": f"{INTERVAL_S:g}s",
            "NODE_SELECTOR": f"{E2E_LABEL}=manager",
            "POD_NAMESPACE": "joulie-system",
            "POLICY_TYPE": "static_partition",
            "STATIC_HP_FRAC": str(HP_FRAC),
            "LOG_FORMAT": "json",
        }
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                [JOULIE, "--role=manager"], env=env, stdout=out, stderr=subprocess.STDOUT
            )

    def alive(self) -> None:
        assert self.process.poll() is None, self.log.read_text()[-4000:]

    def metrics(self) -> str:
        self.alive()
        response = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5)
        response.raise_for_status()
        return response.text

    def writes(self) -> float:
        """Write requests sent so far, Lease renewals aside (the leader renews every 2 s)."""
        total = 0.0
        for family in text_string_to_metric_families(self.metrics()):
            for sample in family.samples:
                if (
                    sample.name == "joulie_kube_requests_total"
                    and sample.labels["verb"] in WRITE_VERBS
                    and sample.labels["resource"] not in ("leases", "events")
                ):
                    total += sample.value
        return total

    def sample(self, name: str, **labels: str) -> float:
        """The sum of the samples of ``name`` whose labels include ``labels``."""
        return sum(
            sample.value
            for family in text_string_to_metric_families(self.metrics())
            for sample in family.samples
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
        )

    def reconciles(self) -> float:
        """Reconciles finished so far."""
        return self.sample("joulie_manager_reconcile_duration_seconds_count")

    def wait_reconciles(self, count: int) -> None:
        """Wait until ``count`` more reconciles have finished (observable progress, not time)."""
        start = self.reconciles()
        wait_until(
            lambda: self.reconciles() >= start + count,
            count * INTERVAL_S * 3 + 15,
            f"{count} more reconciles",
        )

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def nodes(cluster: LocalCluster) -> list[dict[str, Any]]:
    manifests = test_nodes()
    cluster.create_ready_nodes(manifests)
    return manifests


@pytest.fixture(scope="module")
def manager(
    cluster: LocalCluster, nodes: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Manager]:
    process = Manager(cluster, tmp_path_factory.mktemp("manager"))
    try:
        yield process
        process.alive()
    finally:
        process.stop()
    assert process.process.returncode == 0, process.log.read_text()[-4000:]


def our_nodes(api: httpx.Client) -> dict[str, dict[str, Any]]:
    listed = api.get("/api/v1/nodes", params={"labelSelector": f"{E2E_LABEL}=manager"})
    listed.raise_for_status()
    return {n["metadata"]["name"]: n for n in listed.json()["items"]}


def twins(api: httpx.Client) -> dict[str, dict[str, Any]]:
    listed = api.get(f"/apis/{keys.API_VERSION}/{keys.NODE_TWIN_PLURAL}")
    listed.raise_for_status()
    return {t["metadata"]["name"]: t for t in listed.json()["items"]}


def expected_performance_count(nodes: list[dict[str, Any]]) -> tuple[int, int]:
    catalog = Catalog.load()
    plan_nodes = []
    for node in nodes:
        meta = node["metadata"]
        view = hardware_view(
            None, meta["labels"], meta["annotations"], node["status"]["allocatable"], catalog
        )
        plan_nodes.append(PlanNode(meta["name"], view.family, None))
    families = len({p.family for p in plan_nodes})
    return len(performance_set(plan_nodes, static_hp_count(len(plan_nodes), HP_FRAC))), families


def converged(cluster: LocalCluster, names: set[str]) -> dict[str, dict[str, Any]] | None:
    with cluster.api() as api:
        labelled = {
            name: node
            for name, node in our_nodes(api).items()
            if keys.POWER_PROFILE_LABEL in node["metadata"].get("labels", {})
        }
        current = twins(api)
    if set(labelled) != names or not names <= set(current):
        return None
    if any("schedulableClass" not in (current[n].get("status") or {}) for n in names):
        return None
    return labelled


def test_every_node_is_planned_and_twinned(
    cluster: LocalCluster, nodes: list[dict[str, Any]], manager: Manager
) -> None:
    names = {n["metadata"]["name"] for n in nodes}
    labelled = wait_until(lambda: converged(cluster, names), 30, "labels and NodeTwins")
    performance = {
        n
        for n, node in labelled.items()
        if node["metadata"]["labels"][keys.POWER_PROFILE_LABEL] == "performance"
    }
    expected, families = expected_performance_count(nodes)
    assert families == 8
    assert len(performance) == expected
    # Every family keeps at least one performance node.
    prefixes = {name.rsplit("-", 1)[0] for name in performance}
    assert len(prefixes) == families
    with cluster.api() as api:
        current = twins(api)
    for name in names:
        twin = current[name]
        profile = labelled[name]["metadata"]["labels"][keys.POWER_PROFILE_LABEL]
        assert twin["spec"]["profile"] == profile
        assert twin["metadata"]["labels"][keys.SIMULATED_LABEL] == "true"  # a KWOK node
        assert twin["status"]["schedulableClass"] == profile
        (condition,) = twin["status"]["conditions"]
        assert condition["type"] == "AgentReporting"
        assert condition["reason"] == "NoNodeHardware"


def test_constant_demand_writes_nothing(
    cluster: LocalCluster, nodes: list[dict[str, Any]], manager: Manager
) -> None:
    names = {n["metadata"]["name"] for n in nodes}
    wait_until(lambda: converged(cluster, names), 30, "labels and NodeTwins")
    manager.wait_reconciles(2)  # writes still in flight land and are observed
    before = manager.writes()
    manager.wait_reconciles(3)
    assert manager.writes() == before


def publish_hardware(api: httpx.Client, name: str, status: dict[str, Any]) -> None:
    """What an agent does: apply NodeHardware, then its status, as ``joulie-agent``."""
    params = {"fieldManager": "joulie-agent", "force": "true"}
    headers = {"Content-Type": "application/apply-patch+yaml"}
    path = f"/apis/{keys.API_VERSION}/{keys.NODE_HARDWARE_PLURAL}/{name}"
    api.patch(path, params=params, headers=headers, json=nodehardware(name)).raise_for_status()
    api.patch(
        f"{path}/status",
        params=params,
        headers=headers,
        json=nodehardware(name, status=status),
    ).raise_for_status()


def test_agent_heartbeats_start_no_reconcile(
    cluster: LocalCluster, nodes: list[dict[str, Any]], manager: Manager
) -> None:
    """100 heartbeats (a fresh write time, nothing planning reads) trigger nothing; a changed
    fact does. The agent's status also makes the node's AgentReporting condition current."""
    name = nodes[0]["metadata"]["name"]
    status = {"cpu": {"sockets": 2, "physicalCores": 48}, "updatedAt": "2026-01-01T00:00:00Z"}
    names = {n["metadata"]["name"] for n in nodes}
    wait_until(lambda: converged(cluster, names), 30, "labels and NodeTwins")

    def reporting() -> str | None:
        with cluster.api() as api:
            conditions = twins(api)[name].get("status", {}).get("conditions") or [{}]
        return str(conditions[0].get("reason"))

    def modified_seen() -> float:
        return manager.sample(
            "joulie_kube_watch_events_total", resource="nodehardwares", type="MODIFIED"
        )

    triggers = "joulie_manager_reconcile_triggers_total"
    with cluster.api() as api:
        publish_hardware(api, name, status)
        wait_until(lambda: reporting() == "NodeHardwareCurrent", 20, "AgentReporting current")
        before, seen = manager.sample(triggers, source="nodehardware"), modified_seen()
        for beat in range(1, 101):  # each one a new write time
            publish_hardware(
                api,
                name,
                {**status, "updatedAt": f"2026-01-01T00:{beat // 60:02d}:{beat % 60:02d}Z"},
            )
        wait_until(lambda: modified_seen() >= seen + 100, 20, "the manager to see 100 heartbeats")
        assert manager.sample(triggers, source="nodehardware") == before
        # A fact planning reads is a trigger: the test above could fail.
        publish_hardware(api, name, {**status, "cpu": {"sockets": 1, "physicalCores": 24}})
        wait_until(
            lambda: manager.sample(triggers, source="nodehardware") > before,
            20,
            "a real NodeHardware change to trigger a reconcile",
        )
        api.delete(f"/apis/{keys.API_VERSION}/{keys.NODE_HARDWARE_PLURAL}/{name}")
    wait_until(lambda: reporting() == "NoNodeHardware", 20, "AgentReporting back to none")


def test_fields_of_other_writers_cause_no_writes(
    cluster: LocalCluster, nodes: list[dict[str, Any]], manager: Manager
) -> None:
    """Another field manager adds a spec field and a condition to every twin: the manager's
    next 5 reconciles write nothing."""
    names = {n["metadata"]["name"] for n in nodes}
    wait_until(lambda: converged(cluster, names), 30, "labels and NodeTwins")
    params = {"fieldManager": "someone-else", "force": "true"}
    headers = {"Content-Type": "application/apply-patch+yaml"}
    condition = {
        "type": "SomeoneElses",
        "status": "True",
        "reason": "Testing",
        "message": "a condition this manager does not own",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }

    def apply_foreign(spec: dict[str, Any], status: dict[str, Any]) -> None:
        with cluster.api() as api:
            for name in sorted(names):
                path = f"/apis/{keys.API_VERSION}/{keys.NODE_TWIN_PLURAL}/{name}"
                ident = joulie_object(keys.NODE_TWIN_KIND, name)
                api.patch(
                    path, params=params, headers=headers, json={**ident, "spec": spec}
                ).raise_for_status()
                api.patch(
                    f"{path}/status",
                    params=params,
                    headers=headers,
                    json={**ident, "status": status},
                ).raise_for_status()

    manager.wait_reconciles(1)
    before = manager.writes()
    apply_foreign({"cpu": {"governor": {"preset": "balanced"}}}, {"conditions": [condition]})
    try:
        with cluster.api() as api:
            stored = twins(api)
        assert all(len(stored[n]["status"]["conditions"]) == 2 for n in names)
        manager.wait_reconciles(5)
        assert manager.writes() == before
    finally:
        apply_foreign({}, {})  # someone-else gives its fields up again


def test_running_performance_pod_drains_an_eco_node(
    cluster: LocalCluster, nodes: list[dict[str, Any]], manager: Manager, namespace: str
) -> None:
    names = {n["metadata"]["name"] for n in nodes}
    labelled = wait_until(lambda: converged(cluster, names), 30, "labels and NodeTwins")
    eco_gpu = sorted(
        n
        for n, node in labelled.items()
        if node["metadata"]["labels"][keys.POWER_PROFILE_LABEL] == "eco"
        and int(node["metadata"]["labels"].get(keys.HW_GPU_COUNT_LABEL, "0")) > 0
    )[0]
    with cluster.api() as api:
        eco_spec = twins(api)[eco_gpu]["spec"]
        annotations = {
            keys.WORKLOAD_CLASS_ANNOTATION: "performance",
            RUN_DURATION_ANNOTATION: "15s",
        }
        pod = pod_manifest("perf", node_name=eco_gpu, annotations=annotations)
        created = api.post(f"/api/v1/namespaces/{namespace}/pods", json=pod)
        assert created.status_code == 201, created.text

    def twin() -> dict[str, Any]:
        with cluster.api() as api:
            response = api.get(f"/apis/{keys.API_VERSION}/{keys.NODE_TWIN_PLURAL}/{eco_gpu}")
            response.raise_for_status()
            return dict(response.json())

    draining = wait_until(
        lambda: (t := twin())["status"].get("schedulableClass") == "draining" and t,
        20,
        "the node to drain",
    )
    assert draining["spec"]["profile"] == "eco"
    performance_caps = draining["spec"]["gpu"]["powerCap"]
    assert performance_caps["capPctOfMax"] == 100
    assert performance_caps["capWattsPerGpu"] > eco_spec["gpu"]["powerCap"]["capWattsPerGpu"]
    finished = wait_until(
        lambda: (t := twin())["status"].get("schedulableClass") == "eco" and t,
        40,
        "the pod to finish and the node to return to eco",
    )
    assert finished["spec"] == eco_spec
    manager.alive()


def test_a_reserved_nodes_twin_stops_looking_current(
    cluster: LocalCluster, nodes: list[dict[str, Any]], manager: Manager
) -> None:
    """A node taken out of the plan keeps its twin, but not figures nobody maintains any more;
    planned again, it gets them back."""
    name = nodes[0]["metadata"]["name"]
    with cluster.api() as api:
        before = twins(api)[name]["status"]
    assert before["powerMeasurement"]["source"] == "static"
    assert "predictedPowerHeadroomScore" in before

    def label(value: str | None) -> None:
        with cluster.api() as api:
            api.patch(
                f"/api/v1/nodes/{name}",
                json={"metadata": {"labels": {keys.RESERVED_LABEL: value}}},
                headers={"Content-Type": "application/merge-patch+json"},
            ).raise_for_status()

    def status() -> dict[str, Any]:
        with cluster.api() as api:
            return dict(twins(api)[name].get("status") or {})

    label("true")
    try:
        retired = wait_until(
            lambda: (s := status())["powerMeasurement"] == {"source": "unmanaged"} and s,
            20,
            "the reserved node's twin to be marked unmanaged",
        )
        assert "predictedPowerHeadroomScore" not in retired
        assert retired["schedulableClass"] == before["schedulableClass"]
    finally:
        label(None)
    back = wait_until(
        lambda: (s := status())["powerMeasurement"]["source"] == "static" and s,
        20,
        "the twin to be maintained again",
    )
    assert back["predictedPowerHeadroomScore"] == before["predictedPowerHeadroomScore"]
    manager.alive()


def test_twin_of_a_deleted_node_is_removed(
    cluster: LocalCluster, nodes: list[dict[str, Any]], manager: Manager
) -> None:
    """Runs last in this module: it removes one of the module's nodes."""
    gone = nodes[-1]["metadata"]["name"]
    with cluster.api() as api:
        assert gone in twins(api)
        api.delete(f"/api/v1/nodes/{gone}").raise_for_status()

    def removed() -> bool:
        with cluster.api() as api:
            return gone not in twins(api)

    wait_until(removed, 20, "the NodeTwin of the deleted node to be removed")
    manager.alive()
