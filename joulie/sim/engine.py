"""The standalone simulator's engine: a cluster of virtual nodes in virtual time, driven by
events (arrivals, completions, the manager's reconciles), with every decision made by the
functions the live roles run.

The loop jumps from event to event. At each moment it finishes the workloads due, takes in the
arrivals, lets the manager reconcile when one is due (baselines B and C), and then runs a
scheduling pass over the pending queue (priority first, then submission order), as
kube-scheduler's queue does (with ``Scenario.performance_first``, performance work takes the
``joulie-performance`` priority and preempts nothing, as manifests/priority makes it on a
cluster). A pod that could not be placed is tried again only on the nodes that changed since
(freed room, a node taken out of eco): every other node was already found unable to take it,
exactly as kube-scheduler only requeues unschedulable pods on cluster events that could make
them fit. A workload that does not fit may preempt lower-priority ones
(``joulie.sim.preempting``).

Baseline A runs the same trace without Joulie: no manager, no caps, no extender, and pods'
workload classes mean nothing to the scheduler.

With the node lifecycle (``Scenario.lifecycle``, any baseline) the loop also wakes for its
passes, drain re-checks and boot ends (``joulie.sim.lifecycle``), before the scheduling pass;
its provisioner runs after the pass, on what is left pending. Without it nothing of this runs.

With a measurement window (``Scenario.window``) the energy integration is split at the window's
two ends and the counters read there, so the result also says what was drawn and done inside
it (``RunResult.window``). That costs one comparison per event; without a window nothing else
changes, and the figures are those of a run without it bit for bit.

The IT energy is also split per workload class, kind and namespace, and the overhead
(``joulie.sim.workload_energy``): the run's own (``RunResult.energy_by_workload``) and, cut at
the window's ends, the window's.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from joulie.api import keys
from joulie.api.enums import SchedulableClass
from joulie.api.inventory import Inventory
from joulie.core.intents import IntentConfig
from joulie.core.pod_power import PodDemand, pod_demand
from joulie.core.policies import PolicyInputs
from joulie.core.score_table import ScoreTable
from joulie.hardware.catalog import Catalog
from joulie.sim.cluster import Cluster, Job
from joulie.sim.control_loop import ControlLoop
from joulie.sim.fleet import Fleet, build_fleet
from joulie.sim.lifecycle import LifecycleSettings, NodeLifecycle
from joulie.sim.placement import Scheduler
from joulie.sim.pods import pod_manifest
from joulie.sim.preempting import plan_preemption
from joulie.sim.queue import PendingQueue
from joulie.sim.results import ClassResult, Percentiles, RunResult, Sample, WindowResult
from joulie.sim.trace import Workload

__all__ = ["Engine", "Scenario", "performance_first", "simulate"]

Progress = Callable[[float], None]

_CLASSES = ("performance", "eco", "draining")


@dataclass(frozen=True)
class Scenario:
    name: str
    baseline: str
    seed: int
    inventory: Inventory
    workloads: Sequence[Workload]
    catalog: Catalog
    policy: PolicyInputs | None
    """The manager's policy settings; None: no Joulie at all (baseline A)."""
    config: IntentConfig = field(default_factory=IntentConfig)
    limit_s: float = math.inf
    sample_s: float = 300.0
    ambient_c: float = 22.0
    trend_window_s: float = 300.0
    tick_s: float = 60.0
    """Reconcile interval when there is no policy (the engine still ticks, so A and B/C cut
    time into the same intervals)."""
    lifecycle: LifecycleSettings | None = None
    """The node lifecycle (``joulie.sim.lifecycle``); None: every node stays on."""
    window: tuple[float, float] | None = None
    """The measurement window (start, end) in virtual seconds: energy, completed work and the
    workloads submitted inside it are also reported apart (``RunResult.window``); None: no
    window."""
    performance_first: bool = False
    """manifests/priority installed: every performance workload below the
    ``joulie-performance`` class's priority is raised to it and never preempts (see
    :func:`performance_first`)."""

    def __post_init__(self) -> None:
        if self.window is not None:
            start, end = self.window
            if not 0.0 <= start < end:
                raise ValueError(f"window {self.window}: expected 0 <= start < end")


