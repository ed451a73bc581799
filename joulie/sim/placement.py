"""The standalone engine's scheduler: kube-scheduler's resource fit and resource scoring with the
Joulie extender's filter and priorities, over numpy columns of the whole fleet.

* Filter: a node fits a pod when its free CPU, memory and GPUs of the pod's GPU resource cover
  the requests (NodeResourcesFit); with Joulie on, a performance pod is also kept off the nodes
  the extender refuses (their twin's class, decided by ``joulie.core.scoring.filter_reason``).
  With the node lifecycle on, a node draining (cordoned), off or booting takes no pod.
* Score: NodeResourcesFit's least-allocated score plus NodeResourcesBalancedAllocation (0-100
  each, weight 1, kube-scheduler's defaults), plus the extender's 0..10 priority from the score
  table (``joulie.core.score_table``, the table the extender serves) x its weight x 10, as
  kube-scheduler adds an extender's priorities. The highest total wins; ties go to the first
  node in inventory order, so a run is repeatable.
* A gang (PodGroup) places its pods one by one as above and counts as placed once ``min_count``
  of them fit; otherwise nothing of it is placed.

kube-scheduler scores a sample of the feasible nodes on large clusters
(percentageOfNodesToScore); the engine scores them all, which only makes it choose better.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from joulie.core.score_table import ScoreTable
from joulie.sim.cluster import Cluster, Job
from joulie.sim.fleet import Fleet

__all__ = ["EXTENDER_WEIGHT", "Scheduler"]

EXTENDER_WEIGHT = 5
"""The extender's weight in the example kube-scheduler configuration of manifests/extender."""
_PRIORITY_REACH = 3
"""How many priority steps below the best a node can still win by its resource scores: their
span (150) over a step's worth (EXTENDER_WEIGHT x 10), rounded up (a tie at exactly 150 would
go to the earlier node)."""

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.intp]


