"""Which powered-off nodes the simulated lifecycle boots for the work that waits: the facts for
``core.lifecycle_boot.plan_boots``, the decision the live controller makes too.

The unserved pods are the waiting workloads of the queue (what the scheduling pass could not
place), in the queue's order, each as many times as it has pods; those no off or coming node
could take are left out first (a cheap vectorised test; the plan would count them unfittable).
A gang is planned for all its pods without counting the free room of serving nodes: at most a
gang's size of overshoot, for a plan that needs no second placement.

The groups are the off and booting nodes of one shape (resources, GPU kind, whether the
extender keeps performance pods off, idle draw); a group's boots go to its off nodes in index
order. Draining nodes are the room coming back without a boot.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from joulie.core.lifecycle import Demand
from joulie.core.lifecycle_boot import BootGroup, BootPlan, Room, plan_boots
from joulie.sim.cluster import Cluster, Job
from joulie.sim.placement import Scheduler
from joulie.sim.queue import PendingQueue

__all__ = ["boot_facts", "nodes_to_boot"]

IntArray = npt.NDArray[np.intp]
FloatArray = npt.NDArray[np.float64]


def _room(cluster: Cluster, scheduler: Scheduler, node: int) -> Room:
    fleet = cluster.fleet
    resource = fleet.gpu_resource[node]
    gpus = int(fleet.gpus[node])
    return Room(
        cpu_millis=int(fleet.cpu_millis[node]),
        memory_bytes=int(fleet.memory_bytes[node]),
        gpus={resource: gpus} if resource and gpus else {},
        keeps_performance_off=scheduler.table is not None and bool(scheduler.kept_off[node]),
    )


def boot_facts(
    off: IntArray,
    booting: IntArray,
    draining: IntArray,
    waiting: Sequence[int],
    jobs: Sequence[Job],
    cluster: Cluster,
    scheduler: Scheduler,
    idle_draw: FloatArray,
) -> tuple[list[Demand], list[BootGroup], list[Room], dict[str, list[int]]]:
    """The plan's inputs: the unserved pods of the ``waiting`` workloads, the groups of the off
    and booting nodes (``idle_draw``: each node's idle draw when it went off), the room of the
    draining ones, and each group's off nodes."""
    demands: list[Demand] = []
    for index in waiting:
        w = jobs[index].workload
        asked = w.gpus if w.gpu_resource else 0
        demand = Demand(
            w.cpu_millis,
            asked,
            (w.gpu_resource or "") if asked else "",
            performance=scheduler.table is not None and w.performance,
            memory_bytes=w.memory_bytes,
        )
        demands += [demand] * w.pods
    nodes = np.concatenate((off, booting))
    is_off = np.arange(nodes.size) < off.size
    idle_w = idle_draw[nodes]
    kept = scheduler.kept_off[nodes] if scheduler.table is not None else np.zeros(nodes.size)
    # Nodes of one inventory group share their hardware: with the class and the idle draw (a
    # cap in force lowers it), that is the shape.
    rows = np.column_stack((cluster.fleet.group_of[nodes], kept, idle_w))
    _, first, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    groups: list[BootGroup] = []
    members: dict[str, list[int]] = {}
    for shape in np.argsort(first, kind="stable"):
        mine = np.flatnonzero(inverse == shape)
        head = int(nodes[first[shape]])
        name = cluster.fleet.names[head]
        members[name] = nodes[mine[is_off[mine]]].tolist()  # off is in index order
        booting_count = int((~is_off[mine]).sum())
        groups.append(
            BootGroup(
                name,
                _room(cluster, scheduler, head),
                len(members[name]),
                booting_count,
                float(idle_w[first[shape]]),
            )
        )
    coming = [_room(cluster, scheduler, int(n)) for n in draining]
    return demands, groups, coming, members


def nodes_to_boot(
    off: IntArray,
    booting: IntArray,
    draining: IntArray,
    queue: PendingQueue,
    jobs: Sequence[Job],
    cluster: Cluster,
    scheduler: Scheduler,
    idle_draw: FloatArray,
    *,
    now: float,
    max_concurrent_boots: int | None,
) -> tuple[list[int], BootPlan | None]:
    """The nodes of ``off`` to power on now, and the plan they come from (None when nothing
    waits that an off or coming node might take). Off and coming nodes hold no pods."""
    nodes = np.concatenate((draining, booting, off))
    waiting = queue.waiting_for(nodes, cluster.free(), scheduler.kept_off)
    if not waiting:
        return [], None
    demands, groups, coming, members = boot_facts(
        off, booting, draining, waiting, jobs, cluster, scheduler, idle_draw
    )
    plan = plan_boots(
        demands, groups, now=now, coming=coming, max_concurrent_boots=max_concurrent_boots
    )
    chosen = [node for name, count in plan.boots.items() for node in members[name][:count]]
    return sorted(chosen), plan
