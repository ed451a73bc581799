"""The standalone engine's cluster in virtual time: what runs where, what each node draws, how
fast each workload progresses, and the energy used.

Power is piecewise constant: a node's draw changes only when its pods or its controls change,
and then it jumps to the power model's steady state (control and telemetry lags are seconds, the
engine's events minutes apart). So energy is integrated exactly, as sums of power x time, and a
run's figures depend only on the sequence of events, never on the host. A node the lifecycle
powered off draws nothing until it is powered on again. Each node's energy is also split
between the workloads running on it (``joulie.sim.workload_energy``), told before anything
that sets its draw changes.

A workload's speed is that of its slowest pod (a gang runs in lock step); a pod's speed follows
from the clocks of its node as the power model solves them under the node's caps and presets:
the share of its run time bound by the CPU clock stretches by 1 / cpu speed, the GPU share by
1 / gpu speed, and the rest not at all. Nothing ever runs faster than at full clocks.

On a node whose spec caps each GPU by the class of its pod (``class_caps``), each pod's boards
carry the cap of its own class and the boards no pod holds the idle one, as
``core.caps.board_caps`` decides (:class:`BoardRule`); its boards' clocks, and so its speed,
follow its own class's cap whatever the node's other pods are.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from joulie.api.enums import WorkloadClass
from joulie.api.nodetwin import NodeTwinSpec
from joulie.core.caps import board_caps
from joulie.core.pod_power import PodDemand
from joulie.core.power_model import (
    Controls,
    GpuPowerSpec,
    NodePowerSpec,
    Steady,
    board_steady,
    facility,
    steady_state,
    work_speed,
)
from joulie.kube.projections import SlimPod
from joulie.sim.fleet import Fleet
from joulie.sim.kwok_hardware import PodLoad, load_of, node_load, pod_load
from joulie.sim.pods import slim_pod
from joulie.sim.trace import Workload
from joulie.sim.workload_energy import WorkloadLedger

__all__ = ["BoardRule", "Cluster", "Job"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(slots=True, eq=False)
class Job:
    """A workload's life in the run."""

    index: int
    workload: Workload
    demand: PodDemand
    """What the extender's power estimate reads of one of its pods."""
    manifest: dict[str, object]
    nodes: list[int] = field(default_factory=list)
    """Node of each running pod (empty while pending)."""
    remaining_s: float = 0.0
    """Work left, in seconds at full speed on the reference parts, as of ``since``."""
    ideal_s: float = 0.0
    """How long the latest start would take on its nodes' parts with nothing controlled (what
    slowdown and stretch are measured against)."""
    speed: float = 0.0
    since: float = 0.0
    version: int = 0
    """Bumped whenever the finish time changes, so stale completion events are skipped."""
    started_at: float | None = None
    """The latest start (a preempted workload starts over)."""
    finished_at: float | None = None
    preempted: int = 0
    room_bound: int | None = None
    """A gang that did not fit: at most how many of its pods the cluster could hold then
    (placement's cheap test before trying again)."""
    preempts: bool = True
    """False: it waits for room rather than preempt (preemptionPolicy Never)."""
    load: PodLoad | None = None
    """What one of its pods asks of a node's parts (read from the pod once, at its first
    start: every pod of a workload asks the same)."""

    @property
    def running(self) -> bool:
        return bool(self.nodes)


_PERFORMANCE = WorkloadClass.PERFORMANCE.value
_STANDARD = WorkloadClass.STANDARD.value


class BoardRule:
    """A node spec's caps by the class of each board's pod (``spec.gpu.classCaps``) on boards of
    one range: each board's cap decided by ``core.caps.board_caps`` (the node agent's decision
    too), once per pattern of classes; and the node's controls with a class's cap in place of
    the node-level one (what the clocks of a pod of that class follow). Compared by identity:
    the control loop keeps one per spec and controls."""

    __slots__ = ("_caps", "_range", "_spec", "performance", "standard")

    def __init__(self, spec: NodeTwinSpec, gpu: GpuPowerSpec, controls: Controls) -> None:
        self._spec = spec
        self._range = (gpu.max_w, gpu.min_cap_w)
        self._caps: dict[tuple[str | None, ...], tuple[float | None, ...]] = {}
        performance, standard = self.caps((_PERFORMANCE, _STANDARD))
        self.performance = replace(controls, gpu_cap_w=performance)
        self.standard = replace(controls, gpu_cap_w=standard)

    def caps(self, classes: tuple[str | None, ...]) -> tuple[float | None, ...]:
        """Each board's cap in watts (None: uncapped), given the class of the pod on each
        (None: no pod)."""
        found = self._caps.get(classes)
        if found is None:
            resolved = board_caps(
                self._spec,
                classes,
                gpu_max_watts_per_gpu=self._range[0],
                gpu_min_watts_per_gpu=self._range[1],
            )
            found = self._caps[classes] = tuple(None if c is None else c.watts for c in resolved)
        return found

    def controls_for(self, workload: Workload) -> Controls:
        return self.performance if workload.performance else self.standard


