"""Caps that follow the pod on KWOK nodes (#27 item 3): the simulator gives each GPU pod boards
of its own and says which, the pool agent caps every board by the class of the pod holding it,
and the manager runs ``class_caps``. On one 8-GPU node a standard pod's four boards run at the
board's energy-optimal cap and a performance pod's four at the performance intent (100 % of the
maximum: no cap binds), each a process with its own credentials; once in line, passes cost no
control request and no NodeTwin status write; when the performance pod goes, its boards are free
and idle, at the idle intent."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hack.cluster.roles import (
    POOL_AGENT_ACCOUNT,
    manager_settings,
    pool_agent_settings,
    simulator_settings,
)
from hack.cluster.runner import LocalCluster, free_port
from joulie.api import keys
from joulie.api.inventory import load_inventory
from tests.e2e.test_simulator import busy_pod
from tests.support.builders import kwok_node
from tests.support.processes import RoleProcess
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

INVENTORY = Path(__file__).resolve().parents[1] / "data/inventories/02-cluster-nodes.yaml"
E2E = "pool-class-caps"
SELECTOR = f"joulie.io/e2e={E2E}"
TWINS = f"/apis/{keys.API_VERSION}/{keys.NODE_TWIN_PLURAL}"
HARDWARE = f"/apis/{keys.API_VERSION}/{keys.NODE_HARDWARE_PLURAL}"
GROUP = next(g for g in load_inventory(INVENTORY).nodes if g.gpu_count == 8)
NODE = "pcc-gpu-0"
STEADY_PASSES = 4


@pytest.fixture(scope="module")
def node(cluster: LocalCluster) -> Iterator[str]:
    cluster.create_ready_nodes([kwok_node(NODE, GROUP, labels={"joulie.io/e2e": E2E})])
    yield NODE
    with cluster.api() as api:
        api.delete(f"{HARDWARE}/{NODE}")
        api.delete(f"/api/v1/nodes/{NODE}")


def role(cluster: LocalCluster, tmp: Path, name: str, *args: Any, **kwargs: Any) -> RoleProcess:
    process = RoleProcess(cluster, name.split("-")[0], tmp / f"{name}.log", *args, **kwargs)
    wait_until(process.ready, 60, f"the {name} to be ready")
    return process


@pytest.fixture(scope="module")
def stack(
    cluster: LocalCluster, node: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RoleProcess, RoleProcess, RoleProcess, str]]:
    addr = f"127.0.0.1:{free_port()}"
    url = f"http://{addr}"
    tmp = tmp_path_factory.mktemp("pool-class-caps")
    started: list[RoleProcess] = []
    try:
        started.append(
            role(
                cluster,
                tmp,
                "simulator",
                {**simulator_settings(addr, SELECTOR), "SIM_POWER_SETTLE": "300ms"},
            )
        )
        started.append(
            role(
                cluster,
                tmp,
                "agent",
                pool_agent_settings(SELECTOR, url, control_interval="1s"),
                account=POOL_AGENT_ACCOUNT,
            )
        )
        started.append(
            role(
                cluster,
                tmp,
                "manager",
                manager_settings(
                    SELECTOR, url, reconcile_interval="1s", policy={"POLICY_TYPE": "class_caps"}
                ),
            )
        )
        sim, agent, manager = started
        yield sim, agent, manager, url
    finally:
        for process in reversed(started):
            assert process.stop() == 0, process.log.read_text()[-4000:]


def telemetry(url: str) -> dict[str, Any]:
    response = httpx.get(f"{url}/telemetry/{NODE}", timeout=5)
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body


def twin(cluster: LocalCluster) -> dict[str, Any]:
    with cluster.api() as api:
        found = api.get(f"{TWINS}/{NODE}")
    return found.json() if found.status_code == 200 else {}


def test_each_board_runs_at_the_class_cap_of_its_pod_and_steady_passes_write_nothing(
    cluster: LocalCluster, stack: tuple[RoleProcess, RoleProcess, RoleProcess, str]
) -> None:
    sim, agent, _, url = stack
    namespace = f"pcc-{uuid.uuid4().hex[:6]}"
    cpu = str(GROUP.cpu_cores // 4)
    pods = {
        "standard": busy_pod("standard", NODE, cpu, gpus=4),
        "performance": busy_pod("performance", NODE, cpu, gpus=4),
    }
    for workload_class, manifest in pods.items():
        manifest["metadata"].setdefault("annotations", {})[keys.WORKLOAD_CLASS_ANNOTATION] = (
            workload_class
        )
    with cluster.api() as api:
        api.post("/api/v1/namespaces", json={"metadata": {"name": namespace}}).raise_for_status()
        for manifest in pods.values():
            api.post(f"/api/v1/namespaces/{namespace}/pods", json=manifest).raise_for_status()
    try:
        # The manager's per-class intents for the node.
        class_caps = wait_until(
            lambda: ((twin(cluster).get("spec") or {}).get("gpu") or {}).get("classCaps"),
            60,
            "the manager to write classCaps",
        )
        standard_w = float(class_caps["standard"]["capWattsPerGpu"])
        assert class_caps["performance"]["capPctOfMax"] == 100
        assert GROUP.gpu_max_cap_watts is not None
        max_w = float(GROUP.gpu_max_cap_watts)
        assert standard_w < max_w

        def in_line() -> dict[str, Any] | None:
            report = telemetry(url)
            held = {
                (p["namespace"], p["name"]): p["devices"] for p in report.get("podDevices") or ()
            }
            boards = {
                b["board"]: b.get("capWatts") for b in report["controls"].get("gpuBoards") or ()
            }
            standard = held.get((namespace, "standard"), [])
            performance = held.get((namespace, "performance"), [])
            done = (
                len(standard) == 4
                and len(performance) == 4
                and all(boards.get(b) == standard_w for b in standard)
                and all(boards.get(b, 0) >= max_w for b in performance)
            )
            status = ((twin(cluster).get("status") or {}).get("controlStatus") or {}).get("gpu")
            return report if done and status and status.get("result") == "applied" else None

        report = wait_until(in_line, 90, "every board at its pod's class cap")
        # The simulator's boards are what the agent discovered: eight distinct IDs, each pod's
        # four among them, none shared.
        ids = report["hardware"]["gpuIds"]
        assert len(set(ids)) == 8
        devices = [d for p in report["podDevices"] for d in p["devices"]]
        assert sorted(devices) == sorted(ids)
        gpu_status = twin(cluster)["status"]["controlStatus"]["gpu"]
        assert "work" in gpu_status["message"]

        # Steady: passes keep coming, but no control request and no NodeTwin status write.
        requests = sim.metric("joulie_sim_control_requests_total")
        changes = sim.metric("joulie_sim_control_changes_total")
        writes = agent.metric("joulie_kube_requests_total", resource="nodetwins/status")
        updated = gpu_status["updatedAt"]
        assert requests > 0
        assert writes > 0  # the counter the steady check reads does count these writes
        syncs = agent.metric("joulie_agent_node_syncs_total", result="ok")
        wait_until(
            lambda: (
                agent.metric("joulie_agent_node_syncs_total", result="ok") >= syncs + STEADY_PASSES
            ),
            30,
            f"{STEADY_PASSES} more passes over the node",
        )
        assert sim.metric("joulie_sim_control_requests_total") == requests
        assert sim.metric("joulie_sim_control_changes_total") == changes
        assert agent.metric("joulie_kube_requests_total", resource="nodetwins/status") == writes
        assert twin(cluster)["status"]["controlStatus"]["gpu"]["updatedAt"] == updated
        assert agent.metric("joulie_agent_node_syncs_total", result="failed") == 0

        # The performance pod goes: its boards are free, idle, and at the idle intent.
        freed = next(p for p in report["podDevices"] if p["name"] == "performance")["devices"]
        with cluster.api() as api:
            api.delete(
                f"/api/v1/namespaces/{namespace}/pods/performance",
                params={"gracePeriodSeconds": "0"},
            ).raise_for_status()

        def idle() -> bool:
            report = telemetry(url)
            held = {p["name"] for p in report.get("podDevices") or ()}
            boards = {
                b["board"]: b.get("capWatts") for b in report["controls"].get("gpuBoards") or ()
            }
            return held == {"standard"} and all(boards.get(b) == idle_w for b in freed)

        idle_w = float(class_caps["idle"]["capWattsPerGpu"])
        wait_until(idle, 60, "the performance pod's boards freed and at the idle cap")
    finally:
        # Performance pods are counted cluster-wide: leave none behind.
        with cluster.api() as api:
            api.delete(f"/api/v1/namespaces/{namespace}/pods", params={"gracePeriodSeconds": "0"})
            api.delete(f"/api/v1/namespaces/{namespace}")
