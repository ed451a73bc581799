"""Workload-aware preemption: which running workloads give way so that a pod or a gang can run.

When a PodGroup (or a lone pod) does not fit, the cluster is treated as one domain: every running
workload of strictly lower priority is a candidate, the candidates are all taken away at once, the
preemptor is placed once, and then candidates are put back one at a time, most important first,
for as long as the preemptor still fits. Whatever cannot be put back is preempted.

What a candidate is (a *victim unit*) follows the Workload API:

* a pod on its own, when it names no PodGroup, or its PodGroup lets pods go one at a time;
* every running pod of a PodGroup, across all nodes, when the group's disruption mode is ``all``;
* with CompositePodGroups, the unit is the highest ancestor whose mode is ``all`` (a composite
  unit holds the running pods of every PodGroup below it).

A unit's priority is its group's priority whenever the pod's PodGroup exists (the pod's own
priority otherwise). Units rank by priority, then kind (composite over PodGroup over lone pod),
then size, then earliest start; the name breaks any remaining tie so the answer is repeatable.

The placement step is a parameter (:data:`ScheduleGroup`); :func:`first_fit` is the default.
Everything here is pure: inputs are plain frozen dataclasses and time is a number the caller
supplies, so the simulator and the extender get the same answer from the same inputs.

Choices where the sources leave room (see the report of the change for the reasoning):

* Reprieval keeps the first placement fixed and spares a unit only if every preemptor pod still
  fits on the node that placement proposed for it, checked in place
  (:attr:`Reprieval.FIXED_PLACEMENT`, the default, :func:`holds_in_place`): the specification's
  reprieval algorithm, which filters each pod on its proposed node, and what the 1.37 scheduler
  does (the e2e tests compare it with kube-scheduler's victims). Placing the group again and
  comparing would agree only under first fit: another deterministic placement may move a pod
  that still fits where it was proposed (see the unit tests). :attr:`Reprieval.RESCHEDULE`
  instead re-runs the placement step with the unit put back and spares it when the group stays
  schedulable with at least as many preemptor pods as the best count seen so far (1.36 with the
  May-2026 maxScheduledCount fix, as the issue describes it). Each unit is judged once, at its
  turn, as the scheduler does. For a gang of identical pods first fit places as many pods as the
  free room allows, so a unit preempted at its turn still could not come back at the end; a
  greedy placement of mixed pod sizes can occasionally place more with less room, so for such
  gangs that guarantee holds only at the unit's turn.
* The nodes the preemptor may use are one argument (``may_use``): the placement step sees only
  them, and only units with a pod on one of them are candidates, so a pod the preemptor could
  never replace spends no disruption budget.
* A pod naming a PodGroup ranks as a PodGroup unit even when it is preempted alone (size 1), as
  the scheduler's comparison does; a pod naming a PodGroup that does not exist is a lone unit
  at its own priority, still ranked as PodGroup kind.
* A composite's size is the number of its running pods, the same measure as a PodGroup's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum

from joulie.api.workload import DisruptionMode, PreemptionPolicy

__all__ = [
    "CompositeGroup",
    "Group",
    "Node",
    "Outcome",
    "Pdb",
    "Placement",
    "Pod",
    "PreemptionResult",
    "Preemptor",
    "Reprieval",
    "ScheduleGroup",
    "Snapshot",
    "UnitKind",
    "VictimUnit",
    "first_fit",
    "holds_in_place",
    "importance_order",
    "preempt",
    "split_by_pdb",
    "victim_units",
]

NOT_ELIGIBLE_NEVER = "not eligible due to preemptionPolicy=Never."
NOT_ELIGIBLE_TERMINATING = "not eligible due to a terminating pod on the nominated node."
NO_VICTIMS = "No preemption victims found for incoming preemptor"
STILL_UNSCHEDULABLE = "the preemptor does not fit even with every lower-priority workload removed"

# Requests and capacities are floats; a sum of fractions must not fail a fit by rounding.
_EPSILON = 1e-9


@dataclass(frozen=True)
class Node:
    """A node and what it can hold, e.g. ``{"cpu": 8, "memory": 32e9, "nvidia.com/gpu": 4}``.

    A resource the node does not list has capacity 0.
    """

    name: str
    capacity: Mapping[str, float]


@dataclass(frozen=True)
class Pod:
    """A pod as preemption sees it.

    ``node`` is where it runs (None while pending). ``group`` names a PodGroup in the same
    namespace. ``start_time`` is any number that orders start times (None: not started, ranks
    as the latest). ``terminating`` means it is already being deleted by an earlier preemption.
    ``nominated_node`` is the preemptor's hint from an earlier cycle.
    """

    name: str
    namespace: str = "default"
    node: str | None = None
    priority: int = 0
    group: str | None = None
    start_time: float | None = None
    requests: Mapping[str, float] = field(default_factory=dict)
    preemption_policy: PreemptionPolicy = "PreemptLowerPriority"
    terminating: bool = False
    nominated_node: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Group:
    """A PodGroup: gang size, the priority every member takes, and how it may be disrupted.

    ``parent`` names a :class:`CompositeGroup` in the same namespace.
    """

    name: str
    namespace: str = "default"
    min_count: int = 1
    priority: int = 0
    disruption_mode: DisruptionMode = DisruptionMode.SINGLE
    parent: str | None = None
    preemption_policy: PreemptionPolicy = "PreemptLowerPriority"


@dataclass(frozen=True)
class CompositeGroup:
    """A CompositePodGroup: a parent of PodGroups (or of other composites)."""

    name: str
    namespace: str = "default"
    priority: int = 0
    disruption_mode: DisruptionMode = DisruptionMode.SINGLE
    parent: str | None = None


@dataclass(frozen=True)
class Pdb:
    """A PodDisruptionBudget with its selector already resolved to the pods it covers.

    ``pods`` are pod keys (``namespace/name``). ``disrupted_pods`` are pods the budget has
    already counted (status.disruptedPods); preempting them again costs nothing.
    """

    name: str
    pods: frozenset[str]
    disruptions_allowed: int
    disrupted_pods: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Preemptor:
    """What needs room: pending pods that count as placed once ``min_count`` of them fit."""

    name: str
    pods: tuple[Pod, ...]
    priority: int
    min_count: int = 1
    preemption_policy: PreemptionPolicy = "PreemptLowerPriority"

    @classmethod
    def single(cls, pod: Pod, group: Group | None = None) -> Preemptor:
        """A lone pod; it takes its PodGroup's priority when it has one."""
        return cls(
            name=pod.key,
            pods=(pod,),
            priority=group.priority if group is not None else pod.priority,
            preemption_policy=_combined_policy(group, (pod,)),
        )

    @classmethod
    def of_group(cls, group: Group, pending: Sequence[Pod], scheduled: int = 0) -> Preemptor:
        """A PodGroup's pending pods; ``scheduled`` members already running count to the gang.

        Any member with preemptionPolicy Never makes the group Never, as in Kubernetes 1.36;
        1.37 carries the policy on the PodGroup itself, which is honoured too.
        """
        return cls(
            name=f"{group.namespace}/{group.name}",
            pods=tuple(pending),
            priority=group.priority,
            min_count=max(1, group.min_count - scheduled),
            preemption_policy=_combined_policy(group, pending),
        )


