"""The standalone engine's pending queue: which workloads wait, in kube-scheduler's order
(priority first, then submission), and which of them a scheduling pass should try.

A workload that arrived (or was preempted) since the last pass is tried against every node. One
already found unable to fit anywhere can only fit now on a node that changed since (room freed
by a finished or preempted workload, a node taken out of eco): kube-scheduler likewise parks
unschedulable pods until a cluster event could make them fit. Which parked workloads that could
be is decided in a few vector operations over all of them, from the most free CPU, memory and
GPUs of each kind on the changed nodes; only those are tried. At a backlog of thousands this is
what keeps a pass at microseconds instead of a Python loop over the whole queue.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from joulie.core.lifecycle import Demand
from joulie.sim.cluster import Job
from joulie.sim.fleet import Fleet

__all__ = ["PendingQueue"]

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

_FEW = 32
"""Up to this many nodes, the most free GPUs of each kind are found in a Python loop."""


class PendingQueue:
    def __init__(self, jobs: Sequence[Job], fleet: Fleet, joulie: bool) -> None:
        n = len(jobs)
        resources = sorted({r for r in fleet.gpu_resource if r})
        self._resource_ids = {r: i + 1 for i, r in enumerate(resources)}
        """GPU resource -> column of the headroom table (0: no GPUs asked)."""
        self._resource_names = {i: r for r, i in self._resource_ids.items()}
        """Back from the column to the resource (one no node offers has none: it fits nowhere)."""
        self._node_resource = np.array(
            [self._resource_ids.get(r, 0) if r else 0 for r in fleet.gpu_resource], dtype=np.int64
        )
        self._cpu = np.array([j.workload.cpu_millis for j in jobs], dtype=np.int64)
        self._memory = np.array([j.workload.memory_bytes for j in jobs], dtype=np.int64)
        self._gpus = np.array(
            [j.workload.gpus if j.workload.gpu_resource else 0 for j in jobs], dtype=np.int64
        )
        # A resource no node offers gets an id past the table: such a job fits nowhere.
        missing = len(resources) + 1
        self._resource = np.array(
            [
                self._resource_ids.get(j.workload.gpu_resource, missing)
                if j.workload.gpus and j.workload.gpu_resource
                else 0
                for j in jobs
            ],
            dtype=np.int64,
        )
        self._performance = np.array([joulie and j.workload.performance for j in jobs])
        self._priority = np.array([j.workload.priority for j in jobs], dtype=np.int64)
        self.waiting = np.zeros(n, dtype=np.bool_)
        self.parked = np.zeros(n, dtype=np.bool_)
        """Waiting, and found unable to fit anywhere at its last try."""
        self.fresh: list[int] = []
        self.count = 0
        self._parked_index: IntArray | None = None

    def __len__(self) -> int:
        return self.count

    def add(self, index: int) -> None:
        self.waiting[index] = True
        self.count += 1
        self.fresh.append(index)

    def remove(self, index: int) -> None:
        self.waiting[index] = False
        self.count -= 1
        if self.parked[index]:
            self.parked[index] = False
            self._parked_index = None

    def park(self, index: int) -> None:
        if not self.parked[index]:
            self.parked[index] = True
            self._parked_index = None

    def _parked(self) -> IntArray:
        if self._parked_index is None:
            self._parked_index = np.flatnonzero(self.parked)
        return self._parked_index

    def _could_fit(
        self,
        parked: IntArray,
        free: tuple[IntArray, IntArray, IntArray],
        nodes: IntArray,
    ) -> BoolArray:
        """Which parked workloads one of ``nodes`` might take (each resource on its own)."""
        if nodes.size == 0:
            return np.zeros(parked.size, dtype=np.bool_)
        # The most free GPUs of each kind. Usually over a handful of nodes (those a finished
        # workload left), where plain Python beats numpy's per-call cost.
        resources, gpus = self._node_resource[nodes], free[2][nodes]
        if nodes.size <= _FEW:
            most = [-1] * (len(self._resource_ids) + 2)
            for resource, count in zip(resources.tolist(), gpus.tolist(), strict=True):
                most[resource] = max(most[resource], count)
            table = np.array(most, dtype=np.int64)
        else:
            table = np.full(len(self._resource_ids) + 2, -1, dtype=np.int64)
            np.maximum.at(table, resources, gpus)
        table[0] = np.iinfo(np.int64).max  # asking for no GPU always fits
        fits: BoolArray = (
            (self._cpu[parked] <= free[0][nodes].max())
            & (self._memory[parked] <= free[1][nodes].max())
            & (self._gpus[parked] <= table[self._resource[parked]])
        )
        return fits

    def to_try(
        self,
        changed: IntArray,
        free: tuple[IntArray, IntArray, IntArray],
        kept_off: BoolArray,
    ) -> list[int]:
        """The workloads a pass tries, in queue order: every fresh one, and the parked ones
        that one of the ``changed`` nodes might now take (performance ones only counting the
        nodes not kept off)."""
        fresh, self.fresh = self.fresh, []
        chosen = [i for i in fresh if self.waiting[i]]
        parked = self._parked()
        if changed.size and parked.size:
            ok = self._might_take(parked, free, changed, kept_off)
            chosen += parked[ok].tolist()
        return self._in_order(chosen)

    def _might_take(
        self,
        jobs: IntArray,
        free: tuple[IntArray, IntArray, IntArray],
        nodes: IntArray,
        kept_off: BoolArray,
    ) -> BoolArray:
        """Which of ``jobs`` one of ``nodes`` might take (performance ones only counting the
        nodes not kept off)."""
        ok = self._could_fit(jobs, free, nodes)
        perf = self._performance[jobs]
        if perf.any():
            allowed = nodes[~kept_off[nodes]]
            ok &= ~perf | self._could_fit(jobs, free, allowed)
        return ok

    def _in_order(self, chosen: list[int]) -> list[int]:
        if len(chosen) > 1:
            keys = np.array(chosen, dtype=np.int64)
            chosen = keys[np.lexsort((keys, -self._priority[keys]))].tolist()
        return chosen

    def waiting_for(
        self,
        nodes: IntArray,
        free: tuple[IntArray, IntArray, IntArray],
        kept_off: BoolArray,
    ) -> list[int]:
        """The waiting workloads, in queue order, that one of ``nodes`` might take (what the
        lifecycle's provisioner looks at before it boots nodes)."""
        waiting = np.flatnonzero(self.waiting)
        if waiting.size == 0 or nodes.size == 0:
            return []
        ok = self._might_take(waiting, free, nodes, kept_off)
        return self._in_order(waiting[ok].tolist())

    def waiting_requests(self) -> list[Demand]:
        """The distinct demands (CPU millicores, GPUs of which resource, performance or not) of
        one pod of each waiting workload."""
        waiting = np.flatnonzero(self.waiting)
        if waiting.size == 0:
            return []
        rows = np.unique(
            np.column_stack(
                (
                    self._cpu[waiting],
                    self._gpus[waiting],
                    self._resource[waiting],
                    self._performance[waiting],
                )
            ),
            axis=0,
        )
        return [
            Demand(
                int(cpu),
                int(gpus),
                self._resource_names.get(int(resource), ""),
                performance=bool(performance),
            )
            for cpu, gpus, resource, performance in rows
        ]
