"""Which powered-off nodes the lifecycle boots for the work that waits (``--lifecycle``).

Pending workloads that no serving node could take are looked at in the queue's order. Their
pods are packed first onto the room already coming back (nodes booting, and nodes draining: a
pending pod that fits cancels a drain at its re-check) and onto nodes chosen earlier in the
same call; only a pod that fits none of these chooses another off node, the one with the
lowest idle draw among those that fit it (resources, GPU kind, the extender's filter for
performance pods), so a CPU job does not wake a GPU server. So a burst boots what it needs,
never the whole fleet. A gang is planned for all its pods without counting the free room of
serving nodes: at most a gang's size of overshoot, for a plan that needs no second placement.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from joulie.sim.cluster import Cluster, Job
from joulie.sim.placement import Scheduler
from joulie.sim.queue import PendingQueue

__all__ = ["nodes_to_boot"]

IntArray = npt.NDArray[np.intp]


def nodes_to_boot(
    off: IntArray,
    coming: IntArray,
    queue: PendingQueue,
    jobs: Sequence[Job],
    cluster: Cluster,
    scheduler: Scheduler,
) -> list[int]:
    """The nodes of ``off`` to power on now; ``coming``: nodes that will take pods soon
    without a boot (booting, draining). Off and coming nodes hold no pods."""
    fleet = cluster.fleet
    nodes = np.concatenate((coming, off))
    waiting = queue.waiting_for(nodes, cluster.free(), scheduler.kept_off)
    if not waiting:
        return []
    cpu = fleet.cpu_millis[nodes].copy()
    memory = fleet.memory_bytes[nodes].copy()
    gpus = fleet.gpus[nodes].copy()
    idle_w = np.array([cluster.steady[int(n)].node_w for n in nodes])
    chosen = np.zeros(nodes.size, dtype=np.bool_)
    chosen[: coming.size] = True
    spare = off.size
    for index in waiting:
        w = jobs[index].workload
        asked = w.gpus if w.gpu_resource else 0
        allowed = np.ones(nodes.size, dtype=np.bool_)
        if asked and w.gpu_resource:
            allowed &= scheduler.offers(w.gpu_resource)[nodes]
        if scheduler.table is not None and w.performance:
            allowed &= ~scheduler.kept_off[nodes]
        for _ in range(w.pods):
            ok = allowed & (cpu >= w.cpu_millis) & (memory >= w.memory_bytes) & (gpus >= asked)
            hit = np.flatnonzero(ok & chosen)
            if hit.size:
                k = int(hit[0])
            else:
                new = np.flatnonzero(ok & ~chosen)
                if new.size == 0:
                    break
                k = int(new[int(np.argmin(idle_w[new]))])
                chosen[k] = True
                spare -= 1
            cpu[k] -= w.cpu_millis
            memory[k] -= w.memory_bytes
            gpus[k] -= asked
        if spare == 0:
            break  # every off node is taken: the rest of the queue can change nothing
    return [int(node) for node in off[chosen[coming.size :]]]
