"""Simulated hardware for KWOK nodes: each node's power state, advanced in simulated time.

No I/O here: the service feeds node and pod changes in and asks for telemetry at a time it
passes. A node's load changes only at the moments its pods change, and before each change the
node is advanced to that moment with the load it had, so energy is integrated piecewise exactly
and the same sequence of events gives the same numbers however fast the wall clock runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

import structlog

from joulie.api import keys
from joulie.api.quantity import QuantityError, parse_quantity
from joulie.api.telemetry import (
    ControlRequest,
    ControlResponse,
    EnergyCounters,
    HardwareSummary,
    PowerReading,
    Speed,
    TelemetryReport,
    Utilisation,
)
from joulie.core.energy_accounting import NodeInterval, PodUse, account_key, attribute, pod_use
from joulie.core.energy_counterfactual import PodWork, pod_power
from joulie.core.enforcement import applied, apply_control
from joulie.core.power_model import (
    Controls,
    Load,
    NodePowerSpec,
    NodePowerState,
    advance,
    facility,
    initial_state,
    steady_state,
)
from joulie.hardware.catalog import Catalog
from joulie.hardware.power_spec import power_spec
from joulie.hardware.recognition import hardware_view
from joulie.kube.projections import SlimNode, SlimPod

log = structlog.get_logger("joulie.simulator")


def _memory_bytes(node: SlimNode) -> float:
    try:
        return max(float(parse_quantity(node.allocatable.get("memory", "0"))), 0.0)
    except QuantityError:
        return 0.0


def _cores(node: SlimNode) -> float:
    try:
        return max(float(parse_quantity(node.allocatable.get("cpu", "1"))), 1.0)
    except QuantityError:
        return 1.0


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
    return power_spec(view, catalog)


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
    memory_bytes: float = 0.0
    uses: tuple[PodUse, ...] = ()
    """The running pods' uses of the node, with the power each truly draws above idle: the
    ground truth of who used its energy (see :meth:`Simulation.workload_energy`)."""


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
        self.workload_energy: dict[str, float] = {}
        """Joules per "<namespace>/<class>": each node's simulated energy split between its
        running pods by ``core.energy_accounting`` with the power each truly draws (what the
        manager's accounts, which see only node power and estimate the pods' shares, are
        checked against)."""
        self.overhead_energy = 0.0
        """Joules no pod drew: idle capacity nobody asked for."""

    # --- changes -------------------------------------------------------------------------

    def upsert_node(self, node: SlimNode, t: float) -> None:
        spec, hardware = node_spec(node, self._catalog, self._gpu_product_label_keys)
        current = self.nodes.get(node.name)
        if current is None:
            sim = SimNode(
                node.name, spec, hardware, _cores(node), Controls(), initial_state(spec, t), Load()
            )
            sim.rack = node.labels.get(keys.RACK_LABEL) or None
            sim.memory_bytes = _memory_bytes(node)
            self.nodes[node.name] = sim
            self._reload(sim, t)
            return
        self._advance(current, t)
        current.spec, current.hardware, current.cores = spec, hardware, _cores(node)
        current.rack = node.labels.get(keys.RACK_LABEL) or None
        current.memory_bytes = _memory_bytes(node)
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
        pods = list(self._pods_of(sim.name))
        loads = [pod_load(p) for p in pods]
        sim.load = load_of(loads, sim.cores, sim.hardware.gpu_count)
        sim.uses = self._uses(sim, pods, loads)

    def _uses(
        self, sim: SimNode, pods: Sequence[SlimPod], loads: Sequence[PodLoad]
    ) -> tuple[PodUse, ...]:
        works = [PodWork(0.0, load.cpu_cores, load.gpus, load.gpu_util) for load in loads]
        drawn = pod_power(sim.spec, sim.controls, works, sim.cores) if works else []
        offered = (sim.cores * 1000, sim.memory_bytes, sim.hardware.gpu_count)
        return tuple(
            pod_use(
                account_key(pod.namespace, pod.annotations.get(keys.WORKLOAD_CLASS_ANNOTATION)),
                (pod.cpu_millis, pod.memory_bytes, pod.gpus),
                offered,
                watts,
            )
            for pod, (watts, _) in zip(pods, drawn, strict=True)
        )

    def _advance(self, sim: SimNode, t: float) -> None:
        before = sim.state
        sim.state = advance(sim.spec, before, sim.load, sim.controls, t, self._settle_s)
        energy = sim.state.energy_j - before.energy_j
        seconds = sim.state.t - before.t
        if energy <= 0.0 or seconds <= 0.0:
            return
        if not sim.uses:
            self.overhead_energy += energy
            return
        idle_w = steady_state(sim.spec, Load(), sim.controls).node_w
        split = attribute(
            NodeInterval(energy, seconds, idle_w, sim.hardware.gpu_count > 0), sim.uses
        )
        for account, joules in split.used_j.items():
            self.workload_energy[account] = self.workload_energy.get(account, 0.0) + joules
        self.overhead_energy += split.overhead_j

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
        sim.uses = self._uses(
            sim, list(self._pods_of(name)), [pod_load(p) for p in self._pods_of(name)]
        )
        return response
