"""Simulated hardware for KWOK nodes: each node's power state, advanced in simulated time.

No I/O here: the service feeds node and pod changes in and asks for telemetry at a time it
passes. A node's load changes only at the moments its pods change, and before each change the
node is advanced to that moment with the load it had, so energy is integrated piecewise exactly
and the same sequence of events gives the same numbers however fast the wall clock runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

import structlog

from joulie.api import keys
from joulie.api.enums import ControlResult
from joulie.api.quantity import QuantityError, parse_quantity
from joulie.api.telemetry import (
    AppliedControls,
    ControlRequest,
    ControlResponse,
    EnergyCounters,
    HardwareSummary,
    Outcome,
    PowerReading,
    Speed,
    TelemetryReport,
    Utilisation,
)
from joulie.core.power_model import (
    Controls,
    CpuPowerSpec,
    GpuPowerSpec,
    Load,
    NodePowerSpec,
    NodePowerState,
    Throughput,
    advance,
    facility,
    initial_state,
    steady_state,
)
from joulie.hardware.catalog import Catalog, GpuSpec
from joulie.hardware.recognition import hardware_view
from joulie.kube.projections import SlimNode, SlimPod

log = structlog.get_logger("joulie.simulator")

# Nodes whose CPU or GPU the catalog does not know get generic parts, so they still draw
# plausible power instead of none (which would make them look like the emptiest nodes); they do
# work at the reference parts' speed.
GENERIC_CPU_IDLE_W = 50.0
GENERIC_CPU_MAX_W = 250.0
GENERIC_GPU = (30.0, 300.0, 100.0)  # idle, max, min cap (W per GPU); the default cap law
# Package caps below half of TDP are rarely accepted by firmware; use that as the floor.
CPU_MIN_CAP_FRACTION = 0.5
PACKAGE_IDLE_SHARE_OF_TDP = 0.1
"""Package power of an idle socket as a share of its TDP (a modelling assumption: deep C-states
leave the uncore and I/O die powered); the rest of a socket's measured idle is platform power
(memory, fans, power-supply losses), which no package cap touches."""

REFERENCE_GPU_TFLOPS = 312.0
REFERENCE_GPU_MEMORY_GBS = 2039.0
"""The reference board a workload's run time is given on: NVIDIA A100 SXM4 80GB (dense
FP16/BF16 tensor TFLOPS and memory bandwidth, NVIDIA A100 datasheet). Another board does
compute-bound work at the ratio of its dense tensor TFLOPS and memory-bound work at the ratio of
its memory bandwidth: peak ratios, an assumption that overstates the gap between generations
somewhat (real kernels reach a smaller share of a faster part's peak)."""
REFERENCE_CPU_GHZ = 3.0
"""The reference core: one running at 3.0 GHz with every core busy (a modelling assumption, a
typical all-core clock of current server parts). Another core does CPU-bound work at the ratio
of its all-core clock; IPC differences between generations are not modelled."""


def _cores(node: SlimNode) -> float:
    try:
        return max(float(parse_quantity(node.allocatable.get("cpu", "1"))), 1.0)
    except QuantityError:
        return 1.0


def _cpu_part(
    sockets: int,
    tdp_w: float,
    idle_w: float,
    curve: tuple[tuple[float, float], ...] = (),
    **clocks: float,
) -> CpuPowerSpec:
    """A socket's power spec from its TDP, its measured idle (wall share) and curve: the package
    idles at PACKAGE_IDLE_SHARE_OF_TDP x TDP, the rest of idle is platform power, and the package
    cap range reaches the uncapped package draw at full load (at least TDP)."""
    platform = max(0.0, idle_w - PACKAGE_IDLE_SHARE_OF_TDP * tdp_w)
    top = curve[-1][1] if curve else tdp_w + platform
    peak = max(tdp_w, top - platform)
    return CpuPowerSpec(
        sockets=sockets,
        idle_w=idle_w,
        max_w=peak,
        min_cap_w=peak * CPU_MIN_CAP_FRACTION,
        curve=curve,
        platform_w=platform,
        **clocks,
    )


def gpu_power_spec(g: GpuSpec, count: int) -> GpuPowerSpec:
    """The power model of ``count`` boards of a catalog GPU model (ValueError where the power
    model refuses the entry)."""
    return GpuPowerSpec(
        count=count,
        idle_w=g.idle_w,
        max_w=g.max_w,
        min_cap_w=g.min_w,
        knee_w=g.cap_knee_w,
        floor_w=g.cap_floor_w,
        cap_exponent=g.cap_exponent,
    )


def node_spec(
    node: SlimNode,
    catalog: Catalog,
    gpu_product_label_keys: Iterable[str] = keys.DEFAULT_GPU_PRODUCT_LABEL_KEYS,
) -> tuple[NodePowerSpec, HardwareSummary]:
    """The power spec of a node from its hardware labels and annotations, recognised exactly as
    the controller manager recognises a node without NodeHardware."""
    view = hardware_view(
        None, node.labels, node.annotations, node.allocatable, catalog, gpu_product_label_keys
    )
    sockets = view.sockets or 1
    cpu_key = view.cpu_model if view.cpu_model in catalog.cpus else None
    cpu: CpuPowerSpec | None = None
    cpu_speed = 1.0
    if cpu_key is not None:
        c = catalog.cpu(cpu_key)
        try:
            cpu = _cpu_part(
                sockets,
                c.tdp_w,
                c.idle_w,
                c.curve,
                nominal_ghz=c.base_ghz,
                boost_ghz=c.boost_ghz,
                all_core_ghz=c.all_core_ghz,
            )
            cpu_speed = c.all_core_ghz / REFERENCE_CPU_GHZ
        except ValueError as exc:
            _unusable(cpu_key, exc)
    if cpu is None:
        cpu = _cpu_part(sockets, GENERIC_CPU_MAX_W, GENERIC_CPU_IDLE_W)
    gpu_count = view.gpu_count
    gpu: GpuPowerSpec | None = None
    compute = memory = 1.0
    if gpu_count > 0:
        gpu_key = view.gpu_model if view.gpu_model in catalog.gpus else None
        if gpu_key is not None:
            g = catalog.gpu(gpu_key)
            try:
                gpu = gpu_power_spec(g, gpu_count)
                compute = g.dense_tensor_tflops / REFERENCE_GPU_TFLOPS
                memory = g.memory_bandwidth_gbs / REFERENCE_GPU_MEMORY_GBS
            except ValueError as exc:
                _unusable(gpu_key, exc)
        if gpu is None:
            idle, peak, floor = GENERIC_GPU
            gpu = GpuPowerSpec(count=gpu_count, idle_w=idle, max_w=peak, min_cap_w=floor)
    summary = HardwareSummary(
        cpu_model=view.cpu_model,
        sockets=sockets,
        gpu_model=view.gpu_model,
        gpu_count=gpu_count,
        cpu_max_w=cpu.max_w * sockets,
        gpu_max_w_per_gpu=gpu.max_w if gpu else 0.0,
    )
    throughput = Throughput(cpu=cpu_speed, gpu_compute=compute, gpu_memory=memory)
    return NodePowerSpec(cpu=cpu, gpu=gpu, throughput=throughput), summary


_reported: set[str] = set()


def _unusable(model: str, exc: ValueError) -> None:
    """A catalog entry the power model rejects (a hand-made catalog file): say so once, and
    simulate generic parts instead of failing the node."""
    if model not in _reported:
        _reported.add(model)
        log.warning("catalog entry unusable, simulating generic parts", model=model, error=str(exc))


def _fraction(pod: SlimPod, key: str) -> float:
    try:
        value = float(pod.annotations.get(key, "1"))
    except ValueError:
        return 1.0
    return min(max(value, 0.0), 1.0) if value == value else 1.0


@dataclass(frozen=True, slots=True)
class PodLoad:
    """What one running pod asks of its node's parts, read once from its utilisation
    annotations (a node's load is summed from these at every change of its pods)."""

    cpu_cores: float
    """Cores kept busy: the CPU request x the CPU utilisation."""
    gpus: int
    gpu_util: float


def pod_load(pod: SlimPod) -> PodLoad:
    return PodLoad(
        pod.cpu_millis / 1000 * _fraction(pod, keys.SIM_CPU_UTILIZATION_ANNOTATION),
        pod.gpus,
        _fraction(pod, keys.SIM_GPU_UTILIZATION_ANNOTATION) if pod.gpus else 0.0,
    )


def load_of(pods: Iterable[PodLoad], cores: float, gpu_count: int) -> Load:
    """Demanded utilisation from what the running pods bound to a node ask. Each pod's GPUs are
    whole boards of their own, taken in the order the pods come, busy at the pod's GPU
    utilisation."""
    cpu = 0.0
    boards: list[float] = []
    for pod in pods:
        cpu += pod.cpu_cores
        if pod.gpus and len(boards) < gpu_count:
            boards.extend([pod.gpu_util] * min(pod.gpus, gpu_count - len(boards)))
    return Load(
        cpu_util=min(cpu / cores, 1.0),
        gpu_util=math.fsum(boards) / gpu_count if gpu_count else 0.0,
        gpu_boards=tuple(boards),
    )


def node_load(pods: Iterable[SlimPod], cores: float, gpu_count: int) -> Load:
    """:func:`load_of` the running pods bound to a node."""
    return load_of(map(pod_load, pods), cores, gpu_count)


@dataclass
class SimNode:
    name: str
    spec: NodePowerSpec
    hardware: HardwareSummary
    cores: float
    controls: Controls
    state: NodePowerState
    load: Load
    rack: str | None = None
    """The node's joulie.io/rack label: the simulator reports power per rack."""


class UnknownNode(KeyError):
    pass


class Simulation:
    def __init__(
        self,
        catalog: Catalog,
        pods_of: Callable[[str], Iterable[SlimPod]],
        settle_s: float = 2.0,
        ambient_c: float = 22.0,
        gpu_product_label_keys: Sequence[str] = keys.DEFAULT_GPU_PRODUCT_LABEL_KEYS,
    ) -> None:
        self._catalog = catalog
        self._gpu_product_label_keys = tuple(gpu_product_label_keys)
        self._pods_of = pods_of
        self._settle_s = settle_s
        self.ambient_c = ambient_c
        self.nodes: dict[str, SimNode] = {}
        self.peak_it_power_w = 0.0

    # --- changes -------------------------------------------------------------------------

    def upsert_node(self, node: SlimNode, t: float) -> None:
        spec, hardware = node_spec(node, self._catalog, self._gpu_product_label_keys)
        current = self.nodes.get(node.name)
        if current is None:
            sim = SimNode(
                node.name, spec, hardware, _cores(node), Controls(), initial_state(spec, t), Load()
            )
            sim.rack = node.labels.get(keys.RACK_LABEL) or None
            self.nodes[node.name] = sim
            self._reload(sim, t)
            return
        self._advance(current, t)
        current.spec, current.hardware, current.cores = spec, hardware, _cores(node)
        current.rack = node.labels.get(keys.RACK_LABEL) or None
        self._reload(current, t)

    def remove_node(self, name: str) -> None:
        self.nodes.pop(name, None)

    def pods_changed(self, node_name: str, t: float) -> None:
        """A pod on ``node_name`` started, stopped or changed: the load changes from ``t``."""
        sim = self.nodes.get(node_name)
        if sim is not None:
            self._advance(sim, t)
            self._reload(sim, t)

    def _reload(self, sim: SimNode, t: float) -> None:
        del t  # the node was advanced to t already; the new load applies from here on
        sim.load = node_load(self._pods_of(sim.name), sim.cores, sim.hardware.gpu_count)

    def _advance(self, sim: SimNode, t: float) -> None:
        sim.state = advance(sim.spec, sim.state, sim.load, sim.controls, t, self._settle_s)

    def advance_all(self, t: float) -> float:
        """Advance every node to ``t``; returns the cluster IT power."""
        total = 0.0
        for sim in self.nodes.values():
            self._advance(sim, t)
            total += sim.state.node_w
        self.peak_it_power_w = max(self.peak_it_power_w, total)
        return total

    def facility(self, it_power_w: float) -> tuple[float, float]:
        return facility(self.ambient_c, it_power_w, max(self.peak_it_power_w, it_power_w))

    # --- requests ------------------------------------------------------------------------

    def get(self, name: str) -> SimNode:
        try:
            return self.nodes[name]
        except KeyError:
            raise UnknownNode(name) from None

    def report(self, name: str, t: float, now: datetime) -> TelemetryReport:
        sim = self.get(name)
        self._advance(sim, t)
        state = sim.state
        gpu_count = sim.hardware.gpu_count
        steady = steady_state(sim.spec, sim.load, sim.controls)
        gpu_total = state.gpu_w_per_gpu * gpu_count
        return TelemetryReport(
            node=name,
            timestamp=now,
            sim_time_s=max(t, 0.0),
            power=PowerReading(
                node_w=state.cpu_w + gpu_total,
                # The platform share of the sockets' power (memory, fans) is no package power.
                cpu_package_w=state.cpu_w - sim.spec.cpu.platform_w * sim.spec.cpu.sockets,
                gpu_total_w=gpu_total,
                gpu_per_gpu_w=state.gpu_w_per_gpu,
            ),
            energy=EnergyCounters(
                node_joules=state.cpu_energy_j + state.gpu_energy_j,
                cpu_joules=state.cpu_energy_j,
                gpu_joules=state.gpu_energy_j,
            ),
            utilization=Utilisation(cpu=sim.load.cpu_util, gpu=sim.load.gpu_util),
            speed=Speed(cpu=steady.cpu_speed, gpu=steady.gpu_speed),
            controls=applied(sim.controls),
            hardware=sim.hardware,
        )

    def control(self, name: str, request: ControlRequest, t: float) -> ControlResponse:
        sim = self.get(name)
        self._advance(sim, t)
        sim.controls, response = apply_control(name, sim.spec, sim.controls, request)
        return response


def apply_control(
    name: str, spec: NodePowerSpec, controls: Controls, request: ControlRequest
) -> tuple[Controls, ControlResponse]:
    """The controls of a node after ``request``, and the answer to it: caps clamped into the
    device range as the hardware would, presets set or cleared, GPU requests on a node without
    GPUs answered unsupported. The KWOK service and the standalone engine both apply control
    through here."""
    response = ControlResponse(node=name, controls=applied(controls))
    cpu_max = spec.cpu.max_w * spec.cpu.sockets
    cpu_min = spec.cpu.min_cap_w * spec.cpu.sockets
    if request.cpu is not None:
        c = request.cpu
        watts = c.cap_watts
        if watts is None and c.cap_pct_of_max is not None:
            watts = cpu_max * c.cap_pct_of_max / 100
        if c.clear_cap:
            controls = replace(controls, cpu_cap_w=None)
            response.cpu_cap = Outcome(result=ControlResult.APPLIED, message="cap removed")
        elif watts is not None:
            capped = min(max(watts, cpu_min), cpu_max)
            controls = replace(controls, cpu_cap_w=capped)
            response.cpu_cap = Outcome(
                result=ControlResult.APPLIED,
                message=_clamp_note(watts, capped, "CPU package cap"),
            )
        if c.clear_preset:
            controls = replace(controls, cpu_preset=None)
            response.cpu_governor = Outcome(result=ControlResult.RESTORED)
        elif c.preset is not None:
            controls = replace(controls, cpu_preset=c.preset.value)
            response.cpu_governor = Outcome(
                result=ControlResult.APPLIED, message=f"preset {c.preset.value}"
            )
    if request.gpu is not None:
        gpu = spec.gpu
        g = request.gpu
        if gpu is None:
            note = "this node has no GPU"
            if g.clear_cap or g.cap_watts_per_gpu is not None or g.cap_pct_of_max is not None:
                response.gpu_cap = Outcome(result=ControlResult.UNSUPPORTED, message=note)
            if g.clear_preset or g.preset is not None:
                response.gpu_governor = Outcome(result=ControlResult.UNSUPPORTED, message=note)
        else:
            watts = g.cap_watts_per_gpu
            if watts is None and g.cap_pct_of_max is not None:
                watts = gpu.max_w * g.cap_pct_of_max / 100
            if g.clear_cap:
                controls = replace(controls, gpu_cap_w=None)
                response.gpu_cap = Outcome(result=ControlResult.APPLIED, message="cap removed")
            elif watts is not None:
                capped = min(max(watts, gpu.min_cap_w), gpu.max_w)
                controls = replace(controls, gpu_cap_w=capped)
                response.gpu_cap = Outcome(
                    result=ControlResult.APPLIED, message=_clamp_note(watts, capped, "GPU cap")
                )
            if g.clear_preset:
                controls = replace(controls, gpu_preset=None, gpu_clock_ceiling_pct=None)
                response.gpu_governor = Outcome(result=ControlResult.RESTORED)
            elif g.preset is not None:
                controls = replace(
                    controls,
                    gpu_preset=g.preset.value,
                    gpu_clock_ceiling_pct=g.clock_ceiling_pct_of_max,
                )
                response.gpu_governor = Outcome(
                    result=ControlResult.APPLIED, message=f"preset {g.preset.value}"
                )
    response.controls = applied(controls)
    return controls, response


def applied(controls: Controls) -> AppliedControls:
    return AppliedControls(
        cpu_cap_watts=controls.cpu_cap_w,
        cpu_preset=controls.cpu_preset,
        gpu_cap_watts_per_gpu=controls.gpu_cap_w,
        gpu_preset=controls.gpu_preset,
        gpu_clock_ceiling_pct_of_max=controls.gpu_clock_ceiling_pct,
    )


def _clamp_note(asked: float, got: float, what: str) -> str:
    if abs(asked - got) < 1e-9:
        return f"{what} {got:.0f} W"
    return f"{what} {asked:.0f} W clamped to the device range: {got:.0f} W"
