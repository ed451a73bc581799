"""Preemption in the standalone engine: which running workloads give way to a pending one, by
``joulie.core.preemption.preempt`` (the workload-aware algorithm the extender's tests hold
kube-scheduler to), over a small domain of nodes.

``preempt`` treats the nodes it is given as one domain and re-places the preemptor once per
candidate unit, so its cost grows with nodes x pods. kube-scheduler also only looks at a sample
of candidate nodes; here the domain is the few nodes where removing lower-priority pods would
make room for a pod of the preemptor (and that the extender's filter allows), those holding the
most lower-priority GPUs, then CPUs, first. A victim is always a whole workload: a preempted
pod of a gang stops the gang, and the workload starts over when it is placed again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from joulie.api.workload import DisruptionMode
from joulie.core.preemption import Group, Node, Outcome, Pod, Preemptor, preempt
from joulie.sim.cluster import Cluster, Job
from joulie.sim.placement import Scheduler

__all__ = ["DOMAIN_NODES", "Preemption", "plan_preemption"]

DOMAIN_NODES = 8
"""Nodes a preemption looks at (at least twice the preemptor's pods)."""


@dataclass(frozen=True, slots=True)
class Preemption:
    """What to do: the victims to stop, then where the preemptor's pods go."""

    victims: list[Job]
    nodes: list[int]


def _requests(job: Job) -> dict[str, float]:
    w = job.workload
    requests = {"cpu": float(w.cpu_millis), "memory": float(w.memory_bytes)}
    if w.gpus and w.gpu_resource:
        requests[w.gpu_resource] = float(w.gpus)
    return requests


def _domain(job: Job, cluster: Cluster, scheduler: Scheduler) -> list[int]:
    w = job.workload
    lower = [row for priority, row in cluster.levels.items() if priority < w.priority]
    if not lower:
        return []
    spare_cpu = cluster.level_cpu[lower].sum(axis=0)
    spare_gpus = cluster.level_gpus[lower].sum(axis=0)
    spare_memory = cluster.level_memory[lower].sum(axis=0)
    room = (cluster.free_cpu + spare_cpu >= w.cpu_millis) & (
        cluster.free_memory + spare_memory >= w.memory_bytes
    )
    if w.gpus and w.gpu_resource:
        room &= scheduler.offers(w.gpu_resource) & (cluster.free_gpus + spare_gpus >= w.gpus)
    if scheduler.table is not None and w.performance:
        room &= ~scheduler.kept_off
    room &= (spare_cpu > 0) | (spare_gpus > 0)
    nodes = np.flatnonzero(room)
    if nodes.size == 0:
        return []
    order = np.lexsort((nodes, -spare_cpu[nodes], -spare_gpus[nodes]))
    return [int(n) for n in nodes[order][: max(DOMAIN_NODES, 2 * w.pods)]]


def _pods(job: Job, node_name: str | None, members: Sequence[int]) -> list[Pod]:
    w = job.workload
    return [
        Pod(
            name=f"{w.id}-{m}",
            node=node_name,
            priority=w.priority,
            group=w.id if w.gang else None,
            start_time=job.started_at,
            requests=_requests(job),
        )
        for m in members
    ]


def _group(job: Job) -> Group:
    w = job.workload
    return Group(
        name=w.id,
        min_count=w.min_count,
        priority=w.priority,
        disruption_mode=w.disruption if w.gang else DisruptionMode.SINGLE,
    )


def plan_preemption(
    job: Job, cluster: Cluster, scheduler: Scheduler, jobs: Sequence[Job]
) -> Preemption | None:
    """Victims and nodes that let ``job`` run now, or None."""
    domain = _domain(job, cluster, scheduler)
    if len(domain) == 0:
        return None
    fleet = cluster.fleet
    nodes = []
    running: list[Pod] = []
    groups: dict[str, Group] = {}
    for index in domain:
        name = fleet.names[index]
        capacity = {
            "cpu": float(fleet.cpu_millis[index]),
            "memory": float(fleet.memory_bytes[index]),
        }
        resource = fleet.gpu_resource[index]
        if resource:
            capacity[resource] = float(fleet.gpus[index])
        nodes.append(Node(name, capacity))
        for other, pods in cluster.pods_on[index].items():
            victim = jobs[other]
            members = [int(p.name.rsplit("-", 1)[1]) for p in pods]
            running += _pods(victim, name, members)
            if victim.workload.gang:
                groups[victim.workload.id] = _group(victim)
    w = job.workload
    pending = _pods(job, None, range(w.pods))
    if w.gang:
        group = groups[w.id] = _group(job)
        preemptor: Preemptor | Pod = Preemptor.of_group(group, pending)
    else:
        preemptor = pending[0]
    result = preempt(nodes, running, preemptor, groups=list(groups.values()))
    if result.outcome is not Outcome.PREEMPT:
        return None
    by_id = {jobs[i].workload.id: jobs[i] for n in domain for i in cluster.pods_on[n]}
    victims: dict[int, Job] = {}
    for key in result.victim_pods:
        victim = by_id[key.split("/", 1)[1].rsplit("-", 1)[0]]
        victims.setdefault(victim.index, victim)
    index_of = {fleet.names[i]: i for i in domain}
    placed = [index_of[node] for _, node in sorted(result.placement.items())]
    return Preemption(list(victims.values()), placed)
