"""Workload API objects that workload-aware preemption reads, and how a pod names its group.

Three object kinds matter to preemption: ``Workload`` (templates), ``PodGroup`` (one gang: its
``minCount``, priority and disruption mode) and, behind the CompositePodGroup gate,
``CompositePodGroup`` (a parent of PodGroups or of other composites). The cluster serves them as
``scheduling.k8s.io/v1beta1`` (Kubernetes 1.37) and ``v1alpha3`` (composites); clusters on 1.36
serve ``v1alpha2``. The versions differ where preemption looks:

* the disruption mode is a string (``"Pod"`` / ``"PodGroup"``) in v1alpha2 and a one-member union
  (``{single: {}}`` / ``{all: {}}``) from v1beta1 on. Both parse here and keep their wire shape;
  :attr:`PodGroupSpec.disruption` gives the meaning as :class:`DisruptionMode`.
* v1alpha2 points a PodGroup at its template with ``podGroupTemplateRef.workload``; v1beta1 with
  ``workloadRef``. Both fields exist on :class:`PodGroupSpec`.

A pod joins a PodGroup through ``spec.schedulingGroup.podGroupName`` (1.36 and 1.37 alike); see
:func:`pod_group_of`. Unknown fields are kept, as everywhere in :mod:`joulie.api`.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import Field, model_validator

from joulie.api.base import Condition, K8sModel, ObjectMeta

__all__ = [
    "SCHEDULING_API_GROUP",
    "AllDisruptionMode",
    "BasicSchedulingPolicy",
    "CompositeGangSchedulingPolicy",
    "CompositePodGroup",
    "CompositePodGroupSchedulingPolicy",
    "CompositePodGroupSpec",
    "CompositePodGroupStatus",
    "DisruptionMode",
    "DisruptionModeUnion",
    "GangSchedulingPolicy",
    "PodGroup",
    "PodGroupRef",
    "PodGroupResourceClaim",
    "PodGroupResourceClaimStatus",
    "PodGroupSchedulingConstraints",
    "PodGroupSchedulingPolicy",
    "PodGroupSpec",
    "PodGroupStatus",
    "PodGroupTemplate",
    "PodGroupTemplateReference",
    "SingleDisruptionMode",
    "TopologyConstraint",
    "TypedLocalObjectReference",
    "Workload",
    "WorkloadPodGroupTemplateReference",
    "WorkloadSpec",
    "WorkloadTemplateReference",
    "disruption_mode_of",
    "pod_group_of",
]

SCHEDULING_API_GROUP = "scheduling.k8s.io"

Priority = Annotated[int, Field(ge=-2147483648, le=1000000000)]
"""A resolved priority: the admission plugin fills it from the PriorityClass; the upper bound is
the highest value a user-defined class may carry."""

PreemptionPolicy = Literal["PreemptLowerPriority", "Never"]

LegacyDisruptionMode = Literal["Pod", "PodGroup"]
"""The v1alpha2 (Kubernetes 1.36) string form of a disruption mode."""


class DisruptionMode(StrEnum):
    """What a preemption may take from a group, whichever API version spelled it."""

    SINGLE = "single"
    """Pods may be preempted one by one (v1alpha2 ``Pod``; the default)."""
    ALL = "all"
    """The whole group goes together or not at all (v1alpha2 ``PodGroup``)."""


class SingleDisruptionMode(K8sModel):
    """Marker member of the disruption-mode union: pods are preempted independently."""


class AllDisruptionMode(K8sModel):
    """Marker member of the disruption-mode union: the group is preempted as one."""


class DisruptionModeUnion(K8sModel):
    """The v1beta1 / v1alpha3 shape of a disruption mode: at most one member set."""

    single: SingleDisruptionMode | None = None
    """Pods of the group may be disrupted one at a time."""
    all: AllDisruptionMode | None = None
    """Every pod of the group is disrupted together."""

    @model_validator(mode="after")
    def _at_most_one_member(self) -> DisruptionModeUnion:
        if self.single is not None and self.all is not None:
            raise ValueError("disruptionMode: set exactly one of single, all")
        return self

    @property
    def mode(self) -> DisruptionMode:
        return DisruptionMode.ALL if self.all is not None else DisruptionMode.SINGLE


AnyDisruptionMode = DisruptionModeUnion | LegacyDisruptionMode


def disruption_mode_of(value: AnyDisruptionMode | None) -> DisruptionMode:
    """The meaning of a disruption-mode field in either API shape; unset means single."""
    if value is None or value == "Pod":
        return DisruptionMode.SINGLE
    if value == "PodGroup":
        return DisruptionMode.ALL
    assert isinstance(value, DisruptionModeUnion)
    return value.mode


class TypedLocalObjectReference(K8sModel):
    api_group: str | None = None
    """API group of the referenced object; empty for the core group."""
    kind: str
    """Kind of the referenced object."""
    name: str
    """Name of the referenced object, in the same namespace."""


class BasicSchedulingPolicy(K8sModel):
    """Members are scheduled as they come, with no all-or-nothing requirement."""


class GangSchedulingPolicy(K8sModel):
    min_count: Annotated[int, Field(ge=1)]
    """How many pods must be placeable at once before any of them binds."""


def _exactly_one(kind: str, **members: object) -> None:
    chosen = [name for name, value in members.items() if value is not None]
    if len(chosen) != 1:
        raise ValueError(f"{kind}: set exactly one of {', '.join(members)}")


class PodGroupSchedulingPolicy(K8sModel):
    basic: BasicSchedulingPolicy | None = None
    """Schedule members independently."""
    gang: GangSchedulingPolicy | None = None
    """Schedule at least minCount members together, or none."""

    @model_validator(mode="after")
    def _one_policy(self) -> PodGroupSchedulingPolicy:
        _exactly_one("schedulingPolicy", basic=self.basic, gang=self.gang)
        return self


class TopologyConstraint(K8sModel):
    key: str
    """Node label key; every pod of the group lands in one domain of it."""


class PodGroupSchedulingConstraints(K8sModel):
    topology: list[TopologyConstraint] | None = None
    """At most one topology constraint."""


class PodGroupResourceClaim(K8sModel):
    name: str
    """Name of the claim within the group."""
    resource_claim_name: str | None = None
    """An existing ResourceClaim shared by the group."""
    resource_claim_template_name: str | None = None
    """A ResourceClaimTemplate to stamp one claim for the group from."""


class PodGroupTemplate(K8sModel):
    """One PodGroup shape inside a Workload; controllers copy it into PodGroup objects."""

    name: str
    """Template name, unique in the Workload."""
    scheduling_policy: PodGroupSchedulingPolicy
    """Basic or gang scheduling."""
    scheduling_constraints: PodGroupSchedulingConstraints | None = None
    """Topology constraints (TopologyAwareWorkloadScheduling gate)."""
    resource_claims: list[PodGroupResourceClaim] | None = None
    """Claims shared by the group's pods."""
    disruption_mode: AnyDisruptionMode | None = None
    """How preemption may disrupt groups made from this template."""
    priority_class_name: str | None = None
    """PriorityClass of groups made from this template."""
    priority: Priority | None = None
    """Priority resolved from priorityClassName."""