UNCONTROLLED = Steady(0.0, 0.0, 1.0, 1.0)
"""Clocks of a node nothing slows (the power figures are not read)."""


def pod_speed(
    workload: Workload, power: NodePowerSpec, steady: Steady, controls: Controls
) -> float:
    """How fast one pod of ``workload`` runs on a node of ``power`` at ``steady`` under
    ``controls`` (1.0: as fast as uncontrolled on the reference parts). Its GPUs are boards of
    its own, so their clocks follow the cap as the pod's own work meets it, whatever the node's
    other boards do."""
    on_gpu = bool(workload.gpus) and power.gpu is not None
    gpu_speed = 1.0
    if on_gpu and workload.gpu_sensitivity:
        assert power.gpu is not None
        gpu_speed = board_steady(power.gpu, workload.gpu_util, controls)[1]
    gpu_share = workload.gpu_sensitivity if workload.gpus else 0.0
    return work_speed(
        steady.cpu_speed,
        gpu_speed,
        workload.cpu_sensitivity,
        gpu_share,
        power.throughput,
        on_gpu=on_gpu,
        memory_bound=workload.memory_bound,
    )


class Cluster:
    def __init__(self, fleet: Fleet, ambient_c: float, priorities: Sequence[int] = (0,)) -> None:
        """``priorities``: every priority a workload of the run may have."""
        n = len(fleet)
        self.levels = {p: i for i, p in enumerate(sorted(set(priorities)))}
        """Priority -> row of the per-priority usage below."""
        shape = (len(self.levels), n)
        self.level_cpu = np.zeros(shape, dtype=np.int64)
        self.level_memory = np.zeros(shape, dtype=np.int64)
        self.level_gpus = np.zeros(shape, dtype=np.int64)
        """What the running pods of each priority hold on each node (what preemption could
        free for a higher priority)."""
        self.fleet = fleet
        self.ambient_c = ambient_c
        self.free_cpu = fleet.cpu_millis.copy()
        self.free_memory = fleet.memory_bytes.copy()
        self.free_gpus = fleet.gpus.copy()
        """What each node has left for another pod (allocatable less the running pods'
        requests): what every fit test reads, kept as it changes rather than subtracted at
        each test."""
        self.used_cpu = np.zeros(n, dtype=np.int64)
        self.used_memory = np.zeros(n, dtype=np.int64)
        """What the running pods request on each node (what the scores read)."""
        self.pods_on: list[dict[int, list[SlimPod]]] = [{} for _ in range(n)]
        """Per node: job index -> its pods there."""
        self.performance_pods = np.zeros(n, dtype=np.int64)
        """Running performance pods per node (the downgrade guard's count)."""
        self.pod_count = np.zeros(n, dtype=np.int64)
        """Running pods per node."""
        self.off: set[int] = set()
        """Nodes powered off by the lifecycle: they draw nothing."""
        self.controls: list[Controls] = [Controls()] * n
        self.board_rules: list[BoardRule | None] = [None] * n
        """Per node, its per-board caps by class (None: every board takes ``controls``)."""
        self._with_board_caps: dict[tuple[Controls, tuple[float | None, ...]], Controls] = {}
        """(node controls, per-board caps) -> the controls with them: a few dozen pairs a run,
        built once rather than at each change of a node's pods."""
        self.steady: list[Steady] = []
        self.node_w = np.zeros(n)
        self.node_energy_j = np.zeros(n)
        self._node_since = np.zeros(n)
        for i in range(n):
            model = fleet.model(i)
            self.steady.append(steady_state(model.power, node_load((), 1.0, 0), Controls()))
            self.node_w[i] = self.steady[i].node_w
        self.it_w = float(self.node_w.sum())
        self.peak_it_w = self.it_w
        self.clock = 0.0
        self.it_energy_j = 0.0
        self.facility_energy_j = 0.0
        self.pue = facility(ambient_c, self.it_w, self.peak_it_w)[0]
        self.completions: list[tuple[float, int, int]] = []
        """Heap of (finish time, job index, job version)."""
        self.power_changed: set[int] = set()
        """Nodes whose draw changed since the control loop last looked."""
        self.pods_changed: set[int] = set()
        """Nodes whose pods changed since the control loop last looked."""
        self.ledger = WorkloadLedger(self)
        """Each node's energy per workload: told before a node's pods, controls or draw
        change."""

    # --- time ---------------------------------------------------------------------------

    def advance(self, t: float) -> None:
        """Integrate the cluster's IT and facility energy up to ``t`` (power held since the
        last change)."""
        dt = t - self.clock
        if dt <= 0.0:
            return
        self.it_energy_j += self.it_w * dt
        self.facility_energy_j += self.it_w * self.pue * dt
        self.clock = t

    def _set_it_w(self, watts: float) -> None:
        self.it_w = watts
        self.peak_it_w = max(self.peak_it_w, watts)
        self.pue = facility(self.ambient_c, watts, self.peak_it_w)[0]

    def set_ambient(self, ambient_c: float) -> None:
        self.ambient_c = ambient_c
        self.pue = facility(ambient_c, self.it_w, self.peak_it_w)[0]

    def close(self, t: float) -> None:
        """Account every node's energy up to ``t`` (the end of the run)."""
        self.advance(t)
        self.ledger.book_all(t)
        self.node_energy_j += self.node_w * (t - self._node_since)
        self._node_since[:] = t

    # --- nodes --------------------------------------------------------------------------

    def _refresh(self, node: int, t: float, gpu_controls_changed: bool = False) -> None:
        """Recompute the node's steady state after its pods or controls changed at ``t``, and
        the speed of every workload running there if its clocks moved."""
        model = self.fleet.model(node)
        load = load_of(self._pod_loads(node), model.cpu_millis / 1000.0, model.gpus)
        controls = self.controls[node]
        rule = self.board_rules[node]
        if rule is not None:
            caps = self._board_caps(node, rule, model.gpus)
            key = (controls, caps)
            with_caps = self._with_board_caps.get(key)
            if with_caps is None:
                with_caps = self._with_board_caps[key] = replace(controls, gpu_board_caps_w=caps)
            controls = with_caps
        steady = steady_state(model.power, load, controls)
        before = self.steady[node]
        self.steady[node] = steady
        self._draw(node, 0.0 if node in self.off else steady.node_w, t)
        if steady.cpu_speed != before.cpu_speed or gpu_controls_changed:
            # Only a change of clocks moves the finish of the work already running here (an
            # uncapped node's never do: busy CPU nodes host dozens of pods). A board's clock
            # follows its own pod's work and the controls alone, so other pods coming and going
            # never move it.
            for index in self.pods_on[node]:
                self._retime(self._jobs[index], t)

    def _pod_loads(self, node: int) -> list[PodLoad]:
        """What each pod running on the node asks, in the order the pods came."""
        loads: list[PodLoad] = []
        for index, group in self.pods_on[node].items():
            load = self._jobs[index].load
            assert load is not None  # read when its pods started
            loads.extend([load] * len(group))
        return loads

    def _board_caps(self, node: int, rule: BoardRule, gpu_count: int) -> tuple[float | None, ...]:
        """Each board's cap, the boards given to the pods in the order ``load_of`` gives them."""
        classes: list[str | None] = []
        for index, group in self.pods_on[node].items():
            workload = self._jobs[index].workload
            gpus = workload.gpus if workload.gpu_resource else 0
            if gpus:
                held = min(gpus * len(group), gpu_count - len(classes))
                classes += [_PERFORMANCE if workload.performance else _STANDARD] * held
        return rule.caps((*classes, *(None,) * (gpu_count - len(classes))))

    def _draw(self, node: int, watts: float, t: float) -> None:
        old = float(self.node_w[node])
        if watts != old:
            self.node_energy_j[node] += old * (t - self._node_since[node])
            self._node_since[node] = t
            self.node_w[node] = watts
            self._set_it_w(self.it_w + watts - old)
            self.power_changed.add(node)

    def power(self, node: int, on: bool, t: float) -> None:
        """Power an idle node off (it draws nothing) or on (its idle draw, while it boots)."""
        self.ledger.book(node, t)
        if on:
            self.off.discard(node)
        else:
            self.off.add(node)
        self._draw(node, self.steady[node].node_w if on else 0.0, t)

    def set_controls(self, node: int, controls: Controls, t: float) -> None:
        if controls != self.controls[node]:
            self.ledger.book(node, t)
            before = self.controls[node]
            self.controls[node] = controls
            # A CPU control moves the work only through the CPU speed, which the refresh
            # compares; a GPU control moves the boards' clocks, which no node figure shows.
            gpu_moved = (before.gpu_cap_w, before.gpu_preset, before.gpu_clock_ceiling_pct) != (
                controls.gpu_cap_w,
                controls.gpu_preset,
                controls.gpu_clock_ceiling_pct,
            )
            self._refresh(node, t, gpu_controls_changed=gpu_moved)

    def set_board_rule(self, node: int, rule: BoardRule | None, t: float) -> None:
        """Cap the node's boards by the class of each board's pod (None: by ``controls``)."""
        if rule is not self.board_rules[node]:
            self.ledger.book(node, t)
            self.board_rules[node] = rule
            self._refresh(node, t, gpu_controls_changed=True)

    # --- jobs ---------------------------------------------------------------------------

    def hold(self, node: int, cpu_millis: int, memory_bytes: int, gpus: int) -> None:
        """Take room on the node for a pod (negative amounts give it back)."""
        self.free_cpu[node] -= cpu_millis
        self.free_memory[node] -= memory_bytes
        self.free_gpus[node] -= gpus
        self.used_cpu[node] += cpu_millis
        self.used_memory[node] += memory_bytes

    def free(self) -> tuple[IntArray, IntArray, IntArray]:
        """Free CPU millicores, memory bytes and GPUs per node (the arrays themselves)."""
        return self.free_cpu, self.free_memory, self.free_gpus

    _jobs: list[Job]

    def attach(self, jobs: list[Job]) -> None:
        self._jobs = jobs
        self.ledger.attach(jobs)

    def _retime(self, job: Job, t: float) -> None:
        """Bring the job's progress to ``t`` and schedule its finish at its new speed."""
        workload = job.workload
        if job.speed > 0.0:
            job.remaining_s = max(0.0, job.remaining_s - job.speed * (t - job.since))
        job.since = t
        fleet = self.fleet
        controls, rules = self.controls, self.board_rules
        speed = min(
            pod_speed(
                workload,
                fleet.model(n).power,
                self.steady[n],
                # A pod's boards run under its own class's cap where the node caps by class.
                controls[n] if (rule := rules[n]) is None else rule.controls_for(workload),
            )
            for n in job.nodes
        )
        # A gang that got fewer than all its pods runs proportionally slower.
        speed *= len(job.nodes) / workload.pods
        job.speed = speed
        job.version += 1
        finish = t + job.remaining_s / speed if speed > 0.0 else math.inf
        heapq.heappush(self.completions, (finish, job.index, job.version))

    def start(self, job: Job, nodes: list[int], t: float) -> None:
        """Run ``job``'s pods on ``nodes`` (one entry per pod) from ``t``."""
        workload = job.workload
        job.nodes = list(nodes)
        job.remaining_s = workload.work_s
        job.speed = 0.0
        job.since = t
        job.started_at = t
        job.ideal_s = workload.work_s / min(
            pod_speed(workload, self.fleet.model(n).power, UNCONTROLLED, Controls()) for n in nodes
        )
        gpus = workload.gpus if workload.gpu_resource else 0
        touched: dict[int, None] = {}
        level = self.levels[workload.priority]
        ledger = self.ledger
        for member, node in enumerate(nodes):
            ledger.book(node, t)
            pod = slim_pod(workload, self.fleet.names[node], member)
            if job.load is None:
                job.load = pod_load(pod)
            self.hold(node, workload.cpu_millis, workload.memory_bytes, gpus)
            self.level_cpu[level, node] += workload.cpu_millis
            self.level_memory[level, node] += workload.memory_bytes
            self.level_gpus[level, node] += gpus
            self.pods_on[node].setdefault(job.index, []).append(pod)
            if workload.performance:
                self.performance_pods[node] += 1
            self.pod_count[node] += 1
            touched[node] = None
        for node in touched:
            self.pods_changed.add(node)
            self._refresh(node, t)
        if job.speed == 0.0:
            self._retime(job, t)  # its nodes' clocks did not move: time it at their speed

    def stop(self, job: Job, t: float) -> None:
        """Remove ``job``'s pods (finished or preempted) at ``t``."""
        workload = job.workload
        gpus = workload.gpus if workload.gpu_resource else 0
        touched: dict[int, None] = {}
        level = self.levels[workload.priority]
        ledger = self.ledger
        for node in job.nodes:
            ledger.book(node, t)
            self.hold(node, -workload.cpu_millis, -workload.memory_bytes, -gpus)
            self.level_cpu[level, node] -= workload.cpu_millis
            self.level_memory[level, node] -= workload.memory_bytes
            self.level_gpus[level, node] -= gpus
            if workload.performance:
                self.performance_pods[node] -= 1
            self.pod_count[node] -= 1
            touched[node] = None
        job.nodes = []
        job.speed = 0.0
        job.version += 1
        ledger.forget(job.index)
        for node in touched:
            del self.pods_on[node][job.index]
            self.pods_changed.add(node)
            self._refresh(node, t)

    def max_pod_gpus(self, node: int) -> int:
        """The most GPU units any running pod on the node uses (the sustained-preset rule)."""
        return max((pods[0].gpus for pods in self.pods_on[node].values()), default=0)
