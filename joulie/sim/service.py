"""The simulator role: a telemetry/control HTTP service standing in for KWOK nodes' hardware.

It watches Nodes and running Pods through informers, keeps a ``Simulation`` of every selected
node, and serves the telemetry/control contract (``joulie.api.telemetry``) plus Prometheus
metrics computed at scrape time. It plays each node's kubelet too: every GPU board has a stable
ID, each running GPU pod holds boards of its own, and the telemetry says which (see
:mod:`joulie.sim.kwok_hardware`), so an agent caps boards by their pods' classes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

import structlog
from aiohttp import web
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.aiohttp import make_aiohttp_handler
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from pydantic import ValidationError

from joulie.api import json_body, keys
from joulie.api.gpu import pod_gpu_count
from joulie.api.telemetry import ControlRequest
from joulie.hardware.catalog import Catalog
from joulie.kube.client import KubeClient
from joulie.kube.connection import RoleConnection
from joulie.kube.informer import Handlers, Informer, InformerBundle
from joulie.kube.projections import (
    SlimNode,
    SlimPod,
    node_projection,
    pod_projection,
    pods_by_node,
)
from joulie.settings import IDLE_CONNECTION_TIMEOUT_S, split_address
from joulie.sim.kwok_hardware import Simulation, UnknownNode
from joulie.sim.settings import SimulatorSettings

log = structlog.get_logger("joulie.simulator")

MAX_BODY_BYTES = 64 * 1024


class SimClock:
    """Simulated seconds since start: wall-clock time scaled by SIM_TIME_SCALE."""

    def __init__(self, scale: float, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._scale = scale
        self._monotonic = monotonic
        self._start = monotonic()

    def __call__(self) -> float:
        return (self._monotonic() - self._start) * self._scale


class SimulationCollector(Collector):
    """Per-node power and energy, cluster IT power and facility figures, at scrape time."""

    def __init__(self, sim: Simulation, clock: Callable[[], float]) -> None:
        self._sim = sim
        self._clock = clock

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        it_power = self._sim.advance_all(self._clock())
        power = GaugeMetricFamily(
            "joulie_sim_node_power_watts", "Simulated node power", labels=["node"]
        )
        cpu = GaugeMetricFamily(
            "joulie_sim_node_cpu_power_watts", "Simulated CPU package power", labels=["node"]
        )
        gpu = GaugeMetricFamily(
            "joulie_sim_node_gpu_power_watts",
            "Simulated power of all GPUs of the node",
            labels=["node"],
        )
        energy = CounterMetricFamily(
            "joulie_sim_node_energy_joules", "Simulated energy used by the node", labels=["node"]
        )
        racks: dict[str, float] = {}
        for name, node in self._sim.nodes.items():
            state = node.state
            gpu_w = state.gpu_w_per_gpu * node.hardware.gpu_count
            power.add_metric([name], state.cpu_w + gpu_w)
            cpu.add_metric([name], state.cpu_w)
            gpu.add_metric([name], gpu_w)
            energy.add_metric([name], state.cpu_energy_j + state.gpu_energy_j)
            if node.rack:
                racks[node.rack] = racks.get(node.rack, 0.0) + state.cpu_w + gpu_w
        yield from (power, cpu, gpu, energy)
        rack = GaugeMetricFamily(
            "joulie_sim_rack_power_watts",
            "Simulated power of the nodes carrying each joulie.io/rack label",
            labels=["rack"],
        )
        for name, watts in sorted(racks.items()):
            rack.add_metric([name], watts)
        yield rack
        pue, cooling = self._sim.facility(it_power)
        yield GaugeMetricFamily(
            "joulie_sim_cluster_it_power_watts", "Simulated IT power of all nodes", value=it_power
        )
        yield GaugeMetricFamily(
            "joulie_sim_facility_ambient_celsius",
            "Facility ambient temperature",
            value=self._sim.ambient_c,
        )
        yield GaugeMetricFamily(
            "joulie_sim_facility_cooling_power_watts", "Simulated cooling power", value=cooling
        )
        yield GaugeMetricFamily("joulie_sim_facility_pue", "Simulated PUE", value=pue)
        workload = CounterMetricFamily(
            "joulie_sim_workload_energy_joules",
            "Simulated energy each namespace and workload class drew: each node's energy split "
            "between its pods by the power each truly draws (the ground truth of the manager's "
            "accounts)",
            labels=["namespace", "class"],
        )
        for account, joules in sorted(self._sim.workload_energy.items()):
            workload.add_metric(account.rsplit("/", 1), joules)
        yield workload
        yield CounterMetricFamily(
            "joulie_sim_overhead_energy_joules",
            "Simulated node energy no pod drew (idle capacity nobody asked for)",
            value=self._sim.overhead_energy,
        )
        yield CounterMetricFamily(
            "joulie_sim_control_requests",
            "Control requests answered (an agent in line with its specs sends none)",
            value=self._sim.control_requests,
        )
        yield CounterMetricFamily(
            "joulie_sim_control_changes",
            "Control requests that changed a node's controls",
            value=self._sim.control_changes,
        )


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def simulator_app(
    sim: Simulation, clock: Callable[[], float], registry: CollectorRegistry
) -> web.Application:
    async def telemetry(request: web.Request) -> web.Response:
        name = request.match_info["node"]
        try:
            report = sim.report(name, clock(), datetime.now(UTC))
        except UnknownNode:
            return _error(404, f"unknown node {name!r}")
        return web.json_response(report.to_wire())

    async def control(request: web.Request) -> web.Response:
        name = request.match_info["node"]
        if name not in sim.nodes:
            return _error(404, f"unknown node {name!r}")
        raw = await request.read()
        try:
            json_body.loads(raw, max_bytes=MAX_BODY_BYTES)
        except json_body.JsonBodyError as exc:
            return _error(400, exc.reason)
        try:
            # Strictly, as Go would read it: true is not 1 W, "100" is not a number.
            parsed = ControlRequest.model_validate_json(raw, strict=True)
        except ValidationError as exc:
            reasons = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}"
                for e in exc.errors(include_url=False)
            )
            return _error(400, f"invalid control request: {reasons}")
        response = sim.control(name, parsed, clock())
        return web.json_response(response.to_wire())

    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.router.add_get("/telemetry/{node}", telemetry)
    app.router.add_post("/control/{node}", control)
    app.router.add_get("/metrics", make_aiohttp_handler(registry))
    return app


class SimulatorRole:
    name = "simulator"

    def __init__(
        self,
        settings: SimulatorSettings,
        registry: CollectorRegistry = REGISTRY,
        client: KubeClient | None = None,
    ) -> None:
        self.settings = settings
        self._registry = registry
        self._connection = RoleConnection(client)
        self._ready = False
        self.port: int | None = None

    def is_ready(self) -> bool:
        return self._ready

    def status(self) -> str:
        """Why it is not ready yet, while the cluster has not answered (for /readyz)."""
        if self._ready:
            return "serving"
        return self._connection.status()

    async def run(self, stopping: asyncio.Event) -> None:
        settings = self.settings
        catalog = Catalog.load(settings.hardware_catalog_path or None)
        client = await self._connection.open(stopping)
        if client is None:  # stopped before the cluster answered
            return
        clock = SimClock(settings.sim_time_scale)
        nodes: Informer[SlimNode] = Informer(
            client,
            "/api/v1/nodes",
            node_projection(
                annotation_keys=[keys.HW_CPU_MODEL_ANNOTATION, keys.HW_GPU_MODEL_ANNOTATION]
            ),
            label_selector=settings.sim_node_selector or None,
        )
        # Only running pods draw power; a pod that stops running leaves this view.
        pods: Informer[SlimPod] = Informer(
            client,
            "/api/v1/pods",
            pod_projection(
                annotation_keys=[
                    keys.SIM_CPU_UTILIZATION_ANNOTATION,
                    keys.SIM_GPU_UTILIZATION_ANNOTATION,
                    keys.WORKLOAD_CLASS_ANNOTATION,
                ],
                gpu_count=pod_gpu_count,
            ),
            field_selector="status.phase=Running",
            indexers={"node": pods_by_node},
        )
        sim = Simulation(
            catalog,
            lambda node: pods.by_index("node", node),
            settle_s=settings.sim_power_settle,
            ambient_c=settings.sim_ambient_c,
            gpu_product_label_keys=settings.sim_gpu_product_label_keys,
        )
        nodes.add_handlers(
            Handlers(
                on_add=lambda n: sim.upsert_node(n, clock()),
                on_update=lambda _, n: sim.upsert_node(n, clock()),
                on_delete=lambda n: sim.remove_node(n.name),
            )
        )

        def pod_changed(pod: SlimPod) -> None:
            if pod.node_name:
                sim.pods_changed(pod.node_name, clock())

        def pod_moved(old: SlimPod, new: SlimPod) -> None:
            pod_changed(old)
            if new.node_name != old.node_name:
                pod_changed(new)

        pods.add_handlers(Handlers(on_add=pod_changed, on_update=pod_moved, on_delete=pod_changed))
        collector = SimulationCollector(sim, clock)
        self._registry.register(collector)
        runner = web.AppRunner(
            simulator_app(sim, clock, self._registry),
            access_log=None,
            keepalive_timeout=IDLE_CONNECTION_TIMEOUT_S,
        )
        await runner.setup()
        host, port = split_address(settings.sim_addr)
        site = web.TCPSite(runner, host or None, port)
        informers = InformerBundle(nodes, pods)
        tasks = informers.start(stopping)
        try:
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            synced = asyncio.ensure_future(informers.wait_synced())
            stop = asyncio.create_task(stopping.wait())
            await asyncio.wait([synced, stop], return_when=asyncio.FIRST_COMPLETED)
            if synced.done():
                self._ready = True
                log.info("serving", address=settings.sim_addr, nodes=len(sim.nodes))
            else:
                synced.cancel()
            await stop
        finally:
            self._ready = False
            await asyncio.gather(*tasks, return_exceptions=True)
            await runner.cleanup()
            self._registry.unregister(collector)
            await self._connection.close()


def build(settings: SimulatorSettings) -> SimulatorRole:
    return SimulatorRole(settings)