def _combined_policy(group: Group | None, pods: Iterable[Pod]) -> PreemptionPolicy:
    policies = [p.preemption_policy for p in pods]
    if group is not None:
        policies.append(group.preemption_policy)
    return "Never" if "Never" in policies else "PreemptLowerPriority"


@dataclass(frozen=True)
class Snapshot:
    """The cluster the placement step sees: nodes and the pods running on them."""

    nodes: tuple[Node, ...]
    pods: tuple[Pod, ...]


Placement = Mapping[str, str]
"""Preemptor pod key -> node name."""

ScheduleGroup = Callable[[Snapshot, Preemptor], Placement | None]
"""Places a preemptor in a snapshot without preempting anything: the pods it could place, or
None when fewer than ``min_count`` fit. Must be deterministic."""


def _fits(free: Mapping[str, float], requests: Mapping[str, float]) -> bool:
    return all(
        free.get(r, 0.0) + _EPSILON >= amount for r, amount in requests.items() if amount > 0
    )


def _take(free: dict[str, float], requests: Mapping[str, float]) -> None:
    for resource, amount in requests.items():
        free[resource] = free.get(resource, 0.0) - amount


def _free_capacity(snapshot: Snapshot) -> dict[str, dict[str, float]]:
    free = {node.name: dict(node.capacity) for node in snapshot.nodes}
    for pod in snapshot.pods:
        if pod.node in free:
            _take(free[pod.node], pod.requests)
    return free


def first_fit(snapshot: Snapshot, preemptor: Preemptor) -> dict[str, str] | None:
    """Default placement step: each pod, highest priority first, on the first node with room.

    Nodes are tried in the snapshot's order. Pods that fit nowhere are left out, as the gang
    scheduling cycle leaves them pending; the group counts as placed when ``min_count`` fit.
    """
    free = _free_capacity(snapshot)
    placement: dict[str, str] = {}
    for pod in sorted(preemptor.pods, key=lambda p: -p.priority):
        node = next((n.name for n in snapshot.nodes if _fits(free[n.name], pod.requests)), None)
        if node is not None:
            _take(free[node], pod.requests)
            placement[pod.key] = node
    return placement if len(placement) >= preemptor.min_count else None


