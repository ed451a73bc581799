"""Reading Cluster API node groups as cluster-autoscaler reads them, to offer their boots.

The node groups are those cluster-autoscaler would manage: MachineDeployments (and MachineSets
no MachineDeployment owns) carrying both its min-size and max-size annotations. One without both
is someone else's to size, and is never offered; a MachineSet a MachineDeployment owns is part
of that deployment's group, never one of its own. A group offers as many nodes as its maximum
size leaves room for.

What one node of a group offers comes from cluster-autoscaler's scale-from-zero capacity
annotations (``cpu`` and ``memory``, and ``gpu-count`` of ``gpu-type``), or else from a node the
group already has, found by the owner annotations Cluster API sets on its Nodes; a group that
says neither offers nothing, with the reason.

Nothing of a boot is kept in memory: a group's nodes in flight are its replicas less its ready
replicas, and when the last boot was asked for is the ``joulie.io/boot-requested-at`` stamp on
the group. A boot still in flight past the boot grace cools the group down, as cluster-autoscaler
backs off a group whose nodes did not register within its max-node-provision-time.

Everything here is pure: the objects are read (and the group grown) by
:mod:`joulie.manager.lifecycle.actuator_capi`.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from joulie.api.quantity import QuantityError, parse_quantity
from joulie.manager.lifecycle.actuator import BootOffer

if TYPE_CHECKING:
    from joulie.kube.projections import SlimNode

CAPI_GROUP: Final = "cluster.x-k8s.io"
CLUSTER_NAMESPACE_ANNOTATION: Final = "cluster.x-k8s.io/cluster-namespace"
"""Node annotation Cluster API sets: the namespace of the node's Machine."""
OWNER_NAME_ANNOTATION: Final = "cluster.x-k8s.io/owner-name"
"""Node annotation Cluster API sets: the name of its Machine's owner (a MachineSet)."""
OWNER_KIND_ANNOTATION: Final = "cluster.x-k8s.io/owner-kind"
"""Node annotation Cluster API sets: the kind of that owner."""
MIN_SIZE_ANNOTATION: Final = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
"""Group annotation cluster-autoscaler reads: the fewest replicas it scales the group down to."""
MAX_SIZE_ANNOTATION: Final = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
"""Group annotation cluster-autoscaler reads: the most replicas it scales the group up to."""
CAPACITY_PREFIX: Final = "capacity.cluster-autoscaler.kubernetes.io/"
"""Group annotations cluster-autoscaler reads to scale a group up from zero: what one of its
nodes offers (``cpu``, ``memory``, ``gpu-count`` of ``gpu-type``)."""
DEFAULT_GPU_RESOURCE: Final = "nvidia.com/gpu"
"""The GPU resource cluster-autoscaler assumes when ``gpu-type`` is not set."""
BOOT_REQUESTED_ANNOTATION: Final = "joulie.io/boot-requested-at"
"""Group annotation Joulie sets before it grows the group: when the last boot was asked for."""


@dataclass(frozen=True)
class Scalable:
    """The MachineDeployment or MachineSet whose replicas are counted down or up."""

    kind: str
    namespace: str
    name: str
    path: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True)
class Group:
    """A node group as cluster-autoscaler sees it, and the MachineSets that make its nodes."""

    scalable: Scalable
    obj: Mapping[str, Any]
    sets: frozenset[str]