def performance_first(workloads: Sequence[Workload]) -> tuple[list[Workload], set[int]]:
    """The workloads as manifests/priority admits them: each performance one below the
    ``joulie-performance`` class's priority takes it, and preempts nothing (the class's
    preemptionPolicy Never); the indices of those that never preempt.

    On a cluster the admission policy gives the class only to performance pods that name no
    priority class. A trace's priorities stand for what pods would get without Joulie's class
    (the generator's 0 for batch and 100 for GPU jobs are its defaults, not classes a pod
    names), so here every performance workload below the class's value counts as naming none;
    one at or above it keeps its own priority and may preempt as before."""
    out: list[Workload] = []
    never: set[int] = set()
    for index, w in enumerate(workloads):
        if w.performance and w.priority < keys.PERFORMANCE_PRIORITY:
            w = dataclasses.replace(w, priority=keys.PERFORMANCE_PRIORITY)
            never.add(index)
        out.append(w)
    return out, never


@dataclass(slots=True)
class _Run:
    """Everything one run changes."""

    jobs: list[Job]
    changed_nodes: set[int] = field(default_factory=set)
    pending_perf_pods: int = 0
    running_perf_pods: int = 0
    preempted_pods: int = 0
    preemptions: int = 0
    violations: int = 0
    completed: int = 0
    running: int = 0
    unplaceable: int = 0
    """Workloads that could not run even on the empty cluster (never queued)."""
    samples: list[Sample] = field(default_factory=list)
    shares: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))
    """Node-seconds per family (rows, in ``Engine.families`` order) and class (columns)."""
    energy_at_marks: list[tuple[float, float]] = field(default_factory=list)
    """(IT J, facility J) integrated up to each end of the measurement window reached."""