class UnitKind(IntEnum):
    """Kinds of victim unit, in rising importance at equal priority."""

    POD = 0
    POD_GROUP = 1
    COMPOSITE_POD_GROUP = 2


@dataclass(frozen=True)
class VictimUnit:
    """Pods that are preempted together or not at all, with the priority they share."""

    kind: UnitKind
    name: str
    """``namespace/name`` of the pod, PodGroup or CompositePodGroup the unit stands for."""
    priority: int
    pods: tuple[Pod, ...]

    @property
    def earliest_start(self) -> float:
        """The first start among the unit's pods; a pod not started yet counts as last."""
        return min((_start(p) for p in self.pods), default=math.inf)

    @property
    def pod_keys(self) -> frozenset[str]:
        return frozenset(p.key for p in self.pods)


def _start(pod: Pod) -> float:
    return pod.start_time if pod.start_time is not None else math.inf


def _importance_key(unit: VictimUnit) -> tuple[int, int, int, float, str]:
    return (-unit.priority, -unit.kind, -len(unit.pods), unit.earliest_start, unit.name)


def importance_order(units: Iterable[VictimUnit]) -> list[VictimUnit]:
    """Most important first: priority, then kind, then size, then earliest start, then name."""
    return sorted(units, key=_importance_key)


@dataclass(frozen=True)
class _Hierarchy:
    groups: Mapping[tuple[str, str], Group]
    composites: Mapping[tuple[str, str], CompositeGroup]

    def group_of(self, pod: Pod) -> Group | None:
        if pod.group is None:
            return None
        return self.groups.get((pod.namespace, pod.group))

    def all_mode_root(self, group: Group) -> Group | CompositeGroup | None:
        """The highest group above (or at) ``group`` whose disruption mode is all."""
        root: Group | CompositeGroup | None = (
            group if group.disruption_mode is DisruptionMode.ALL else None
        )
        seen: set[str] = set()
        parent = group.parent
        while parent is not None and parent not in seen:
            seen.add(parent)
            composite = self.composites.get((group.namespace, parent))
            if composite is None:
                break
            if composite.disruption_mode is DisruptionMode.ALL:
                root = composite
            parent = composite.parent
        return root


def _unit_for(pod: Pod, hierarchy: _Hierarchy) -> tuple[UnitKind, str, int]:
    """Which unit a running pod falls in: its kind, its name and its priority."""
    group = hierarchy.group_of(pod)
    root = hierarchy.all_mode_root(group) if group is not None else None
    if isinstance(root, CompositeGroup):
        return UnitKind.COMPOSITE_POD_GROUP, f"{root.namespace}/{root.name}", root.priority
    if isinstance(root, Group):
        return UnitKind.POD_GROUP, f"{root.namespace}/{root.name}", root.priority
    kind = UnitKind.POD if pod.group is None else UnitKind.POD_GROUP
    return kind, pod.key, group.priority if group is not None else pod.priority


def victim_units(
    running: Iterable[Pod],
    groups: Iterable[Group] = (),
    composites: Iterable[CompositeGroup] = (),
) -> list[VictimUnit]:
    """Cut the running pods into victim units (any order)."""
    hierarchy = _Hierarchy(
        groups={(g.namespace, g.name): g for g in groups},
        composites={(c.namespace, c.name): c for c in composites},
    )
    members: dict[tuple[UnitKind, str, int], list[Pod]] = {}
    for pod in running:
        members.setdefault(_unit_for(pod, hierarchy), []).append(pod)
    return [
        VictimUnit(kind=kind, name=name, priority=priority, pods=tuple(pods))
        for (kind, name, priority), pods in members.items()
    ]


def split_by_pdb(
    ordered: Sequence[VictimUnit], pdbs: Sequence[Pdb]
) -> tuple[list[VictimUnit], list[VictimUnit]]:
    """Split units (most important first) into those whose preemption would break a budget and
    the rest, both keeping their order.

    Budgets are spent in the given order, so the more important units use them up first and a
    later unit is the one that would overdraw; a unit violates if any of its pods does.
    """
    allowed = [pdb.disruptions_allowed for pdb in pdbs]
    violating: list[VictimUnit] = []
    fine: list[VictimUnit] = []
    for unit in ordered:
        overdrawn = False
        for pod in unit.pods:
            for i, pdb in enumerate(pdbs):
                if pod.key in pdb.pods and pod.key not in pdb.disrupted_pods:
                    allowed[i] -= 1
                    overdrawn = overdrawn or allowed[i] < 0
        (violating if overdrawn else fine).append(unit)
    return violating, fine


