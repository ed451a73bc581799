"""The loop closed on KWOK nodes: manager, simulator and a pool-mode agent, each a process with its
own credentials.

The agent publishes NodeHardware for every node and puts every NodeTwin spec in force through the
simulator: an eco node draws less than its performance twin under the same load, controlStatus
says applied, a GPU cap on a node without GPUs says unsupported, and when the manager stops
writing presets the agent restores them. Its heartbeats start no manager reconcile.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hack.cluster.roles import POOL_AGENT_ACCOUNT, RoleProcess, pool_agent_settings
from hack.cluster.runner import LocalCluster, free_port
from joulie.api import keys
from joulie.api.inventory import load_inventory
from tests.e2e.test_simulator import busy_pod
from tests.support.builders import joulie_object, kwok_nodes, node
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

INVENTORY = Path(__file__).resolve().parents[1] / "data/inventories/02-cluster-nodes.yaml"
E2E = "agent-pool"
SELECTOR = f"joulie.io/e2e={E2E}"
TWINS = f"/apis/{keys.API_VERSION}/{keys.NODE_TWIN_PLURAL}"
HARDWARE = f"/apis/{keys.API_VERSION}/{keys.NODE_HARDWARE_PLURAL}"
HEARTBEAT_S = 10
REAL_NODE = "ap-real-node"


def manifests() -> list[dict[str, Any]]:
    """Two nodes of each hardware group: with half the nodes in performance, one of each pair
    runs eco and the other performance."""
    return kwok_nodes("ap", load_inventory(INVENTORY).nodes, 2, labels={"joulie.io/e2e": E2E})


def group_pair(gpus: bool) -> tuple[str, str, dict[str, Any]]:
    for group in load_inventory(INVENTORY).nodes:
        if (group.gpu_count > 0) == gpus:
            made = [n for n in manifests() if group.node_name_prefix in n["metadata"]["name"]]
            return made[0]["metadata"]["name"], made[1]["metadata"]["name"], made[0]
    raise AssertionError(gpus)


@pytest.fixture(scope="module")
def nodes(cluster: LocalCluster) -> Iterator[list[str]]:
    made = manifests()
    cluster.create_ready_nodes(made)
    names = [n["metadata"]["name"] for n in made]
    namespace = f"ap-{uuid.uuid4().hex[:8]}"
    with cluster.api() as api:
        api.post("/api/v1/namespaces", json={"metadata": {"name": namespace}}).raise_for_status()
        for gpus in (False, True):
            first, second, manifest = group_pair(gpus)
            cpu = manifest["status"]["allocatable"]["cpu"]
            count = int(manifest["metadata"]["labels"].get(keys.HW_GPU_COUNT_LABEL, "0"))
            for name in (first, second):
                pod = busy_pod(f"work-{name}", name, cpu, gpus=count)
                api.post(f"/api/v1/namespaces/{namespace}/pods", json=pod).raise_for_status()
    # A real node the pool's selector also matches: it has an agent of its own, so the pool
    # leaves it alone (KWOK does not fake it: no annotation).
    with cluster.api() as api:
        api.post(
            "/api/v1/nodes",
            json=node(REAL_NODE, labels={"joulie.io/e2e": E2E}),
        ).raise_for_status()
    yield names
    with cluster.api() as api:
        api.delete(f"/api/v1/nodes/{REAL_NODE}")
        api.delete(f"/api/v1/namespaces/{namespace}")
        for name in names:
            api.delete(f"{HARDWARE}/{name}")
            api.delete(f"/api/v1/nodes/{name}")


@pytest.fixture(scope="module")
def simulator(
    cluster: LocalCluster, nodes: list[str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    port = free_port()
    sim = RoleProcess(
        cluster,
        "simulator",
        tmp_path_factory.mktemp("ap-sim") / "simulator.log",
        {
            "SIM_ADDR": f"127.0.0.1:{port}",
            "SIM_NODE_SELECTOR": SELECTOR,
            "SIM_POWER_SETTLE": "300ms",
        },
    )
    try:
        wait_until(sim.ready, 60, "the simulator to be ready")
        yield f"http://127.0.0.1:{port}"
    finally:
        sim.stop()


def manager(cluster: LocalCluster, tmp: Path, sim: str, governor: str) -> RoleProcess:
    return RoleProcess(
        cluster,
        "manager",
        tmp / f"manager-{governor}.log",
        {
            "RECONCILE_INTERVAL": "2s",
            "NODE_SELECTOR": SELECTOR,
            "POD_NAMESPACE": "joulie-system",
            "POLICY_TYPE": "static_partition",
            "STATIC_HP_FRAC": "0.5",
            "GOVERNOR_CONTROL": governor,
            "NODE_POWER_SOURCE": "http",
            "NODE_POWER_HTTP_ENDPOINT": f"{sim}/telemetry/{{node}}",
        },
    )


@pytest.fixture(scope="module")
def agent(
    cluster: LocalCluster, simulator: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RoleProcess]:
    settings = pool_agent_settings(SELECTOR, simulator, control_interval="1s")
    settings["HEARTBEAT_INTERVAL"] = f"{HEARTBEAT_S}s"
    log = tmp_path_factory.mktemp("ap") / "agent.log"
    process = RoleProcess(cluster, "agent", log, settings, account=POOL_AGENT_ACCOUNT)
    try:
        wait_until(process.ready, 60, "the agent to be ready")
        yield process
    finally:
        assert process.stop() == 0, process.log.read_text()[-4000:]


def twins(cluster: LocalCluster, names: list[str]) -> dict[str, dict[str, Any]]:
    with cluster.api() as api:
        listed = api.get(TWINS, params={"limit": "500"})
    listed.raise_for_status()
    return {
        t["metadata"]["name"]: t for t in listed.json()["items"] if t["metadata"]["name"] in names
    }


def control(twin: dict[str, Any], part: str) -> str | None:
    entry = ((twin.get("status") or {}).get("controlStatus") or {}).get(part) or {}
    return entry.get("result")


def power(sim: str, node: str) -> float:
    return float(httpx.get(f"{sim}/telemetry/{node}", timeout=5).json()["power"]["nodeW"])


def test_the_pool_closes_the_loop(
    cluster: LocalCluster,
    nodes: list[str],
    simulator: str,
    agent: RoleProcess,
    tmp_path: Path,
) -> None:
    first = manager(cluster, tmp_path, simulator, "all")
    try:
        # NodeHardware for every node, from the agent.
        def published() -> bool:
            with cluster.api() as api:
                listed = api.get(HARDWARE).json()["items"]
            return set(nodes) <= {h["metadata"]["name"] for h in listed}

        wait_until(published, 60, "NodeHardware for every node")
        # Labelled simulated: what admission lets this agent write, on KWOK nodes only.
        with cluster.api() as api:
            listed = {h["metadata"]["name"]: h for h in api.get(HARDWARE).json()["items"]}
        for name in nodes:
            assert listed[name]["metadata"]["labels"][keys.SIMULATED_LABEL] == "true"

        def applied() -> dict[str, dict[str, Any]] | None:
            current = twins(cluster, nodes)
            done = len(current) == len(nodes) and all(
                control(t, "cpu") == "applied" and control(t, "cpuGovernor") == "applied"
                for t in current.values()
            )
            return current if done else None

        current = wait_until(applied, 60, "every spec applied")
        # The manager labels the twins of KWOK nodes simulated, which lets the pool report.
        assert {t["metadata"]["labels"][keys.SIMULATED_LABEL] for t in current.values()} == {"true"}
        for gpus in (False, True):
            one, other, _ = group_pair(gpus)
            eco, perf = (one, other) if current[one]["spec"]["profile"] == "eco" else (other, one)
            assert current[perf]["spec"]["profile"] == "performance"
            if gpus:
                assert control(current[eco], "gpu") == "applied"
            wait_until(
                lambda eco=eco, perf=perf: power(simulator, eco) < 0.95 * power(simulator, perf),
                20,
                f"{eco} (eco) to draw less than {perf} under the same load",
            )

        # The real node is not the pool's: no NodeHardware, no twin status, no failed sync.
        with cluster.api() as api:
            assert api.get(f"{HARDWARE}/{REAL_NODE}").status_code == 404
        assert agent.metric("joulie_agent_node_syncs_total", result="failed") == 0

        # A GPU cap on a node without GPUs, added by another writer, is answered unsupported.
        cpu_node = group_pair(False)[0]
        with cluster.api() as api:
            api.patch(
                f"{TWINS}/{cpu_node}",
                params={"fieldManager": "someone-else", "force": "true"},
                headers={"Content-Type": "application/apply-patch+yaml"},
                json={
                    **joulie_object(keys.NODE_TWIN_KIND, cpu_node),
                    "spec": {"gpu": {"powerCap": {"capPctOfMax": 50}}},
                },
            ).raise_for_status()
        wait_until(
            lambda: control(twins(cluster, [cpu_node])[cpu_node], "gpu") == "unsupported",
            20,
            "a GPU cap on a CPU node to be reported unsupported",
        )

        # Heartbeats keep coming; none starts a manager reconcile.
        triggers = first.metric("joulie_manager_reconcile_triggers_total", source="nodehardware")

        def heartbeats() -> float:
            return agent.metric("joulie_kube_requests_total", resource="nodehardwares/status")

        beats, started = heartbeats(), time.monotonic()
        wait_until(
            lambda: heartbeats() >= beats + 2 * len(nodes),
            40,
            "two rounds of heartbeats",
        )
        # Two rounds take at least one interval: writes are heartbeats, not one per pass (1 s).
        assert time.monotonic() - started >= HEARTBEAT_S - 1
        assert (
            first.metric("joulie_manager_reconcile_triggers_total", source="nodehardware")
            == triggers
        )
    finally:
        assert first.stop() == 0

    # The manager stops writing presets: the agent restores them.
    second = manager(cluster, tmp_path, simulator, "off")
    try:
        wait_until(
            lambda: all(
                control(t, "cpuGovernor") == "restored" for t in twins(cluster, nodes).values()
            ),
            60,
            "every preset restored once the manager stops writing them",
        )
        controls = httpx.get(f"{simulator}/telemetry/{nodes[0]}", timeout=5).json()["controls"]
        assert controls.get("cpuPreset") is None
    finally:
        assert second.stop() == 0
