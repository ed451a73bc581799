"""The digital twin end to end: the controller manager reads measured power from the simulator
service (NODE_POWER_SOURCE=http) or from a real Prometheus scraping it (=prometheus), with
facility metrics from the same Prometheus, and writes NodeTwin.status; a source outage marks the
nodes it affects and they recover when it returns."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hack.cluster.runner import LocalCluster, free_port
from joulie.api import keys
from joulie.api.inventory import load_inventory
from joulie.core.twin import ambient_multiplier
from joulie.hardware.catalog import Catalog
from tests.e2e.test_simulator import busy_pod
from tests.support.builders import kwok_node
from tests.support.processes import PrometheusServer, RoleProcess
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

INVENTORY = Path(__file__).resolve().parents[1] / "data/inventories/02-cluster-nodes.yaml"
E2E = "twin"
SELECTOR = f"joulie.io/e2e={E2E}"
PREFIX = "twin"
AMBIENT_C = 27.0
INTERVAL = "2s"


def manifests() -> list[dict[str, Any]]:
    """Two nodes of each hardware group of the inventory, the first in rack-a, the second in
    rack-b."""
    return [
        kwok_node(
            f"{PREFIX}-{group.node_name_prefix}-{i}",
            group,
            labels={"joulie.io/e2e": E2E, keys.RACK_LABEL: rack},
        )
        for group in load_inventory(INVENTORY).nodes
        for i, rack in enumerate(("rack-a", "rack-b"))
    ]


def pair(kind: str) -> tuple[str, str]:
    """(loaded, idle): two nodes of one hardware group, CPU-only or with GPUs."""
    for group in load_inventory(INVENTORY).nodes:
        if (group.gpu_count > 0) == (kind == "gpu"):
            base = f"{PREFIX}-{group.node_name_prefix}"
            return f"{base}-0", f"{base}-1"
    raise AssertionError(kind)


CPU_LOADED, CPU_IDLE = pair("cpu")
GPU_LOADED, GPU_IDLE = pair("gpu")


@pytest.fixture(scope="module")
def nodes(cluster: LocalCluster) -> list[dict[str, Any]]:
    made = manifests()
    cluster.create_ready_nodes(made)
    return made


@pytest.fixture(scope="module")
def simulator(
    cluster: LocalCluster, nodes: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RoleProcess]:
    port = free_port()
    sim = RoleProcess(
        cluster,
        "simulator",
        tmp_path_factory.mktemp("twin-sim") / "simulator.log",
        {
            "SIM_ADDR": f"127.0.0.1:{port}",
            "SIM_NODE_SELECTOR": SELECTOR,
            "SIM_POWER_SETTLE": "300ms",
            "SIM_AMBIENT_C": str(AMBIENT_C),
        },
    )
    sim.env["SIM_PORT"] = str(port)  # for the tests: where telemetry and /metrics are served
    try:
        wait_until(sim.ready, 60, "the simulator to be ready")
        yield sim
    finally:
        sim.stop()


def sim_url(sim: RoleProcess) -> str:
    return f"http://127.0.0.1:{sim.env['SIM_PORT']}"


@pytest.fixture(scope="module")
def load(cluster: LocalCluster, simulator: RoleProcess) -> Iterator[None]:
    """A busy pod on the first node of a CPU pair and of a GPU pair; the second stays idle."""
    namespace = f"twin-{uuid.uuid4().hex[:8]}"
    cpu_cores = next(n for n in manifests() if n["metadata"]["name"] == CPU_LOADED)["status"][
        "allocatable"
    ]["cpu"]
    gpu_node = next(n for n in manifests() if n["metadata"]["name"] == GPU_LOADED)
    gpus = int(gpu_node["metadata"]["labels"][keys.HW_GPU_COUNT_LABEL])
    with cluster.api() as api:
        api.post("/api/v1/namespaces", json={"metadata": {"name": namespace}}).raise_for_status()
        for pod in (
            busy_pod("cpu-work", CPU_LOADED, cpu_cores),
            busy_pod("gpu-work", GPU_LOADED, "8", gpus=gpus),
        ):
            api.post(f"/api/v1/namespaces/{namespace}/pods", json=pod).raise_for_status()
    yield
    with cluster.api() as api:
        api.delete(f"/api/v1/namespaces/{namespace}")


@pytest.fixture(scope="module")
def prometheus(
    simulator: RoleProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusServer]:
    prom = PrometheusServer(
        tmp_path_factory.mktemp("twin-prometheus"), [sim_url(simulator).removeprefix("http://")]
    )
    try:
        wait_until(
            lambda: len(prom.query("joulie_sim_node_power_watts")) >= 16,
            60,
            "Prometheus to scrape the simulator",
        )
        yield prom
    finally:
        prom.stop()


def start_manager(cluster: LocalCluster, tmp: Path, **settings: str) -> RoleProcess:
    return RoleProcess(
        cluster,
        "manager",
        tmp / "manager.log",
        {
            "RECONCILE_INTERVAL": INTERVAL,
            "NODE_SELECTOR": SELECTOR,
            "POD_NAMESPACE": "joulie-system",
            "POLICY_TYPE": "static_partition",
            # Every node in performance: a loaded node and an idle one share the same budget.
            "STATIC_HP_FRAC": "1.0",
            **settings,
        },
    )


def statuses(cluster: LocalCluster) -> dict[str, dict[str, Any]]:
    with cluster.api() as api:
        listed = api.get(f"/apis/{keys.API_VERSION}/{keys.NODE_TWIN_PLURAL}")
        listed.raise_for_status()
    return {
        t["metadata"]["name"]: t.get("status") or {}
        for t in listed.json()["items"]
        if t["metadata"]["name"].startswith(f"{PREFIX}-")
    }


def measured(status: dict[str, Any]) -> dict[str, Any]:
    return dict(status.get("powerMeasurement") or {})


def loaded_below_idle(
    cluster: LocalCluster, source: str, names: set[str]
) -> dict[str, dict[str, Any]] | None:
    """Every twin measured by ``source``, with each loaded node drawing more and showing less
    headroom than the idle node of its group; None until then."""
    current = statuses(cluster)
    if set(current) != names or any(measured(s).get("source") != source for s in current.values()):
        return None
    for loaded, idle in ((CPU_LOADED, CPU_IDLE), (GPU_LOADED, GPU_IDLE)):
        hot, cold = current[loaded], current[idle]
        if not measured(hot)["measuredNodePowerW"] > 1.3 * measured(cold)["measuredNodePowerW"]:
            return None
        if not hot["predictedPowerHeadroomScore"] < cold["predictedPowerHeadroomScore"]:
            return None
    return current


def expected_cpu_tdp(node: dict[str, Any]) -> float:
    labels, annotations = node["metadata"]["labels"], node["metadata"]["annotations"]
    catalog = Catalog.load()
    cpu = catalog.cpu(catalog.match_cpu(annotations[keys.HW_CPU_MODEL_ANNOTATION]).key or "")
    return cpu.tdp_w * int(labels[keys.HW_CPU_SOCKETS_LABEL])


def test_http_source_with_facility_metrics(
    cluster: LocalCluster,
    nodes: list[dict[str, Any]],
    load: None,
    simulator: RoleProcess,
    prometheus: PrometheusServer,
    tmp_path: Path,
) -> None:
    names = {n["metadata"]["name"] for n in nodes}
    manager = start_manager(
        cluster,
        tmp_path,
        NODE_POWER_SOURCE="http",
        NODE_POWER_HTTP_ENDPOINT=f"{sim_url(simulator)}/telemetry/{{node}}",
        ENABLE_FACILITY_METRICS="true",
        FACILITY_PROMETHEUS_ADDRESS=prometheus.url,
        FACILITY_POLL_INTERVAL="1s",
        FACILITY_AMBIENT_TEMP_METRIC="joulie_sim_facility_ambient_celsius",
        FACILITY_IT_POWER_METRIC="joulie_sim_cluster_it_power_watts",
        FACILITY_RACK_POWER_METRIC="joulie_sim_rack_power_watts",
    )
    try:
        current = wait_until(
            lambda: loaded_below_idle(cluster, "http", names), 60, "twins measured over http"
        )
        # Budgets come from the hardware: the CPU node's TDP is sockets x catalog TDP.
        cpu_node = next(n for n in nodes if n["metadata"]["name"] == CPU_LOADED)
        cpu = measured(current[CPU_LOADED])
        assert cpu["cpuTdpW"] == round(expected_cpu_tdp(cpu_node))
        assert cpu["gpuTdpW"] == 0
        assert measured(current[GPU_LOADED])["gpuTdpW"] > 0

        # Facility figures reach every twin: the ambient scales cooling stress, rack power
        # gives PSU stress (the two racks differ, and each is below the 50 kW supply here).
        def facility_applied() -> dict[str, dict[str, Any]] | None:
            now = statuses(cluster)
            for status in now.values():
                m = measured(status)
                if not m.get("nodeTdpW"):
                    continue
                expected = m["measuredNodePowerW"] / m["nodeTdpW"] * ambient_multiplier(AMBIENT_C)
                if abs(status["predictedCoolingStressScore"] - min(expected * 100, 100)) > 0.3:
                    return None
            psu = {s["predictedPsuStressScore"] for s in now.values()}
            return now if len(psu) == 2 and all(0 < p < 100 for p in psu) else None

        now = wait_until(facility_applied, 30, "facility metrics in the twins")
        rack_a = {now[n]["predictedPsuStressScore"] for n in now if n.endswith("-0")}
        assert len(rack_a) == 1  # the same rack, the same PSU stress
        series = prometheus.query('joulie_sim_rack_power_watts{rack="rack-a"}')
        assert abs(float(series[0]["value"][1]) / 500 - rack_a.pop()) < 2

        # The service goes away: every node says its read failed and keeps its last figures.
        simulator.stop()
        failed = wait_until(
            lambda: (
                (s := statuses(cluster))
                and all(measured(x)["source"] == "http-error" for x in s.values())
                and s
            ),
            30,
            "twins marked http-error",
        )
        assert (
            measured(failed[CPU_LOADED])["measuredNodePowerW"]
            > measured(failed[CPU_IDLE])["measuredNodePowerW"]
        )
        assert manager.metric("joulie_power_source_failed_nodes", source="http") == len(names)
        # ... and recovers when it comes back.
        simulator.start()
        wait_until(simulator.ready, 60, "the simulator to come back")
        wait_until(lambda: loaded_below_idle(cluster, "http", names), 60, "twins measured again")
        manager.alive()
    finally:
        assert manager.stop() == 0, manager.log.read_text()[-4000:]


def test_prometheus_source_one_query_per_reconcile(
    cluster: LocalCluster,
    nodes: list[dict[str, Any]],
    load: None,
    prometheus: PrometheusServer,
    tmp_path: Path,
) -> None:
    names = {n["metadata"]["name"] for n in nodes}
    manager = start_manager(
        cluster,
        tmp_path,
        NODE_POWER_SOURCE="prometheus",
        NODE_POWER_PROMETHEUS_ADDRESS=prometheus.url,
        NODE_POWER_PROMETHEUS_QUERY="joulie_sim_node_power_watts",
    )
    try:
        wait_until(
            lambda: loaded_below_idle(cluster, "prometheus", names),
            60,
            "twins measured through Prometheus",
        )
        # One query per read, whatever the node count: Prometheus's own request counter moves
        # exactly as often as the manager reads, and never more than once per reconcile.
        queries = prometheus.query_requests()
        reads = manager.metric("joulie_power_source_requests_total", source="prometheus")
        reconciles = manager.metric("joulie_manager_reconcile_duration_seconds_count")
        wait_until(
            lambda: (
                manager.metric("joulie_manager_reconcile_duration_seconds_count") >= reconciles + 3
            ),
            30,
            "three more reconciles",
        )
        reads_delta = (
            manager.metric("joulie_power_source_requests_total", source="prometheus") - reads
        )
        reconciles_delta = (
            manager.metric("joulie_manager_reconcile_duration_seconds_count") - reconciles
        )
        queries_delta = prometheus.query_requests() - queries
        assert 1 <= reads_delta <= reconciles_delta
        assert queries_delta == reads_delta

        # Prometheus goes away and comes back.
        prometheus.stop()
        wait_until(
            lambda: (
                (s := statuses(cluster))
                and all(measured(x)["source"] == "prometheus-error" for x in s.values())
            ),
            30,
            "twins marked prometheus-error",
        )
        prometheus.start()
        wait_until(
            lambda: loaded_below_idle(cluster, "prometheus", names),
            60,
            "twins measured through Prometheus again",
        )
        manager.alive()
    finally:
        assert manager.stop() == 0, manager.log.read_text()[-4000:]
