"""Simulated hardware for KWOK nodes: each node's power state, advanced in simulated time.

No I/O here: the service feeds node and pod changes in and asks for telemetry at a time it
passes. A node's load changes only at the moments its pods change, and before each change the
node is advanced to that moment with the load it had, so energy is integrated piecewise exactly
and the same sequence of events gives the same numbers however fast the wall clock runs.

Each GPU board of a node has a stable ID (:func:`board_ids`) and is held by at most one pod:
a pod that starts takes free boards, keeps them while it runs, and frees them when it goes
(:func:`assign_boards`). The board a pod holds is the one whose power follows the pod's work and
whose cap it runs under, and the telemetry says which pod holds which boards, as the kubelet's
PodResources API says on a real node: the pool agent caps KWOK nodes' boards by the class of
their pods with the same code as the DaemonSet agent.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

import structlog

from joulie.api import keys
from joulie.api.quantity import QuantityError, parse_quantity
from joulie.api.telemetry import (
    ControlRequest,
    ControlResponse,
    EnergyCounters,
    HardwareSummary,
    PodDevices,
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

PodKey = tuple[str, str]
"""(namespace, name), as PodResources names a pod."""


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


def board_ids(node: str, count: int) -> tuple[str, ...]:
    """The IDs of a node's simulated GPU boards in board order, shaped as NVIDIA's
    (``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx``): a hash of the node's name and the board's
    index, so a board keeps its ID across restarts of the service and no two nodes share one."""
    ids = []
    for index in range(count):
        h = hashlib.blake2b(f"{node}/{index}".encode(), digest_size=16).hexdigest()
        ids.append(f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
    return tuple(ids)


def assign_boards(
    holders: Sequence[PodKey | None], wants: Sequence[tuple[PodKey, int]], count: int
) -> tuple[PodKey | None, ...]:
    """Which pod holds each of ``count`` boards once the running pods are ``wants`` (each pod
    and the boards it asks for), given who held them before: a pod keeps the boards it held (as
    many as it asks for), a board whose pod is gone is free again, and a pod short of boards
    takes the lowest free ones, in the order of ``wants``, while any are free. Never two pods on
    one board."""
    asked = {pod: gpus for pod, gpus in wants if gpus > 0}
    kept: list[PodKey | None] = [None] * count
    held: dict[PodKey, int] = {}
    for index, pod in enumerate(holders[:count]):
        if pod is not None and held.get(pod, 0) < asked.get(pod, 0):
            kept[index] = pod
            held[pod] = held.get(pod, 0) + 1
    free = (i for i in range(count) if kept[i] is None)
    for pod, gpus in wants:
        for _ in range(max(gpus - held.get(pod, 0), 0)):
            board = next(free, None)
            if board is None:
                return tuple(kept)
            kept[board] = pod
        held[pod] = max(gpus, held.get(pod, 0))
    return tuple(kept)


def boards_of(holders: Sequence[PodKey | None]) -> dict[PodKey, list[int]]:
    """Each pod's boards (indices, ascending)."""
    out: dict[PodKey, list[int]] = {}
    for index, pod in enumerate(holders):
        if pod is not None:
            out.setdefault(pod, []).append(index)
    return out


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
    board_ids: tuple[str, ...] = ()
    """Its GPU boards' IDs in board order."""
    holders: tuple[PodKey | None, ...] = ()
    """The pod holding each board (None: free)."""


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
        self.control_requests = 0
        """Control requests answered."""
        self.control_changes = 0
        """Control requests that changed a node's controls."""

    # --- changes -------------------------------------------------------------------------

    def upsert_node(self, node: SlimNode, t: float) -> None:
        spec, hardware = node_spec(node, self._catalog, self._gpu_product_label_keys)
        ids = board_ids(node.name, hardware.gpu_count)
        if ids:
            hardware = hardware.model_copy(update={"gpu_ids": list(ids)})
        current = self.nodes.get(node.name)
        if current is None:
            sim = SimNode(
                node.name, spec, hardware, _cores(node), Controls(), initial_state(spec, t), Load()
            )
            sim.rack = node.labels.get(keys.RACK_LABEL) or None
            sim.memory_bytes = _memory_bytes(node)
            sim.board_ids = ids
            self.nodes[node.name] = sim
            self._reload(sim, t)
            return
        self._advance(current, t)
        current.spec, current.hardware, current.cores = spec, hardware, _cores(node)
        current.board_ids = ids
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

    def _pods(self, name: str) -> list[SlimPod]:
        """The node's running pods in a fixed order (the informer's is a set's)."""
        return sorted(self._pods_of(name), key=lambda p: (p.namespace, p.name))

    def _reload(self, sim: SimNode, t: float) -> None:
        del t  # the node was advanced to t already; the new load applies from here on
        pods = self._pods(sim.name)
        loads = [pod_load(p) for p in pods]
        count = sim.hardware.gpu_count
        keyed = [((p.namespace, p.name), load) for p, load in zip(pods, loads, strict=True)]
        sim.holders = assign_boards(sim.holders, [(key, load.gpus) for key, load in keyed], count)
        util = {key: load.gpu_util for key, load in keyed}
        boards = tuple(util[h] if h is not None else 0.0 for h in sim.holders)
        sim.load = Load(
            cpu_util=min(math.fsum(load.cpu_cores for load in loads) / sim.cores, 1.0),
            gpu_util=math.fsum(boards) / count if count else 0.0,
            gpu_boards=boards,
        )
        sim.uses = self._uses(sim, pods, loads)

    def _uses(
        self, sim: SimNode, pods: Sequence[SlimPod], loads: Sequence[PodLoad]
    ) -> tuple[PodUse, ...]:
        held = boards_of(sim.holders)
        keys_ = [(p.namespace, p.name) for p in pods]
        works = [
            PodWork(0.0, load.cpu_cores, len(held.get(key, ())), load.gpu_util)
            for key, load in zip(keys_, loads, strict=True)
        ]
        # pod_power gives each pod the next boards in pod order: put each board's cap where
        # that order puts the board the pod truly holds.
        order = [i for key in keys_ for i in held.get(key, ())]
        order += [i for i, pod in enumerate(sim.holders) if pod is None]
        controls = _in_order(sim.controls, order, sim.hardware.gpu_count)
        drawn = pod_power(sim.spec, controls, works, sim.cores) if works else []
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
            controls=applied(sim.controls, sim.board_ids),
            hardware=sim.hardware,
            pod_devices=pod_devices(sim.holders, sim.board_ids),
        )

    def control(self, name: str, request: ControlRequest, t: float) -> ControlResponse:
        sim = self.get(name)
        self._advance(sim, t)
        before = sim.controls
        sim.controls, response = apply_control(name, sim.spec, sim.controls, request, sim.board_ids)
        self.control_requests += 1
        if sim.controls != before:
            self.control_changes += 1
        pods = self._pods(name)
        sim.uses = self._uses(sim, pods, [pod_load(p) for p in pods])
        return response


def pod_devices(holders: Sequence[PodKey | None], ids: Sequence[str]) -> list[PodDevices]:
    """Which boards each pod holds, by board ID, pods in name order."""
    held: Mapping[PodKey, list[int]] = boards_of(holders)
    return [
        PodDevices(namespace=pod[0], name=pod[1], devices=[ids[i] for i in held[pod]])
        for pod in sorted(held)
    ]


def _in_order(controls: Controls, order: Sequence[int], count: int) -> Controls:
    """``controls`` with the per-board caps rearranged: board ``order[k]``'s cap in place k."""
    caps = controls.gpu_board_caps_w
    if not caps:
        return controls
    padded = (*caps[:count], *(controls.gpu_cap_w,) * (count - len(caps)))
    return replace(controls, gpu_board_caps_w=tuple(padded[i] for i in order))