def node_groups(
    base: str, deployments: Iterable[Mapping[str, Any]], sets: Iterable[Mapping[str, Any]]
) -> list[Group]:
    """The groups cluster-autoscaler manages, their paths under ``base`` (the Cluster API
    version's root): a MachineSet a MachineDeployment owns is part of that deployment's group,
    never one of its own."""
    owned: dict[tuple[str, str], set[str]] = {}
    groups: list[Group] = []
    for machine_set in sets:
        namespace, name = _identity(machine_set)
        deployment = controller(machine_set, "MachineDeployment")
        if deployment is not None:
            owned.setdefault((namespace, deployment), set()).add(name)
        elif _autoscaled(machine_set):
            path = f"{base}/namespaces/{namespace}/machinesets/{name}"
            scalable = Scalable("MachineSet", namespace, name, path)
            groups.append(Group(scalable, machine_set, frozenset({name})))
    for deployment_obj in deployments:
        if not _autoscaled(deployment_obj):
            continue
        namespace, name = _identity(deployment_obj)
        path = f"{base}/namespaces/{namespace}/machinedeployments/{name}"
        scalable = Scalable("MachineDeployment", namespace, name, path)
        sets_of = frozenset(owned.get((namespace, name), ()))
        groups.append(Group(scalable, deployment_obj, sets_of))
    return sorted(groups, key=lambda g: str(g.scalable))


def boot_offer(
    group: Group,
    examples: Mapping[tuple[str, str], SlimNode],
    now: float,
    *,
    boot_grace_s: float,
    cooldown_s: float,
) -> BootOffer:
    """What ``group`` offers to boot at ``now``, with a node of each MachineSet in
    ``examples`` (see :func:`nodes_by_set`); a boot in flight ``boot_grace_s`` after it was
    asked for cools the group down for ``cooldown_s``."""
    name = str(group.scalable)
    annotations = annotations_of(group.obj)
    spec = as_mapping(group.obj.get("spec"))
    replicas = whole(spec.get("replicas"), 0)
    if replicas is None:
        return BootOffer(name, {}, 0, problem="its spec.replicas is not a count")
    ready = whole(as_mapping(group.obj.get("status")).get("readyReplicas"), 0) or 0
    booting = max(0, replicas - ready)
    labels = _labels(as_mapping(as_mapping(spec.get("template")).get("metadata")).get("labels"))
    sizes = group_sizes(annotations)
    if isinstance(sizes, str):
        return BootOffer(name, {}, 0, booting=booting, labels=labels, problem=sizes)
    allocatable = _capacity(annotations)
    if allocatable is None:
        for machine_set in sorted(group.sets):
            example = examples.get((group.scalable.namespace, machine_set))
            if example is not None:
                allocatable = dict(example.allocatable)
                break
    if isinstance(allocatable, str):
        return BootOffer(name, {}, 0, booting=booting, labels=labels, problem=allocatable)
    if not allocatable:
        problem = (
            f"cannot tell what a node of it offers: set {CAPACITY_PREFIX}cpu and /memory on it"
        )
        return BootOffer(name, {}, 0, booting=booting, labels=labels, problem=problem)
    cooling_until = None
    requested = _epoch(annotations.get(BOOT_REQUESTED_ANNOTATION))
    if requested is not None and booting > 0 and now - requested > boot_grace_s:
        # Its boot did not register within the grace: cluster-autoscaler backs such a
        # group off (max-node-provision-time), and so does Joulie.
        cooling_until = requested + boot_grace_s + cooldown_s
    return BootOffer(
        name,
        allocatable,
        max(0, sizes[1] - replicas),
        booting=booting,
        labels=labels,
        cooling_until=cooling_until,
    )


def as_mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return as_mapping(as_mapping(obj.get("metadata")).get("annotations"))


def named(item: Any) -> bool:
    """An object with the metadata every later step reads (anything else is skipped)."""
    if not isinstance(item, Mapping):
        return False
    metadata = item.get("metadata")
    if not isinstance(metadata, Mapping):
        return False
    return all(isinstance(metadata.get(key), str) for key in ("name", "namespace"))


def _identity(obj: Mapping[str, Any]) -> tuple[str, str]:
    metadata = obj["metadata"]
    return str(metadata["namespace"]), str(metadata["name"])