class Engine:
    """One run of a scenario (:meth:`simulate` once); its parts stay readable afterwards."""

    def __init__(self, scenario: Scenario, progress: Progress | None = None) -> None:
        self.scenario = scenario
        self.progress = progress
        self.fleet: Fleet = build_fleet(scenario.inventory, scenario.catalog, scenario.config)
        joulie = scenario.policy is not None
        workloads = sorted(scenario.workloads, key=lambda w: (w.submit_s, w.id))
        never_preempt: set[int] = set()
        if scenario.performance_first and joulie:
            workloads, never_preempt = performance_first(workloads)
        priorities = {w.priority for w in workloads} | {0}
        self.cluster = Cluster(self.fleet, scenario.ambient_c, sorted(priorities))
        self.table = ScoreTable(capacity=len(self.fleet) + 1) if joulie else None
        self.scheduler = Scheduler(self.fleet, self.cluster, self.table)
        self.loop: ControlLoop | None = None
        if scenario.policy is not None and self.table is not None:
            self.loop = ControlLoop(
                self.fleet,
                self.cluster,
                self.scheduler,
                self.table,
                scenario.policy,
                scenario.config,
                scenario.trend_window_s,
            )
        jobs = []
        demands: dict[tuple[object, ...], PodDemand] = {}
        for index, w in enumerate(workloads):
            manifest = pod_manifest(w, joulie_aware=joulie)
            # Workloads of one shape ask the same of a node: read one manifest per shape.
            shape = (w.cpu_millis, w.memory_bytes, w.gpus, w.gpu_resource, w.performance)
            demand = demands.get(shape)
            if demand is None:
                demand = demands[shape] = pod_demand(manifest)
            jobs.append(Job(index, w, demand, manifest, preempts=index not in never_preempt))
        self.run = _Run(jobs)
        self.queue = PendingQueue(jobs, self.fleet, joulie)
        self.cluster.attach(jobs)
        self.lifecycle: NodeLifecycle | None = None
        if scenario.lifecycle is not None:
            self.lifecycle = NodeLifecycle(
                self.fleet, self.cluster, self.scheduler, self.queue, jobs, scenario.lifecycle
            )
        self.tick_s = scenario.policy.reconcile_interval_s if scenario.policy else scenario.tick_s
        self.families = sorted({self.fleet.family(i) for i in range(len(self.fleet))})
        self.run.shares = np.zeros((len(self.families), 3))
        self._family_of = [
            self.families.index(self.fleet.family(i)) for i in range(len(self.fleet))
        ]

    # --- the queue ----------------------------------------------------------------------

    def _enqueue(self, job: Job) -> None:
        self.queue.add(job.index)
        if job.workload.performance:
            self.run.pending_perf_pods += job.workload.pods

    def _dequeue(self, job: Job) -> None:
        self.queue.remove(job.index)
        if job.workload.performance:
            self.run.pending_perf_pods -= job.workload.pods

    def _start(self, job: Job, nodes: list[int], t: float) -> None:
        if self.table is not None and job.workload.performance:
            refused = self.scheduler.kept_off[nodes]
            self.run.violations += int(refused.sum())
        self.cluster.start(job, nodes, t)
        self.run.running += 1
        if job.workload.performance:
            self.run.running_perf_pods += len(nodes)

    def _stop(self, job: Job, t: float) -> None:
        if job.workload.performance:
            self.run.running_perf_pods -= len(job.nodes)
        self.run.changed_nodes.update(job.nodes)
        self.cluster.stop(job, t)
        self.run.running -= 1

    # --- one pass -----------------------------------------------------------------------

    def _schedule(self, t: float) -> None:
        """One scheduling pass, and another while preempted workloads wait for their turn."""
        while True:
            self._pass(t)
            if not self.queue.fresh:
                return

    def _pass(self, t: float) -> None:
        run = self.run
        cluster = self.cluster
        changed = np.fromiter(sorted(run.changed_nodes), dtype=np.intp)
        run.changed_nodes.clear()
        for index in self.queue.to_try(changed, cluster.free(), self.scheduler.kept_off):
            job = run.jobs[index]
            if not self.queue.waiting[index]:
                continue  # started earlier in this pass (it was listed twice)
            retry = bool(self.queue.parked[index])
            # A parked workload can only fit now thanks to the nodes that changed.
            nodes = self.scheduler.place(job, changed if retry else None)
            if nodes is None and not retry and job.preempts:
                nodes = self._preempt(job, t)
            if nodes is None:
                self.queue.park(index)
                continue
            self._dequeue(job)
            self._start(job, nodes, t)

    def _preempt(self, job: Job, t: float) -> list[int] | None:
        plan = plan_preemption(job, self.cluster, self.scheduler, self.run.jobs)
        if plan is None:
            return None
        for victim in plan.victims:
            self.run.preemptions += 1
            self.run.preempted_pods += len(victim.nodes)
            victim.preempted += 1
            self._stop(victim, t)
            self._enqueue(victim)
        return plan.nodes

    # --- time ---------------------------------------------------------------------------

    def _next_completion(self) -> float:
        heap = self.cluster.completions
        jobs = self.run.jobs
        while heap:
            finish, index, version = heap[0]
            if jobs[index].version == version and jobs[index].running:
                return finish
            heapq.heappop(heap)
        return math.inf

    def _complete_due(self, t: float) -> None:
        heap = self.cluster.completions
        jobs = self.run.jobs
        while heap and heap[0][0] <= t:
            _, index, version = heapq.heappop(heap)
            job = jobs[index]
            if job.version != version or not job.running:
                continue
            self._stop(job, t)
            job.finished_at = t
            self.run.completed += 1

    def _count_classes(self) -> np.ndarray:
        counts = np.zeros((len(self.families), 3))
        for node in range(len(self.fleet)):
            cls = self.loop.class_of(node) if self.loop is not None else None
            column = 0 if cls in (None, SchedulableClass.PERFORMANCE) else _CLASSES.index(str(cls))
            counts[self._family_of[node], column] += 1
        return counts

    def simulate(self) -> RunResult:
        s = self.scenario
        run = self.run
        jobs = run.jobs
        cluster = self.cluster
        life = self.lifecycle
        arrival = 0
        next_tick = 0.0
        next_sample = 0.0
        t = 0.0
        counts = self._count_classes()
        total = len(jobs)
        last_progress = -1.0
        stopped = False
        marks = s.window or ()
        next_mark = marks[0] if marks else math.inf
        while True:
            t_next = min(
                jobs[arrival].workload.submit_s if arrival < total else math.inf,
                self._next_completion(),
                next_tick,
                life.next_event() if life is not None else math.inf,
            )
            if run.completed + run.unplaceable == total:
                break
            if t_next > s.limit_s:
                t_next = s.limit_s  # account the time up to the limit, then stop
                stopped = True
            if t_next >= next_mark:
                next_mark = self._cross_marks(marks, t_next)
            dt = t_next - t
            if dt > 0:
                run.shares += counts * dt
            cluster.advance(t_next)
            t = t_next
            if stopped:
                break
            self._complete_due(t)
            while arrival < total and jobs[arrival].workload.submit_s <= t:
                if self.scheduler.ever_fits(jobs[arrival]):
                    self._enqueue(jobs[arrival])
                else:
                    run.unplaceable += 1
                arrival += 1
            if t >= next_tick:
                if self.loop is not None:
                    before = self.scheduler.kept_off.copy()
                    self.loop.reconcile(t, run.pending_perf_pods + run.running_perf_pods)
                    # The downgrade guard's promise: a node with performance pods drains, it
                    # never runs them as eco.
                    run.violations += int((self.loop.eco & (cluster.performance_pods > 0)).sum())
                    opened = np.flatnonzero(before & ~self.scheduler.kept_off)
                    run.changed_nodes.update(int(n) for n in opened)
                    if self.loop.classes_changed:
                        counts = self._count_classes()
                        self.loop.classes_changed = False
                if t >= next_sample:
                    self._sample_at(t, counts)
                    next_sample += s.sample_s
                next_tick += self.tick_s
            if life is not None:
                run.changed_nodes.update(life.step(t))
            self._schedule(t)
            if life is not None and life.passed:
                life.provision(t)
            if self.progress is not None and total:
                fraction = run.completed / total
                if fraction - last_progress >= 0.01:
                    last_progress = fraction
                    self.progress(fraction)
        cluster.close(t)
        self._sample_at(t, counts)
        return self._result(t)

    def _cross_marks(self, marks: Sequence[float], t: float) -> float:
        """Integrate up to each window end at or before ``t`` and read the energy there; return
        the next end not reached (inf: none left)."""
        taken = self.run.energy_at_marks
        while len(taken) < len(marks) and marks[len(taken)] <= t:
            self.cluster.advance(marks[len(taken)])
            self.cluster.ledger.mark(marks[len(taken)])
            taken.append((self.cluster.it_energy_j, self.cluster.facility_energy_j))
        return marks[len(taken)] if len(taken) < len(marks) else math.inf

    def _sample_at(self, t: float, counts: np.ndarray) -> None:
        c = self.cluster
        totals = counts.sum(axis=0)
        self.run.samples.append(
            Sample(
                t_s=t,
                it_w=c.it_w,
                facility_w=c.it_w * c.pue,
                pue=c.pue,
                running=self.run.running,
                pending=len(self.queue),
                performance_nodes=int(totals[0]),
                eco_nodes=int(totals[1]),
                draining_nodes=int(totals[2]),
            )
        )

    # --- the result ---------------------------------------------------------------------

    def _window(self, end: float) -> WindowResult | None:
        """What the run drew and did inside its measurement window. A window end the run did
        not reach (it finished, or hit its limit, before) is read as the cluster drawing on
        at its last draw, as a comparison over a longer window reads it (``sim.saving``)."""
        window = self.scenario.window
        if window is None:
            return None
        c = self.cluster
        energies = list(self.run.energy_at_marks)
        for mark in window[len(energies) :]:
            extra = mark - end
            energies.append(
                (c.it_energy_j + c.it_w * extra, c.facility_energy_j + c.it_w * c.pue * extra)
            )
        (it0, fac0), (it1, fac1) = energies
        ledger = self.cluster.ledger
        for mark in window[ledger.marks :]:
            ledger.mark(mark)  # every node drawing on as it was at the end
        start, stop = window
        jobs = self.run.jobs
        done = [j for j in jobs if j.finished_at is not None and start < j.finished_at <= stop]
        return WindowResult(
            start_s=start,
            end_s=stop,
            it_energy_kwh=(it1 - it0) / 3.6e6,
            facility_energy_kwh=(fac1 - fac0) / 3.6e6,
            completed_work_h=_work_h(done),
            classes=_classes([j for j in jobs if start <= j.workload.submit_s < stop]),
            energy_by_workload=ledger.energy(stretch=1),
        )

    def _result(self, end: float) -> RunResult:
        s = self.scenario
        run = self.run
        classes = _classes(run.jobs)
        finished = [j.finished_at for j in run.jobs if j.finished_at is not None]
        first = min((j.workload.submit_s for j in run.jobs), default=0.0)
        unfinished = len(run.jobs) - len(finished) - run.unplaceable
        makespan = (max(finished) - first) if finished and not unfinished else None
        shares = {}
        for family, row in zip(self.families, run.shares, strict=True):
            whole = float(row.sum())
            shares[family] = {
                cls: (float(v) / whole if whole > 0 else 0.0)
                for cls, v in zip(_CLASSES, row, strict=True)
            }
        hours = end / 3600.0
        # The run's own, from 0 to its end: before the window's figures read past it.
        by_workload = self.cluster.ledger.energy()
        return RunResult(
            scenario=s.name,
            baseline=s.baseline,
            seed=s.seed,
            nodes=len(self.fleet),
            workloads=len(run.jobs),
            simulated_s=end,
            it_energy_kwh=self.cluster.it_energy_j / 3.6e6,
            facility_energy_kwh=self.cluster.facility_energy_j / 3.6e6,
            makespan_s=makespan,
            completed=len(finished),
            unfinished=unfinished,
            throughput_per_h=len(finished) / hours if hours > 0 else 0.0,
            preemptions=run.preemptions,
            preempted_pods=run.preempted_pods,
            classes=classes,
            profile_shares=shares,
            series=tuple(run.samples),
            misplaced_performance_pods=run.violations,
            unplaceable=run.unplaceable,
            idle_it_w=self.cluster.it_w,
            idle_facility_w=self.cluster.it_w * self.cluster.pue,
            completed_work_h=_work_h([j for j in run.jobs if j.finished_at is not None]),
            lifecycle=self.lifecycle.close(end) if self.lifecycle is not None else None,
            window=self._window(end),
            energy_by_workload=by_workload,
        )