class WorkloadSpec(K8sModel):
    controller_ref: TypedLocalObjectReference | None = None
    """The object (a Job, a JobSet, ...) that manages this Workload."""
    pod_group_templates: list[PodGroupTemplate] | None = None
    """Templates for the Workload's PodGroups (at most 8)."""
    composite_pod_group_templates: list[dict[str, Any]] | None = None
    """Templates for CompositePodGroups (v1beta1 with the CompositePodGroup gate); kept as sent."""


class Workload(K8sModel):
    api_version: str = f"{SCHEDULING_API_GROUP}/v1beta1"
    kind: Literal["Workload"] = "Workload"
    metadata: ObjectMeta
    spec: WorkloadSpec


class WorkloadPodGroupTemplateReference(K8sModel):
    workload_name: str
    """The Workload holding the template."""
    pod_group_template_name: str
    """The template within that Workload."""


class PodGroupTemplateReference(K8sModel):
    """v1alpha2 link from a PodGroup to the template it was made from."""

    workload: WorkloadPodGroupTemplateReference | None = None
    """A template inside a Workload."""


class WorkloadTemplateReference(K8sModel):
    """v1beta1 / v1alpha3 link from a group to its Workload template."""

    workload_name: str
    """The Workload holding the template."""
    template_name: str
    """The template within that Workload."""