class Outcome(StrEnum):
    PREEMPT = "preempt"
    """Victims were chosen and the preemptor fits once they are gone."""
    NOT_ELIGIBLE = "not-eligible"
    """The preemptor may not preempt now (policy Never, or an earlier preemption still running)."""
    NO_VICTIMS = "no-victims"
    """Nothing of lower priority is running."""
    UNSCHEDULABLE = "unschedulable"
    """Even with every candidate gone the preemptor does not fit."""


@dataclass(frozen=True)
class PreemptionResult:
    outcome: Outcome
    victims: tuple[VictimUnit, ...] = ()
    """Units to preempt, most important first."""
    placement: Mapping[str, str] = field(default_factory=dict)
    """Nominations: preemptor pod key -> node, valid once the victims are gone."""
    pdb_violations: int = 0
    """How many victim units break a disruption budget (budgets are best effort)."""
    reason: str = ""

    @property
    def victim_pods(self) -> tuple[str, ...]:
        """Pod keys to delete, unit by unit in the victims' order."""
        return tuple(pod.key for unit in self.victims for pod in unit.pods)


class Reprieval(StrEnum):
    RESCHEDULE = "reschedule"
    """Re-run the placement step; spare the unit if the group still places at least as many
    pods as the best count seen (Kubernetes 1.36 with the May-2026 maxScheduledCount fix)."""
    FIXED_PLACEMENT = "fixed-placement"
    """Spare the unit only if every preemptor pod still fits on the node the first placement
    proposed for it (:func:`holds_in_place`; 1.37's in-place reprieval over the selected
    placement)."""


def _ineligible(preemptor: Preemptor, units: Sequence[VictimUnit]) -> str | None:
    """Why the preemptor may not preempt now, or None."""
    if preemptor.preemption_policy == "Never":
        return NOT_ELIGIBLE_NEVER
    nominated = {p.nominated_node for p in preemptor.pods if p.nominated_node is not None}
    # A lower-priority pod still terminating there means an earlier preemption for us is in
    # flight: wait for it instead of choosing more victims.
    for unit in units:
        if unit.priority < preemptor.priority and any(
            p.terminating and p.node in nominated for p in unit.pods
        ):
            return NOT_ELIGIBLE_TERMINATING
    return None


def holds_in_place(snapshot: Snapshot, preemptor: Preemptor, selected: Placement) -> bool:
    """Whether every preemptor pod still fits on the node ``selected`` proposes for it, all of
    them together, in ``snapshot``: the specification's reprieval check, which filters each pod
    on its proposed node rather than placing the group again."""
    free = _free_capacity(snapshot)
    for pod in preemptor.pods:
        node = selected.get(pod.key)
        if node is None:
            continue
        if node not in free or not _fits(free[node], pod.requests):
            return False
        _take(free[node], pod.requests)
    return True


