"""The live controller and the simulator boot the same nodes for the same waiting work: one
fixture (an inventory whose every node is off, and a burst of pods), read once by the simulator
and once as the live cache would hold it, through each side's facts into the shared
``plan_boots``."""

from __future__ import annotations

from typing import Any

import pytest

from hack.cluster.nodes import node_manifest
from joulie.api import keys
from joulie.api.gpu import pod_gpu_count, pod_gpu_resource
from joulie.api.inventory import Inventory, parse_inventory
from joulie.core.lifecycle_limits import Limits
from joulie.hardware.catalog import Catalog
from joulie.kube.projections import node_projection, pod_projection
from joulie.manager.cache import LIFECYCLE_NODE_ANNOTATIONS
from joulie.manager.lifecycle.boots import plan_for, waiting_pods
from joulie.manager.lifecycle.facts import in_flight, offers_by_shape, registered_off_nodes
from joulie.sim.engine import Engine, Scenario
from joulie.sim.lifecycle import LifecycleSettings
from joulie.sim.trace import Workload
from tests.support.builders import container, inventory_group, pod, workload

HOUR = 3600.0
SUBMIT = 3 * HOUR + 30.0
"""After every node has gone off (nothing ran for three hours)."""

INVENTORY = parse_inventory(
    {
        "nodes": [
            inventory_group("big", replicas=2, cpu_cores=192, memory_gib=2048),
            inventory_group("gpu", replicas=3, gpus=8, product="NVIDIA H100 80GB HBM3"),
            inventory_group("small", replicas=4, cpu_cores=64, memory_gib=256),
        ]
    }
)


def burst() -> list[Workload]:
    """Pods that need two small nodes' CPU, one GPU node, and one big node's memory."""
    cpu = [
        workload(f"c{i}", submit_s=SUBMIT, cpu_millis=30_000, memory_bytes=8 * 2**30)
        for i in range(3)
    ]
    gpu = [workload("g", submit_s=SUBMIT, gpus=4, cpu_millis=8_000)]
    memory = [workload("m", submit_s=SUBMIT, cpu_millis=4_000, memory_bytes=1800 * 2**30)]
    return [*cpu, *gpu, *memory]


def simulated_boots(catalog: Catalog, inventory: Inventory, work: list[Workload]) -> list[str]:
    engine = Engine(
        Scenario(
            name="shared",
            baseline="A",
            seed=1,
            inventory=inventory,
            workloads=work,
            catalog=catalog,
            policy=None,
            lifecycle=LifecycleSettings(limits=Limits(max_concurrent_drains=20)),
        )
    )
    life = engine.lifecycle
    assert life is not None
    booted: list[tuple[float, str]] = []
    boot = life._boot

    def record(node: int, t: float) -> None:
        booted.append((t, engine.fleet.names[node]))
        boot(node, t)

    life._boot = record  # type: ignore[method-assign]
    engine.simulate()
    first = min(t for t, _ in booted)
    assert first >= SUBMIT
    return sorted(name for t, name in booted if t == first)


def live_boots(inventory: Inventory, work: list[Workload]) -> list[str]:
    project_node = node_projection(annotation_keys=LIFECYCLE_NODE_ANNOTATIONS)
    project_pod = pod_projection(gpu_count=pod_gpu_count, gpu_resource=pod_gpu_resource)
    nodes = []
    for group in inventory.nodes:
        for name in group.node_names():
            raw: dict[str, Any] = node_manifest(name, group)
            raw["metadata"]["annotations"][keys.LIFECYCLE_PHASE_ANNOTATION] = "off"
            raw["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
            nodes.append(project_node(raw))
    unschedulable = {"conditions": [_unschedulable()]}
    pods = []
    for w in work:
        requests: dict[str, Any] = {"cpu": f"{w.cpu_millis}m", "memory": str(w.memory_bytes)}
        if w.gpus and w.gpu_resource:
            requests[w.gpu_resource] = str(w.gpus)
        raw_pod = pod(w.id, containers=[container(requests)], phase="Pending", status=unschedulable)
        pods.append(project_pod(raw_pod))
    offers = offers_by_shape(*registered_off_nodes(nodes), SUBMIT)
    flights = {n.name: in_flight(n) for n in nodes}
    plan = plan_for(
        waiting_pods(pods), nodes, flights, offers, lambda _: None, {}, Limits(), SUBMIT
    )
    by_group = {o.group: o for o in offers}
    return sorted(n for group, count in plan.boots.items() for n in by_group[group].nodes[:count])


def _unschedulable() -> dict[str, str]:
    return {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.load()


def test_live_and_simulated_boot_decisions_are_equal(catalog: Catalog) -> None:
    work = burst()
    live = live_boots(INVENTORY, work)
    assert live == sorted(["small-0", "small-1", "gpu-0", "big-0"])
    assert simulated_boots(catalog, INVENTORY, work) == live
