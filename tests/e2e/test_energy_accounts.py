"""The manager's energy accounts end to end: KWOK nodes drawing simulated power, a pool agent
publishing their hardware, two managers reading node power over HTTP. Two namespaces, one
performance-heavy and one standard-heavy (sharing a CPU node), are each booked within 5 % of
what the simulator says they drew; when the leader is stopped the follower continues the
counters from the stored totals, counting no interval twice."""

from __future__ import annotations

import time
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
from joulie.api.inventory import NodeGroup, load_inventory
from tests.e2e.test_simulator import busy_pod
from tests.support.builders import kwok_node
from tests.support.processes import RoleProcess
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

INVENTORY = Path(__file__).resolve().parents[1] / "data/inventories/02-cluster-nodes.yaml"
E2E = "energy"
SELECTOR = f"joulie.io/e2e={E2E}"
PREFIX = "nrg"
INTERVAL_S = 1.0
WINDOW_S = 40.0
TOLERANCE = 0.05


def group(gpus: bool) -> NodeGroup:
    return next(g for g in load_inventory(INVENTORY).nodes if (g.gpu_count > 0) == gpus)


GPU, CPU = group(True), group(False)
PERF_NODE, STD_NODE, SHARED_NODE = f"{PREFIX}-gpu-0", f"{PREFIX}-gpu-1", f"{PREFIX}-cpu-0"


@pytest.fixture(scope="module")
def nodes(cluster: LocalCluster) -> None:
    labels = {"joulie.io/e2e": E2E}
    cluster.create_ready_nodes(
        [
            kwok_node(PERF_NODE, GPU, labels=labels),
            kwok_node(STD_NODE, GPU, labels=labels),
            kwok_node(SHARED_NODE, CPU, labels=labels),
        ]
    )


def role(cluster: LocalCluster, tmp: Path, name: str, *args: Any, **kwargs: Any) -> RoleProcess:
    process = RoleProcess(cluster, name.split("-")[0], tmp / f"{name}.log", *args, **kwargs)
    wait_until(process.ready, 60, f"the {name} to be ready")
    return process


@pytest.fixture(scope="module")
def simulator(
    cluster: LocalCluster, nodes: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RoleProcess, str]]:
    addr = f"127.0.0.1:{free_port()}"
    tmp = tmp_path_factory.mktemp("energy-sim")
    sim = role(
        cluster,
        tmp,
        "simulator",
        {**simulator_settings(addr, SELECTOR), "SIM_POWER_SETTLE": "300ms"},
    )
    agent = role(
        cluster,
        tmp,
        "agent",
        pool_agent_settings(SELECTOR, f"http://{addr}"),
        account=POOL_AGENT_ACCOUNT,
    )
    try:
        yield sim, f"http://{addr}"
    finally:
        agent.stop()
        sim.stop()


def leads(manager: RoleProcess) -> bool:
    manager.alive()
    text = httpx.get(f"http://127.0.0.1:{manager.metrics_port}/readyz", timeout=5).text
    return "(leader)" in text


def booked(process: RoleProcess, metric: str, namespace: str, workload_class: str) -> float:
    return process.metric(metric, namespace=namespace, **{"class": workload_class})