class PodGroupSpec(K8sModel):
    pod_group_template_ref: PodGroupTemplateReference | None = None
    """v1alpha2: the template this group was made from."""
    workload_ref: WorkloadTemplateReference | None = None
    """v1beta1: the template this group was made from."""
    parent_composite_pod_group_name: str | None = None
    """The CompositePodGroup this group belongs to (CompositePodGroup gate)."""
    scheduling_policy: PodGroupSchedulingPolicy
    """Basic or gang scheduling."""
    scheduling_constraints: PodGroupSchedulingConstraints | None = None
    """Topology constraints."""
    resource_claims: list[PodGroupResourceClaim] | None = None
    """Claims shared by the group's pods."""
    disruption_mode: AnyDisruptionMode | None = None
    """How preemption may disrupt this group; unset means one pod at a time."""
    priority_class_name: str | None = None
    """PriorityClass of the group."""
    priority: Priority | None = None
    """Priority resolved from priorityClassName by admission."""
    preemption_policy: PreemptionPolicy | None = None
    """Whether the group may preempt others (PodGroupPreemptionPolicy gate)."""

    @property
    def disruption(self) -> DisruptionMode:
        return disruption_mode_of(self.disruption_mode)

    @property
    def effective_priority(self) -> int:
        """The priority preemption uses for every pod of the group; 0 when admission set none."""
        return self.priority if self.priority is not None else 0

    @property
    def min_count(self) -> int:
        """Pods that must be placeable together; a basic group needs only one."""
        gang = self.scheduling_policy.gang
        return gang.min_count if gang is not None else 1


class PodGroupResourceClaimStatus(K8sModel):
    name: str
    """Claim name within the group."""
    resource_claim_name: str | None = None
    """The ResourceClaim made for it."""


class PodGroupStatus(K8sModel):
    conditions: list[Condition] | None = None
    """PodGroupScheduled / PodGroupInitiallyScheduled, DisruptionTarget."""
    resource_claim_statuses: list[PodGroupResourceClaimStatus] | None = None
    """Claims made for the group."""


class PodGroup(K8sModel):
    api_version: str = f"{SCHEDULING_API_GROUP}/v1beta1"
    kind: Literal["PodGroup"] = "PodGroup"
    metadata: ObjectMeta
    spec: PodGroupSpec
    status: PodGroupStatus | None = None


class CompositeGangSchedulingPolicy(K8sModel):
    min_group_count: Annotated[int, Field(ge=1)]
    """How many child groups must be placeable at once."""


class CompositePodGroupSchedulingPolicy(K8sModel):
    basic: BasicSchedulingPolicy | None = None
    """Schedule child groups independently."""
    gang: CompositeGangSchedulingPolicy | None = None
    """Schedule at least minGroupCount child groups together, or none."""

    @model_validator(mode="after")
    def _one_policy(self) -> CompositePodGroupSchedulingPolicy:
        _exactly_one("schedulingPolicy", basic=self.basic, gang=self.gang)
        return self


class CompositePodGroupSpec(K8sModel):
    parent_composite_pod_group_name: str | None = None
    """The composite above this one; unset for the root."""
    workload_ref: WorkloadTemplateReference
    """The Workload template this composite was made from."""
    scheduling_policy: CompositePodGroupSchedulingPolicy
    """Basic or gang scheduling of the child groups."""
    scheduling_constraints: PodGroupSchedulingConstraints | None = None
    """Topology constraints for the whole subtree."""
    disruption_mode: DisruptionModeUnion | None = None
    """How preemption may disrupt the child groups; unset means single."""
    priority_class_name: str | None = None
    """PriorityClass of the composite."""
    priority: Priority | None = None
    """Priority resolved from priorityClassName."""
    preemption_policy: PreemptionPolicy | None = None
    """Whether the composite may preempt others."""

    @property
    def disruption(self) -> DisruptionMode:
        return disruption_mode_of(self.disruption_mode)

    @property
    def effective_priority(self) -> int:
        return self.priority if self.priority is not None else 0


class CompositePodGroupStatus(K8sModel):
    conditions: list[Condition] | None = None
    """CompositePodGroupInitiallyScheduled, DisruptionTarget."""


class CompositePodGroup(K8sModel):
    api_version: str = f"{SCHEDULING_API_GROUP}/v1alpha3"
    kind: Literal["CompositePodGroup"] = "CompositePodGroup"
    metadata: ObjectMeta
    spec: CompositePodGroupSpec
    status: CompositePodGroupStatus | None = None


class PodGroupRef(NamedTuple):
    """A PodGroup named by a pod: always in the pod's own namespace."""

    namespace: str
    name: str


def pod_group_of(pod: Mapping[str, Any]) -> PodGroupRef | None:
    """The PodGroup a raw pod belongs to, or None when it is scheduled (and preempted) alone.

    The link is ``spec.schedulingGroup.podGroupName`` on 1.36 and 1.37. The 1.35 alpha field
    ``spec.workloadRef`` names a group inline in a v1alpha1 Workload, not a PodGroup object, and
    carries no priority or disruption mode, so such a pod counts as standalone here.
    """
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return None
    selection = spec.get("schedulingGroup")
    if not isinstance(selection, Mapping):
        return None
    name = selection.get("podGroupName")
    if not isinstance(name, str) or not name:
        return None
    metadata = pod.get("metadata")
    namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
    return PodGroupRef(namespace if isinstance(namespace, str) and namespace else "default", name)