def _autoscaled(obj: Mapping[str, Any]) -> bool:
    """cluster-autoscaler manages a group only when it carries both sizes."""
    annotations = annotations_of(obj)
    return MIN_SIZE_ANNOTATION in annotations and MAX_SIZE_ANNOTATION in annotations


def size(value: Any) -> int | None:
    text = value.strip() if isinstance(value, str) else ""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 9 else None


def group_sizes(annotations: Mapping[str, Any]) -> tuple[int, int] | str:
    """The group's (minimum, maximum) size, or what is wrong with them."""
    minimum = size(annotations.get(MIN_SIZE_ANNOTATION))
    if minimum is None:
        return (
            f"{MIN_SIZE_ANNOTATION} is {annotations.get(MIN_SIZE_ANNOTATION)!r}, not a "
            "non-negative integer"
        )
    maximum = size(annotations.get(MAX_SIZE_ANNOTATION))
    if maximum is None:
        return (
            f"{MAX_SIZE_ANNOTATION} is {annotations.get(MAX_SIZE_ANNOTATION)!r}, not a "
            "non-negative integer"
        )
    if minimum > maximum:
        return f"its minimum size {minimum} is above its maximum size {maximum}"
    return minimum, maximum


def whole(value: Any, missing: int) -> int | None:
    """A count from a field (``missing`` when absent), None when it is not one."""
    if value is None:
        return missing
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _labels(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in as_mapping(value).items()}


def _capacity(annotations: Mapping[str, Any]) -> dict[str, str] | str | None:
    """What one node offers by cluster-autoscaler's scale-from-zero annotations; None when
    they do not say (it needs both cpu and memory), or what is wrong with them."""
    cpu = annotations.get(f"{CAPACITY_PREFIX}cpu")
    memory = annotations.get(f"{CAPACITY_PREFIX}memory")
    if cpu is None or memory is None:
        return None
    found: dict[str, str] = {}
    for resource, value in (("cpu", cpu), ("memory", memory)):
        try:
            parse_quantity(str(value))
        except QuantityError:
            return f"{CAPACITY_PREFIX}{resource} is {value!r}, not a quantity"
        found[resource] = str(value).strip()
    gpu_count = annotations.get(f"{CAPACITY_PREFIX}gpu-count")
    if gpu_count is not None:
        gpus = size(gpu_count)
        if gpus is None:
            return f"{CAPACITY_PREFIX}gpu-count is {gpu_count!r}, not a non-negative integer"
        gpu_type = str(annotations.get(f"{CAPACITY_PREFIX}gpu-type") or DEFAULT_GPU_RESOURCE)
        if gpus:
            found[gpu_type.strip()] = str(gpus)
    return found


def nodes_by_set(nodes: Sequence[SlimNode]) -> dict[tuple[str, str], SlimNode]:
    """A node of each MachineSet, by (namespace, MachineSet): a Ready one where there is one,
    since its allocatable is the settled one."""
    found: dict[tuple[str, str], SlimNode] = {}
    for node in nodes:
        owner_name = node.annotations.get(OWNER_NAME_ANNOTATION)
        namespace = node.annotations.get(CLUSTER_NAMESPACE_ANNOTATION)
        kind = node.annotations.get(OWNER_KIND_ANNOTATION, "MachineSet")
        if not owner_name or not namespace or kind != "MachineSet" or not node.allocatable:
            continue
        key = (namespace, owner_name)
        if key not in found or (node.ready and not found[key].ready):
            found[key] = node
    return found


def _epoch(value: Any) -> float | None:
    """An RFC 3339 time as epoch seconds; None when absent or not one."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def controller(obj: Mapping[str, Any], kind: str) -> str | None:
    """The name of ``obj``'s controlling owner when it is a Cluster API ``kind``."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if not ref.get("controller"):
            continue
        group = str(ref.get("apiVersion", "")).split("/")[0]
        if ref.get("kind") == kind and group == CAPI_GROUP and ref.get("name"):
            return str(ref["name"])
        return None
    return None