def test_accounts_match_the_simulators_ground_truth_and_survive_a_leader_change(
    cluster: LocalCluster, simulator: tuple[RoleProcess, str], tmp_path: Path
) -> None:
    sim, url = simulator
    # Every node in performance: no caps, so the accounts are about who used the energy.
    settings = manager_settings(
        SELECTOR,
        url,
        reconcile_interval=f"{INTERVAL_S:g}s",
        policy={"POLICY_TYPE": "static_partition", "STATIC_HP_FRAC": "1.0"},
    )
    first = role(cluster, tmp_path, "manager-first", settings)
    second = role(cluster, tmp_path, "manager-second", settings)
    perf_ns, std_ns = f"perf-{uuid.uuid4().hex[:6]}", f"std-{uuid.uuid4().hex[:6]}"
    try:
        leader, follower = wait_until(
            lambda: (first, second) if leads(first) else (second, first) if leads(second) else None,
            60,
            "one manager to lead",
        )
        # The leader reads the nodes idle first: its idle draw is the lowest reading it saw.
        wait_until(
            lambda: leader.metric("joulie_node_overhead_energy_joules_total") > 0,
            60,
            "the leader to book the idle nodes",
        )
        half = str(GPU.cpu_cores // 2)
        pods = {
            perf_ns: [
                _annotated(
                    busy_pod("train", PERF_NODE, half, gpus=GPU.gpu_count),
                    {keys.WORKLOAD_CLASS_ANNOTATION: "performance"},
                ),
                busy_pod("etl", SHARED_NODE, str(CPU.cpu_cores // 4)),
            ],
            std_ns: [
                _annotated(
                    busy_pod("batch", STD_NODE, half, gpus=GPU.gpu_count),
                    {keys.SIM_GPU_UTILIZATION_ANNOTATION: "0.4"},
                ),
                busy_pod("etl", SHARED_NODE, str(CPU.cpu_cores * 3 // 4)),
            ],
        }
        with cluster.api() as api:
            for namespace, manifests in pods.items():
                api.post("/api/v1/namespaces", json={"metadata": {"name": namespace}})
                for pod in manifests:
                    api.post(f"/api/v1/namespaces/{namespace}/pods", json=pod).raise_for_status()
        accounts = [(perf_ns, "performance"), (perf_ns, "standard"), (std_ns, "standard")]
        truth_name = "joulie_sim_workload_energy_joules_total"
        booked_name = "joulie_workload_energy_joules_total"
        wait_until(
            lambda: (
                all(booked(leader, booked_name, n, c) > 0 for n, c in accounts)
                and all(booked(sim, truth_name, n, c) > 0 for n, c in accounts)
            ),
            60,
            "both namespaces' pods to run and be booked",
        )
        # Past the interval in which the pods started (split by whoever ran at its end): three
        # more readings booked to the performance namespace.
        seen: set[float] = set()

        def three_more_readings() -> bool:
            seen.add(booked(leader, booked_name, perf_ns, "performance"))
            return len(seen) > 3

        wait_until(three_more_readings, 30, "three more readings to be booked")

        def sample(manager: RoleProcess) -> tuple[dict[str, float], dict[str, float]]:
            ours = {
                ns: sum(booked(manager, booked_name, ns, c) for n, c in accounts if n == ns)
                for ns in pods
            }
            truth = {
                ns: sum(booked(sim, truth_name, ns, c) for n, c in accounts if n == ns)
                for ns in pods
            }
            return ours, truth

        # The manager books at each reading (every second), so its counter lags the
        # simulator's by up to a reading at either end of a window: compare the rates over many
        # samples (least-squares slopes), not two differences.
        ours_1, truth_1 = sample(leader)
        series = []
        started = time.monotonic()
        while (elapsed := time.monotonic() - started) < WINDOW_S:
            series.append((elapsed, *sample(leader)))
            time.sleep(1.7)
        ours_2, _ = sample(leader)
        watts = {}
        for ns in pods:
            at = [t for t, _, _ in series]
            counted = slope(at, [ours[ns] for _, ours, _ in series])
            drew = slope(at, [truth[ns] for _, _, truth in series])
            watts[ns] = drew
            assert drew > 0
            assert abs(counted - drew) <= TOLERANCE * drew, (ns, counted, drew)
        # The performance-heavy namespace drew more (its boards busier), though the standard-heavy
        # one holds three quarters of the shared CPU node.
        assert watts[perf_ns] > watts[std_ns] * 1.2, watts

        # The leader stops (SIGTERM: it writes its totals and hands the Lease back).
        ours_before_stop, truth_before_stop = sample(leader)
        stopped_at = time.monotonic()
        assert leader.stop() == 0, leader.log.read_text()[-4000:]
        ours_3, _ = sample_until_leading(follower, sample)
        took = time.monotonic() - stopped_at
        for ns in pods:
            # Continued from the stored totals, not from zero.
            assert ours_3[ns] >= ours_2[ns] - 2 * watts[ns] * INTERVAL_S
        time.sleep(WINDOW_S / 2)
        ours_4, truth_4 = sample(follower)
        for ns in pods:
            drew = truth_4[ns] - truth_1[ns]
            counted = ours_4[ns] - ours_1[ns]
            # Nothing counted twice; at most the hand-over (and an interval each side) lost.
            lost_at_most = watts[ns] * (took + 3 * INTERVAL_S)
            assert counted <= drew * (1 + TOLERANCE), (ns, counted, drew)
            assert counted >= drew * (1 - TOLERANCE) - lost_at_most, (
                ns,
                counted,
                drew,
                took,
                ours_before_stop[ns] - ours_1[ns],
                truth_before_stop[ns] - truth_1[ns],
                ours_3[ns] - ours_1[ns],
            )
    finally:
        for manager in (first, second):
            manager.stop()
        # Performance pods are counted cluster-wide (queue_aware_v1 in other tests reads them).
        with cluster.api() as api:
            for namespace in (perf_ns, std_ns):
                api.delete(
                    f"/api/v1/namespaces/{namespace}/pods", params={"gracePeriodSeconds": "0"}
                )
                api.delete(f"/api/v1/namespaces/{namespace}")


def slope(xs: list[float], ys: list[float]) -> float:
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def sample_until_leading(
    manager: RoleProcess, sample: Any
) -> tuple[dict[str, float], dict[str, float]]:
    wait_until(lambda: leads(manager), 60, "the follower to lead")
    wait_until(
        lambda: manager.metric("joulie_node_overhead_energy_joules_total") > 0,
        60,
        "the new leader to continue the accounts",
    )
    result: tuple[dict[str, float], dict[str, float]] = sample(manager)
    return result


def _annotated(pod: dict[str, Any], annotations: dict[str, str]) -> dict[str, Any]:
    pod["metadata"].setdefault("annotations", {}).update(annotations)
    return pod
