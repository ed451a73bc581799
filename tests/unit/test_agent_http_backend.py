"""The agent's HTTP backend against the simulator's own HTTP service (real sockets, the real
contract): an eco spec lowers the simulated node's power, a spec's per-package CPU cap arrives
node-wide, a GPU cap on a node without GPUs is answered as unsupported, and every failure is one
clear error naming the URL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry

from joulie.agent.http_backend import BackendError, HttpBackend
from joulie.api.enums import ControlResult, CpuGovernorPreset, Profile
from joulie.api.nodetwin import CpuGovernorSpec, CpuSpec, GpuPowerCap, GpuSpec, NodeTwinSpec
from joulie.api.telemetry import ControlRequest, CpuControl
from joulie.core.enforcement import control_request
from joulie.hardware.catalog import Catalog
from joulie.sim.kwok_hardware import Simulation
from joulie.sim.service import simulator_app
from tests.unit.test_simulation import node, pod

pytestmark = pytest.mark.asyncio


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest_asyncio.fixture
async def served() -> AsyncIterator[tuple[HttpBackend, Clock]]:
    clock = Clock()
    busy = [pod("work", "gpu-0", 64_000, gpus=4), pod("calc", "cpu-0", 64_000)]
    sim = Simulation(
        Catalog.load(), lambda name: [p for p in busy if p.node_name == name], settle_s=0.1
    )
    sim.upsert_node(node("gpu-0", "AMD EPYC 9654", "NVIDIA H100 80GB HBM3", gpus=4), 0.0)
    sim.upsert_node(node("cpu-0", "AMD EPYC 9654"), 0.0)
    server = TestServer(simulator_app(sim, clock, CollectorRegistry()))
    await server.start_server()
    base = f"http://127.0.0.1:{server.port}"
    backend = HttpBackend(f"{base}/telemetry/{{node}}", f"{base}/control/{{node}}", timeout=5)
    try:
        yield backend, clock
    finally:
        await backend.close()
        await server.close()


def eco(**cpu: Any) -> NodeTwinSpec:
    return NodeTwinSpec(
        node_name="n",
        profile=Profile.ECO,
        cpu=CpuSpec(package_power_cap_pct_of_max=60, **cpu),
        gpu=GpuSpec(power_cap=GpuPowerCap(cap_pct_of_max=60)),
    )


async def test_an_eco_spec_lowers_the_simulated_power(
    served: tuple[HttpBackend, Clock],
) -> None:
    backend, clock = served
    clock.t = 10
    before = await backend.telemetry("gpu-0")
    request = control_request(eco(), before.hardware, governor_writes=False)
    answer = await backend.control("gpu-0", request)
    assert answer.cpu_cap is not None
    assert answer.cpu_cap.result is ControlResult.APPLIED
    assert answer.gpu_cap is not None
    assert answer.gpu_cap.result is ControlResult.APPLIED
    clock.t = 20
    after = await backend.telemetry("gpu-0")
    assert after.power.node_w < before.power.node_w
    assert after.controls.cpu_cap_watts == pytest.approx(0.6 * before.hardware.cpu_max_w)


async def test_per_package_watts_arrive_node_wide(served: tuple[HttpBackend, Clock]) -> None:
    backend, _ = served
    hardware = (await backend.telemetry("cpu-0")).hardware
    assert hardware.sockets == 2
    per_package = hardware.cpu_max_w / hardware.sockets / 2  # half of one package's maximum
    spec = eco(package_power_cap_watts=per_package)
    request = control_request(spec, hardware, governor_writes=False)
    assert request.cpu is not None
    assert request.cpu.cap_watts == pytest.approx(per_package * 2)  # watts win, x 2 sockets
    answer = await backend.control("cpu-0", request)
    assert answer.controls.cpu_cap_watts == pytest.approx(hardware.cpu_max_w / 2)


async def test_a_gpu_cap_on_a_cpu_node_is_unsupported(served: tuple[HttpBackend, Clock]) -> None:
    backend, _ = served
    hardware = (await backend.telemetry("cpu-0")).hardware
    answer = await backend.control("cpu-0", control_request(eco(), hardware, governor_writes=False))
    assert answer.gpu_cap is not None
    assert answer.gpu_cap.result is ControlResult.UNSUPPORTED


async def test_presets_only_with_governor_writes(served: tuple[HttpBackend, Clock]) -> None:
    backend, _ = served
    hardware = (await backend.telemetry("cpu-0")).hardware
    spec = eco(governor=CpuGovernorSpec(preset=CpuGovernorPreset.EFFICIENCY))
    off = control_request(spec, hardware, governor_writes=False)
    assert off.cpu is not None
    assert (off.cpu.preset, off.cpu.clear_preset) == (None, False)
    on = await backend.control("cpu-0", control_request(spec, hardware, governor_writes=True))
    assert on.controls.cpu_preset == "efficiency"
    # The preset leaves the spec: it is cleared, and the simulator reports it restored.
    cleared = await backend.control("cpu-0", control_request(eco(), hardware, governor_writes=True))
    assert cleared.cpu_governor is not None
    assert cleared.cpu_governor.result is ControlResult.RESTORED
    assert cleared.controls.cpu_preset is None


async def test_failures_are_one_clear_error(served: tuple[HttpBackend, Clock]) -> None:
    backend, _ = served
    with pytest.raises(BackendError, match=r"HTTP 404: unknown node 'nowhere'"):
        await backend.telemetry("nowhere")
    closed = HttpBackend("http://127.0.0.1:9/t/{node}", "http://127.0.0.1:9/c/{node}", timeout=2)
    try:
        with pytest.raises(BackendError, match=r"GET http://127\.0\.0\.1:9/t/n1"):
            await closed.telemetry("n1")
    finally:
        await closed.close()


async def test_an_answer_outside_the_contract_is_refused() -> None:
    async def wrong(_: web.Request) -> web.Response:
        return web.json_response({"node": "n1", "power": "lots"})

    app = web.Application()
    app.router.add_get("/telemetry/{node}", wrong)
    server = TestServer(app)
    await server.start_server()
    backend = HttpBackend(
        f"http://127.0.0.1:{server.port}/telemetry/{{node}}", "http://unused/{node}", timeout=5
    )
    try:
        with pytest.raises(BackendError, match="the answer is not a TelemetryReport"):
            await backend.telemetry("n1")
    finally:
        await backend.close()
        await server.close()


async def test_an_endless_or_deep_answer_is_refused_without_holding_it() -> None:
    # Answers were read whole: a backend streaming without end grew the agent's memory with it,
    # and an error body nested past Python's recursion limit raised RecursionError.
    async def endless(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        chunk = b" " * 65536
        for _ in range(10_000):  # 640 MiB if it were all read
            await response.write(chunk)
        return response

    async def deep(_: web.Request) -> web.Response:
        return web.Response(status=500, body=b"[" * 5000 + b"]" * 5000)

    app = web.Application()
    app.router.add_get("/telemetry/{node}", endless)
    app.router.add_post("/control/{node}", deep)
    server = TestServer(app)
    await server.start_server()
    base = f"http://127.0.0.1:{server.port}"
    backend = HttpBackend(f"{base}/telemetry/{{node}}", f"{base}/control/{{node}}", timeout=30)
    try:
        with pytest.raises(BackendError, match="the answer is more than the 1048576 bytes"):
            await backend.telemetry("n1")
        with pytest.raises(BackendError, match=r"HTTP 500: \[\[\["):
            await backend.control("n1", ControlRequest(cpu=CpuControl(clear_cap=True)))
    finally:
        await backend.close()
        await server.close()
