"""The simulator role as its own process, with its own credentials, against the local KWOK
cluster: telemetry follows pods and controls, errors are clear, and a real Prometheus scrapes
the per-node watts."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hack.cluster.nodes import node_manifests
from hack.cluster.runner import LocalCluster, free_port
from joulie.api.inventory import load_inventory
from tests.support.builders import WORK_IMAGE, container, pod_manifest
from tests.support.processes import PrometheusServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

INVENTORY = Path(__file__).resolve().parents[1] / "data/inventories/02-cluster-nodes.yaml"
JOULIE = str(Path(sys.executable).parent / "joulie")
CPU_NODE = "kwok-cpu-highfreq-0"  # 2 x AMD EPYC 9375F, 64 CPUs, no GPU
GPU_NODE = "kwok-h100-nvl-0"
SETTLE_S = 0.3  # SIM_POWER_SETTLE: the time constant of the simulated power's first-order lag


class Simulator:
    def __init__(self, cluster: LocalCluster, tmp: Path) -> None:
        self.port = free_port()
        self.metrics_port = free_port()
        self.log = tmp / "simulator.log"
        env = {
            **os.environ,
            "KUBECONFIG": str(cluster.role_kubeconfig("simulator")),
            "SIM_ADDR": f"127.0.0.1:{self.port}",
            "METRICS_ADDR": f"127.0.0.1:{self.metrics_port}",
            "SIM_POWER_SETTLE": f"{SETTLE_S}s",
            "LOG_FORMAT": "json",
        }
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                [JOULIE, "--role=simulator"], env=env, stdout=out, stderr=subprocess.STDOUT
            )
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=10)

    def ready(self) -> bool:
        assert self.process.poll() is None, self.log.read_text()
        response = httpx.get(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=2)
        return response.status_code == 200

    def telemetry(self, node: str) -> dict[str, Any]:
        response = self.http.get(f"/telemetry/{node}")
        response.raise_for_status()
        return dict(response.json())

    def stop(self) -> None:
        self.http.close()
        self.process.terminate()
        self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def simulator(
    cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Simulator]:
    nodes = node_manifests(load_inventory(INVENTORY))
    cluster.create_ready_nodes(nodes)
    sim = Simulator(cluster, tmp_path_factory.mktemp("simulator"))
    try:
        wait_until(sim.ready, 60, "the simulator to be ready")
        yield sim
        assert sim.process.poll() is None, "the simulator died"
    finally:
        sim.stop()
    assert sim.process.returncode == 0, sim.log.read_text()[-2000:]


def steady(simulator: Simulator, node: str, reading: str) -> Callable[[], dict[str, Any] | None]:
    """A check for :func:`wait_until`: the node's telemetry once ``power[reading]`` has stopped
    moving, that is two reports at least one settling time constant apart in simulated time
    (SIM_POWER_SETTLE) that agree within 0.5 %, which leaves under 1 % to go."""
    base: dict[str, Any] | None = None

    def check() -> dict[str, Any] | None:
        nonlocal base
        report = simulator.telemetry(node)
        if base is not None and report["simTimeS"] - base["simTimeS"] < SETTLE_S:
            return None  # too close to the last reading to tell
        previous, base = base, report
        if previous is None:
            return None
        watts, before = report["power"][reading], previous["power"][reading]
        return report if abs(watts - before) <= 0.005 * max(watts, before) else None

    return check


def busy_pod(name: str, node: str, cpu: str, gpus: int = 0) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": cpu}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    limits = {k: v for k, v in requests.items() if k != "cpu"}
    work = container(requests, limits, name="work", image=WORK_IMAGE)
    return pod_manifest(name, node_name=node, containers=[work])


def test_idle_nodes_report_recognised_hardware(simulator: Simulator) -> None:
    cpu = simulator.telemetry(CPU_NODE)
    assert cpu["hardware"]["cpuModel"] == "AMD_EPYC_9375F"
    assert cpu["hardware"]["sockets"] == 2
    assert cpu["hardware"]["gpuCount"] == 0
    assert cpu["power"]["nodeW"] > 0
    gpu = simulator.telemetry(GPU_NODE)
    assert gpu["hardware"]["gpuCount"] == 8
    assert gpu["hardware"]["gpuMaxWPerGpu"] == 400
    assert gpu["power"]["gpuTotalW"] > 0


def test_running_pods_raise_power_and_a_cap_lowers_it(
    cluster: LocalCluster, simulator: Simulator, namespace: str
) -> None:
    idle = simulator.telemetry(CPU_NODE)["power"]["cpuPackageW"]
    with cluster.api() as api:
        created = api.post(
            f"/api/v1/namespaces/{namespace}/pods", json=busy_pod("busy", CPU_NODE, "64")
        )
        assert created.status_code == 201, created.text
    loaded = wait_until(
        lambda: (t := simulator.telemetry(CPU_NODE))["power"]["cpuPackageW"] > idle * 2 and t,
        60,
        "the node's power to rise with a running pod",
    )
    assert loaded["utilization"]["cpu"] == 1.0
    assert loaded["speed"]["cpu"] == 1.0
    full = wait_until(
        steady(simulator, CPU_NODE, "cpuPackageW"), 30, "the node's power to settle under load"
    )["power"]["cpuPackageW"]

    response = simulator.http.post(f"/control/{CPU_NODE}", json={"cpu": {"capPctOfMax": 60}})
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["cpuCap"]["result"] == "applied"
    cap = answer["controls"]["cpuCapWatts"]
    assert cap == pytest.approx(0.6 * loaded["hardware"]["cpuMaxW"])
    capped = wait_until(
        lambda: (t := simulator.telemetry(CPU_NODE))["power"]["cpuPackageW"] <= cap * 1.01 and t,
        30,
        "power to settle under the cap",
    )
    assert capped["power"]["cpuPackageW"] < full
    # The cap slows the work down: saving power is not free.
    assert capped["speed"]["cpu"] < 1.0
    assert capped["energy"]["cpuJoules"] > loaded["energy"]["cpuJoules"]


def test_gpu_control_on_a_cpu_only_node_is_unsupported(simulator: Simulator) -> None:
    response = simulator.http.post(
        f"/control/{CPU_NODE}", json={"gpu": {"capWattsPerGpu": 200, "preset": "efficient"}}
    )
    assert response.status_code == 200
    answer = response.json()
    assert answer["gpuCap"]["result"] == "unsupported"
    assert answer["gpuGovernor"]["result"] == "unsupported"


def test_gpu_cap_on_a_gpu_node(cluster: LocalCluster, simulator: Simulator, namespace: str) -> None:
    with cluster.api() as api:
        api.post(
            f"/api/v1/namespaces/{namespace}/pods", json=busy_pod("train", GPU_NODE, "8", gpus=8)
        ).raise_for_status()
    wait_until(
        lambda: simulator.telemetry(GPU_NODE)["utilization"]["gpu"] == 1.0,
        60,
        "the GPUs to be busy",
    )
    response = simulator.http.post(f"/control/{GPU_NODE}", json={"gpu": {"capWattsPerGpu": 100}})
    answer = response.json()
    assert answer["gpuCap"]["result"] == "applied"
    # Below the device minimum: clamped to the 200 W floor of the H100 NVL, and said so.
    assert answer["controls"]["gpuCapWattsPerGpu"] == 200
    assert "clamped" in answer["gpuCap"]["message"]
    settled = wait_until(
        lambda: (t := simulator.telemetry(GPU_NODE))["power"]["gpuPerGpuW"] <= 202 and t,
        30,
        "GPU power to settle under the cap",
    )
    assert settled["speed"]["gpu"] < 1.0


def test_bad_requests_get_clear_answers(simulator: Simulator) -> None:
    missing = simulator.http.get("/telemetry/no-such-node")
    assert missing.status_code == 404
    assert "no-such-node" in missing.json()["error"]
    assert simulator.http.post("/control/no-such-node", json={"cpu": {}}).status_code == 404
    not_json = simulator.http.post(f"/control/{CPU_NODE}", content=b"{cap: 5")
    assert not_json.status_code == 400
    assert "not JSON" in not_json.json()["error"]
    unknown = simulator.http.post(f"/control/{CPU_NODE}", json={"cpu": {"capWats": 100}})
    assert unknown.status_code == 400
    assert "capWats" in unknown.json()["error"]
    out_of_range = simulator.http.post(f"/control/{CPU_NODE}", json={"cpu": {"capPctOfMax": 150}})
    assert out_of_range.status_code == 400
    assert "capPctOfMax" in out_of_range.json()["error"]
    empty = simulator.http.post(f"/control/{CPU_NODE}", json={})
    assert empty.status_code == 400
    # Nested past Python's recursion limit this was a 500; true was taken as a 1 W cap.
    deep = simulator.http.post(f"/control/{CPU_NODE}", content=b"[" * 990 + b"]" * 990)
    assert deep.status_code == 400
    assert "nested deeper than 254 levels" in deep.json()["error"]
    for wrong in (True, "100"):
        typed = simulator.http.post(f"/control/{CPU_NODE}", json={"cpu": {"capWatts": wrong}})
        assert typed.status_code == 400
        assert "cpu.capWatts" in typed.json()["error"]
    # The service is still fine afterwards.
    assert simulator.telemetry(CPU_NODE)["node"] == CPU_NODE


def test_prometheus_scrapes_per_node_watts(simulator: Simulator, tmp_path: Path) -> None:
    prom = PrometheusServer(tmp_path, [f"127.0.0.1:{simulator.port}"])
    try:

        def query() -> list[dict[str, Any]]:
            result = prom.query("joulie_sim_node_power_watts")
            return result if len(result) >= 41 else []

        series = wait_until(query, 60, "Prometheus to scrape the simulator")
        by_node = {s["metric"]["node"]: float(s["value"][1]) for s in series}
        assert by_node[GPU_NODE] > 0
        assert by_node[CPU_NODE] > 0
        assert {n["metadata"]["name"] for n in node_manifests(load_inventory(INVENTORY))} <= set(
            by_node
        )
    finally:
        prom.stop()