class Scheduler:
    def __init__(self, fleet: Fleet, cluster: Cluster, table: ScoreTable | None) -> None:
        """``table`` is the extender's score table; None runs without the extender (and without
        its filter: baseline A)."""
        self.fleet = fleet
        self.cluster = cluster
        self.table = table
        self.kept_off = np.zeros(len(fleet), dtype=np.bool_)
        """Nodes the extender refuses performance pods (kept current by the control loop)."""
        self.cordoned: BoolArray | None = None
        """Nodes no pod may land on (draining, off or booting); None without the lifecycle,
        which costs the placement nothing then."""
        self._cpu = fleet.cpu_millis
        self._memory = fleet.memory_bytes
        self._group_sizes = np.bincount(fleet.group_of, minlength=len(fleet.groups)).tolist()
        self._offers: dict[str, BoolArray] = {}
        for resource in {r for r in fleet.gpu_resource if r}:
            self._offers[resource] = np.array([r == resource for r in fleet.gpu_resource])

    def offers(self, resource: str) -> BoolArray:
        """Which nodes offer GPUs as ``resource``."""
        found = self._offers.get(resource)
        return found if found is not None else np.zeros(len(self.fleet), dtype=np.bool_)

    # --- one pod ------------------------------------------------------------------------

    def fits(self, job: Job, nodes: IntArray | None = None) -> BoolArray:
        """Which nodes (all, or those of ``nodes``) can take one more pod of ``job`` now."""
        w = job.workload
        c = self.cluster
        pick = slice(None) if nodes is None else nodes
        mask = (c.free_cpu[pick] >= w.cpu_millis) & (c.free_memory[pick] >= w.memory_bytes)
        if w.gpus and w.gpu_resource:
            offers = self._offers.get(w.gpu_resource)
            if offers is None:
                return np.zeros_like(mask)
            mask &= offers[pick] & (c.free_gpus[pick] >= w.gpus)
        if self.table is not None and w.performance:
            mask &= ~self.kept_off[pick]
        if self.cordoned is not None:
            mask &= ~self.cordoned[pick]
        return mask

    def _resource_scores(self, job: Job, nodes: IntArray) -> npt.NDArray[np.float64]:
        """NodeResourcesFit's least-allocated plus NodeResourcesBalancedAllocation, each floored:
        50-200 for a node the pod fits."""
        w = job.workload
        c = self.cluster
        cpu = self._cpu[nodes]
        memory = self._memory[nodes]
        cpu_after = (c.used_cpu[nodes] + w.cpu_millis) / cpu
        memory_after = (c.used_memory[nodes] + w.memory_bytes) / memory
        # least = ((1 - cpu_after) + (1 - memory_after)) x 50, balanced = (1 - |cpu_after -
        # memory_after| / 2) x 100, each floored, written in place.
        total = 1.0 - cpu_after
        total += 1.0 - memory_after
        total *= 50.0
        np.floor(total, out=total)
        balanced = np.subtract(cpu_after, memory_after, out=cpu_after)
        np.abs(balanced, out=balanced)
        balanced /= 2.0
        np.subtract(1.0, balanced, out=balanced)
        balanced *= 100.0
        np.floor(balanced, out=balanced)
        total += balanced
        return total

    def _scores(self, job: Job, nodes: IntArray, prune: bool = True) -> npt.NDArray[np.float64]:
        """Each node's total score for one more pod of ``job``. With ``prune``, a node that
        cannot have the highest is given -inf instead (its resource scores are not worked out):
        the resource scores span at most 150 points and each priority step is worth 50, so a
        node four steps below the best priority can never reach the top."""
        if self.table is None:
            return self._resource_scores(job, nodes)
        # The extender's priorities of the feasible nodes alone: every node's would cost the
        # whole fleet per pod (nearly every pod asks a question of its own).
        rows = self.table.rows(self.fleet.names)[nodes]
        priorities = self.table.priorities_at(job.demand, rows)
        if prune and nodes.size > 1:
            contenders = priorities >= priorities.max() - _PRIORITY_REACH
            if not contenders.all():
                total = np.full(nodes.size, -np.inf)
                total[contenders] = self._resource_scores(job, nodes[contenders]) + priorities[
                    contenders
                ] * (EXTENDER_WEIGHT * 10)
                return total
        return self._resource_scores(job, nodes) + priorities * (EXTENDER_WEIGHT * 10)

    def best(self, job: Job, candidates: IntArray | None = None) -> int | None:
        """The node one more pod of ``job`` goes to (among ``candidates``, else all), or None
        when none fits."""
        if candidates is None:
            feasible = np.flatnonzero(self.fits(job))
        else:
            feasible = candidates[self.fits(job, candidates)]
        if feasible.size == 0:
            return None
        if feasible.size == 1:
            return int(feasible[0])
        scores = self._scores(job, feasible)
        return int(feasible[int(np.argmax(scores))])

    # --- a workload ---------------------------------------------------------------------

    def _room_for(self, job: Job, nodes: IntArray) -> int:
        """How many pods of ``job`` the free room of ``nodes`` (each able to take one) holds
        together."""
        w = job.workload
        c = self.cluster
        if nodes.size == 0:
            return 0
        room = np.minimum(
            c.free_cpu[nodes] // max(w.cpu_millis, 1),
            c.free_memory[nodes] // max(w.memory_bytes, 1),
        )
        if w.gpus and w.gpu_resource:
            room = np.minimum(room, c.free_gpus[nodes] // w.gpus)
        return int(room.sum())

    def place(self, job: Job, candidates: IntArray | None = None) -> list[int] | None:
        """Nodes for the workload's pods (one entry per pod placed), or None when it does not
        fit now. Nothing is committed: the caller starts the job on the nodes returned."""
        w = job.workload
        if w.pods == 1:
            node = self.best(job, candidates)
            return None if node is None else [node]
        return self._place_gang(job, candidates)

    def _place_gang(self, job: Job, changed: IntArray | None) -> list[int] | None:
        """``changed``: the gang was found not to fit, and only these nodes gained room since.
        What the rest of the cluster held for it then is an upper bound of what it holds now,
        so the gang is only placed member by member once that bound plus the changed nodes'
        room reaches ``min_count``."""
        w = job.workload
        c = self.cluster
        if changed is not None and job.room_bound is not None:
            bound = job.room_bound + self._room_for(job, changed[self.fits(job, changed)])
            if bound < w.min_count:
                job.room_bound = bound
                return None
        feasible = np.flatnonzero(self.fits(job))
        room = self._room_for(job, feasible)
        if room < w.min_count:
            job.room_bound = room
            return None  # placing the members one by one could only fail
        gpus = w.gpus if w.gpu_resource else 0
        placed: list[int] = []
        # Each member goes where best() would send it. Members are scored once: holding a
        # member's room changes only that node's fit and score (the extender's priorities
        # depend on the table alone), so only its entry is scored again.
        # Not pruned: once a member fills the best node, any other may be next.
        scores = self._scores(job, feasible, prune=False)
        try:
            for _ in range(w.pods):
                if feasible.size == 0:
                    break
                best = int(np.argmax(scores))
                if scores[best] == -np.inf:
                    break
                node = int(feasible[best])
                placed.append(node)
                # Hold the room while the next member is placed.
                c.hold(node, w.cpu_millis, w.memory_bytes, gpus)
                here = feasible[best : best + 1]
                scores[best] = self._scores(job, here)[0] if self.fits(job, here)[0] else -np.inf
        finally:
            for node in placed:
                c.hold(node, -w.cpu_millis, -w.memory_bytes, -gpus)
        return placed if len(placed) >= w.min_count else None

    def ever_fits(self, job: Job) -> bool:
        """Whether the workload could run on the empty cluster at all (a gang: at least
        ``min_count`` nodes able to hold one of its pods; profiles aside, as any node may be
        made performance). A workload that never fits stays pending forever in Kubernetes;
        the engine reports it instead of waiting for it."""
        w = job.workload
        # The nodes of a group are alike: count whole groups.
        able = 0
        for group, size in zip(self.fleet.groups, self._group_sizes, strict=True):
            if (
                group.cpu_millis >= w.cpu_millis
                and group.memory_bytes >= w.memory_bytes
                and (
                    not (w.gpus and w.gpu_resource)
                    or (group.gpu_resource == w.gpu_resource and group.gpus >= w.gpus)
                )
            ):
                able += size
        return able >= w.min_count