def preempt(
    nodes: Sequence[Node],
    pods: Sequence[Pod],
    preemptor: Preemptor | Pod,
    *,
    groups: Sequence[Group] = (),
    composites: Sequence[CompositeGroup] = (),
    pdbs: Sequence[Pdb] = (),
    schedule_group: ScheduleGroup = first_fit,
    reprieval: Reprieval = Reprieval.FIXED_PLACEMENT,
    may_use: Callable[[Node], bool] | None = None,
) -> PreemptionResult:
    """Choose the workloads to preempt so that ``preemptor`` can be placed, and where it goes.

    Inputs: ``nodes`` with capacity; ``pods`` in the cluster (those whose ``node`` is one of
    ``nodes`` are running; the rest are ignored); ``groups`` (PodGroups: minCount, priority,
    disruption mode, composite parent); ``composites``; ``pdbs``; the preemptor, either a
    :class:`Preemptor` (see :meth:`Preemptor.of_group`) or a single pending :class:`Pod`.

    ``may_use`` says which nodes the preemptor may be placed on (its filters other than room:
    node affinity, taints, Joulie's rule that performance pods stay off eco nodes; None: every
    node). Only the placement step's nodes are those; a unit is a candidate only when one of
    its pods runs on such a node, since preempting anything else cannot make room, and so a
    pod elsewhere never spends a disruption budget. Every running pod still counts towards its
    unit (a gang's pods on other nodes go with it).

    Steps: refuse if the preemptor is not eligible; candidates are victim units of strictly
    lower priority; remove them all and place the preemptor once; then, budget-breaking units
    first and most important first within each list, put each unit back and keep it only if
    the preemptor still fits (see :class:`Reprieval`). Returns the victims, most important
    first, and the placement (the nominations) that holds once they are gone.

    Worked example: three 4-CPU nodes. A PodGroup ``train`` (priority 10, mode all, two 2-CPU
    pods on n2 and n3), and two lone priority-10 pods: ``log`` (2 CPU on n3, started at 10) and
    ``web`` (4 CPU on n1, started at 50). The preemptor is a gang of two 4-CPU pods at
    priority 100. All three units are candidates; importance is train (a PodGroup), then log
    (older), then web. With all removed, first fit puts sim-0 on n1 and sim-1 on n2: that is
    the selected placement. Putting train back takes 2 CPU of n2, where sim-1 no longer fits,
    so train is preempted; putting log back touches only n3, so log is spared; putting web back
    fills n1, where sim-0 no longer fits, so web goes.

    >>> cpu = lambda n: {"cpu": n}
    >>> nodes = [Node("n1", cpu(4)), Node("n2", cpu(4)), Node("n3", cpu(4))]
    >>> train = Group("train", min_count=2, priority=10, disruption_mode=DisruptionMode.ALL)
    >>> running = [
    ...     Pod("web", node="n1", priority=10, start_time=50, requests=cpu(4)),
    ...     Pod("t-0", node="n2", group="train", start_time=20, requests=cpu(2)),
    ...     Pod("t-1", node="n3", group="train", start_time=20, requests=cpu(2)),
    ...     Pod("log", node="n3", priority=10, start_time=10, requests=cpu(2)),
    ... ]
    >>> sim = Group("sim", min_count=2, priority=100)
    >>> pending = [Pod("sim-0", group="sim", requests=cpu(4)),
    ...            Pod("sim-1", group="sim", requests=cpu(4))]
    >>> result = preempt(nodes, running, Preemptor.of_group(sim, pending), groups=[train, sim])
    >>> [unit.name for unit in result.victims]
    ['default/train', 'default/web']
    >>> result.victim_pods
    ('default/t-0', 'default/t-1', 'default/web')
    >>> dict(result.placement)
    {'default/sim-0': 'n1', 'default/sim-1': 'n2'}
    """
    node_names = {n.name for n in nodes}
    running = [p for p in pods if p.node in node_names]
    usable = tuple(n for n in nodes if may_use is None or may_use(n))
    usable_names = {n.name for n in usable}
    if isinstance(preemptor, Pod):
        preemptor = Preemptor.single(preemptor, _group_named(groups, preemptor))
    units = victim_units(running, groups, composites)

    reason = _ineligible(preemptor, units)
    if reason is not None:
        return PreemptionResult(Outcome.NOT_ELIGIBLE, reason=reason)
    candidates = importance_order(
        u
        for u in units
        if u.priority < preemptor.priority and any(p.node in usable_names for p in u.pods)
    )
    if not candidates:
        return PreemptionResult(Outcome.NO_VICTIMS, reason=NO_VICTIMS)

    removed: set[str] = set()
    for unit in candidates:
        removed |= unit.pod_keys

    def snapshot() -> Snapshot:
        remaining = (p for p in running if p.key not in removed and p.node in usable_names)
        return Snapshot(usable, tuple(remaining))

    placement = schedule_group(snapshot(), preemptor)
    if placement is None:
        return PreemptionResult(Outcome.UNSCHEDULABLE, reason=STILL_UNSCHEDULABLE)
    best = len(placement)
    violating, fine = split_by_pdb(candidates, pdbs)
    victims: list[VictimUnit] = []
    for unit in violating + fine:
        removed -= unit.pod_keys
        if reprieval is Reprieval.FIXED_PLACEMENT:
            spared = holds_in_place(snapshot(), preemptor, placement)
        else:
            trial = schedule_group(snapshot(), preemptor)
            spared = trial is not None and len(trial) >= best
            if trial is not None:
                best = max(best, len(trial))
                if spared:
                    placement = trial
        if not spared:
            removed |= unit.pod_keys
            victims.append(unit)
    overdrawn = {(u.kind, u.name) for u in violating}
    return PreemptionResult(
        Outcome.PREEMPT,
        victims=tuple(importance_order(victims)),
        placement=dict(placement),
        pdb_violations=sum(1 for v in victims if (v.kind, v.name) in overdrawn),
    )


def _group_named(groups: Sequence[Group], pod: Pod) -> Group | None:
    return next((g for g in groups if g.namespace == pod.namespace and g.name == pod.group), None)