def _classes(jobs: Sequence[Job]) -> dict[str, ClassResult]:
    """Per class, the workloads' completion time, slowdown and stretch (completed ones)."""
    classes: dict[str, ClassResult] = {}
    for name, performance in (("performance", True), ("standard", False)):
        mine = [j for j in jobs if j.workload.performance == performance]
        done = [j for j in mine if j.finished_at is not None]
        completion = [j.finished_at - j.workload.submit_s for j in done]  # type: ignore[operator]
        # Against the run time on the parts it ran on, uncontrolled: a job on a slower board is
        # not slowed down by Joulie, and one on a faster board not sped up by it.
        slowdown = [c / j.ideal_s for c, j in zip(completion, done, strict=True)]
        stretch = [
            (j.finished_at - j.started_at) / j.ideal_s  # type: ignore[operator]
            for j in done
        ]
        classes[name] = ClassResult(
            submitted=len(mine),
            completed=len(done),
            completion_s=Percentiles.of(completion),
            slowdown=Percentiles.of(slowdown),
            stretch=Percentiles.of(stretch),
        )
    return classes


def _work_h(done: Sequence[Job]) -> float:
    """Pods x work at full speed of the given (completed) workloads, in hours."""
    return sum(j.workload.pods * j.workload.work_s for j in done) / 3600.0


def simulate(scenario: Scenario, progress: Progress | None = None) -> RunResult:
    """Run ``scenario`` to the end (every workload finished, or its time limit)."""
    return Engine(scenario, progress).simulate()
