"""Slim projections of Nodes and Pods: the few fields Joulie reads, in compact frozen values.

A full Pod decoded from JSON costs several KiB of Python objects; these cost a few hundred bytes,
and repeated strings (namespaces, node names, phases) are interned so 100,000 pods share them.
Because informers compare projections, an update that touches only fields left out here (a
status heartbeat, a container restart count) never reaches a handler.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from types import MappingProxyType
from typing import Any

from joulie.api.quantity import QuantityError, parse_quantity

_intern = sys.intern
# Most objects carry none of the annotations or labels asked for: let them share one empty map.
_EMPTY: Mapping[str, str] = MappingProxyType({})

NODE_ALLOCATABLE_KEEP = ("cpu", "memory", "pods")


@dataclass(frozen=True, slots=True)
class SlimNode:
    name: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    allocatable: Mapping[str, str]
    unschedulable: bool
    ready: bool
    deleting: bool
    uid: str
    created_at: float = 0.0
    """metadata.creationTimestamp, epoch seconds (0 when absent)."""
    ready_changed_at: float | None = None
    """When the Ready condition last changed (its lastTransitionTime); None without one."""
    taints: tuple[str, ...] = ()
    """The keys of the node's taints."""
    provider_id: str = ""


@dataclass(frozen=True, slots=True)
class PodShape:
    """All a pod's projection holds besides its name and node. Pods made from one template
    (the replicas of a Job, the members of a gang) have equal shapes, and share one object."""

    phase: str
    annotations: Mapping[str, str]
    labels: Mapping[str, str]
    cpu_millis: int
    gpus: int
    deleting: bool
    owner_kind: str
    nominated_node: str
    gpu_resource: str
    memory_bytes: int
    unschedulable: bool
    pod_group: str


@dataclass(frozen=True, slots=True, init=False)
class SlimPod:
    """A pod as the informers keep it: its ``namespace/name`` key, its node, and a shared
    :class:`PodShape`.

    Why the split: with its twelve other fields inline, a pod cost a 160-byte object, 16 MiB at
    100,000 pods; with them shared it costs 56 bytes (tracemalloc, the bench cluster's pods).
    Why the key and not the name: the informer's store keeps the same string as its key, so a
    pod holds one string for its identity instead of two (about 6 MiB at 100,000 pods)."""

    key: str
    node_name: str
    shape: PodShape

    def __init__(
        self,
        namespace: str,
        name: str,
        node_name: str,
        phase: str,
        annotations: Mapping[str, str],
        labels: Mapping[str, str],
        cpu_millis: int,
        gpus: int,
        deleting: bool,
        owner_kind: str,
        nominated_node: str = "",
        gpu_resource: str = "",
        memory_bytes: int = 0,
        unschedulable: bool = False,
        pod_group: str = "",
    ) -> None:
        shape = _pod_shape(
            phase,
            annotations,
            labels,
            cpu_millis,
            gpus,
            deleting,
            owner_kind,
            nominated_node,
            gpu_resource,
            memory_bytes,
            unschedulable,
            pod_group,
        )
        object.__setattr__(self, "key", f"{namespace}/{name}")
        object.__setattr__(self, "node_name", node_name)
        object.__setattr__(self, "shape", shape)

    @property
    def namespace(self) -> str:
        return self.key.partition("/")[0]

    @property
    def name(self) -> str:
        return self.key.partition("/")[2]

    @property
    def phase(self) -> str:
        return self.shape.phase

    @property
    def annotations(self) -> Mapping[str, str]:
        return self.shape.annotations

    @property
    def labels(self) -> Mapping[str, str]:
        return self.shape.labels

    @property
    def cpu_millis(self) -> int:
        return self.shape.cpu_millis

    @property
    def gpus(self) -> int:
        """GPU units the pod asks for, by the projection's ``gpu_count`` (0 without one)."""
        return self.shape.gpus

    @property
    def deleting(self) -> bool:
        return self.shape.deleting

    @property
    def owner_kind(self) -> str:
        return self.shape.owner_kind

    @property
    def nominated_node(self) -> str:
        """status.nominatedNodeName: where preemption is making room for the pod."""
        return self.shape.nominated_node

    @property
    def gpu_resource(self) -> str:
        """The resource its GPUs are asked as, by the projection's ``gpu_resource`` ("" without)."""
        return self.shape.gpu_resource

    @property
    def memory_bytes(self) -> int:
        """Effective memory request, in bytes."""
        return self.shape.memory_bytes

    @property
    def unschedulable(self) -> bool:
        """A scheduler tried and found no node for it (PodScheduled False, reason Unschedulable):
        what cluster-autoscaler scales up for, and the lifecycle boots for."""
        return self.shape.unschedulable

    @property
    def pod_group(self) -> str:
        """``spec.schedulingGroup.podGroupName``: its PodGroup (gang), "" for none."""
        return self.shape.pod_group


_SHAPES_MAX = 4096
_shapes: dict[tuple[Any, ...], PodShape] = {}


def _pod_shape(*fields: Any) -> PodShape:
    """The one shape with these fields (bounded: past 4,096 distinct shapes, new ones are not
    shared, so values unique per pod cannot grow the table). The annotation and label maps are
    told apart by identity: a projection gives equal maps one shared object (:func:`_share`),
    and the table holds each map it names, so an identity is never reused while it is there."""
    key = tuple(id(v) if isinstance(v, Mapping) else v for v in fields)
    shape = _shapes.get(key)
    if shape is None:
        shape = PodShape(*fields)
        if len(_shapes) < _SHAPES_MAX:
            _shapes[key] = shape
    return shape


_SHARED_MAX = 4096
_ints: dict[int, int] = {}
_shared: dict[tuple[tuple[str, str], ...], Mapping[str, str]] = {}


def _share(items: tuple[tuple[str, str], ...]) -> Mapping[str, str]:
    """One read-only map per distinct content, for the few keys a projection asks for: the
    25,000 pods of one workload class hold the same map instead of a dict each (about 7 MiB at
    100,000 pods). Bounded, so that values unique per object cannot grow it without limit."""
    shared = _shared.get(items)
    if shared is None:
        shared = MappingProxyType(dict(items))
        if len(_shared) < _SHARED_MAX:
            _shared[items] = shared
    return shared


def _subset(source: Mapping[str, Any] | None, keys: Iterable[str] | None) -> Mapping[str, str]:
    # Values are interned too: label values (zones, instance types, classes) repeat across
    # thousands of objects, and a decoded JSON string is otherwise one copy per object.
    if not source:
        return _EMPTY
    if keys is None:
        return {_intern(k): _intern(str(v)) for k, v in source.items()}
    kept = tuple((_intern(k), _intern(str(source[k]))) for k in keys if k in source)
    return _share(kept) if kept else _EMPTY


def node_projection(
    annotation_keys: Iterable[str] = (),
    allocatable_keep: Callable[[str], bool] | None = None,
) -> Callable[[Mapping[str, Any]], SlimNode]:
    """Project Nodes keeping every label, the named annotations, and allocatable cpu, memory,
    pods plus extended resources (GPUs) — or what ``allocatable_keep`` selects."""
    keys = tuple(annotation_keys)

    def keep(resource: str) -> bool:
        if allocatable_keep is not None:
            return allocatable_keep(resource)
        return resource in NODE_ALLOCATABLE_KEEP or "/" in resource

    def project(raw: Mapping[str, Any]) -> SlimNode:
        meta = raw["metadata"]
        spec = raw.get("spec") or {}
        status = raw.get("status") or {}
        condition = next(
            (c for c in status.get("conditions") or () if c.get("type") == "Ready"), None
        )
        ready = condition is not None and condition.get("status") == "True"
        allocatable = status.get("allocatable") or {}
        return SlimNode(
            name=_intern(meta["name"]),
            labels=_subset(meta.get("labels"), None),
            annotations=_subset(meta.get("annotations"), keys),
            allocatable={_intern(k): str(v) for k, v in allocatable.items() if keep(k)},
            unschedulable=bool(spec.get("unschedulable")),
            ready=ready,
            deleting="deletionTimestamp" in meta,
            uid=str(meta.get("uid", "")),
            created_at=parse_time(meta.get("creationTimestamp")) or 0.0,
            ready_changed_at=(
                parse_time(condition.get("lastTransitionTime")) if condition is not None else None
            ),
            taints=tuple(_intern(str(t.get("key", ""))) for t in spec.get("taints") or ()),
            provider_id=str(spec.get("providerID") or ""),
        )

    return project


def _request(spec: Mapping[str, Any], resource: str, scale: int) -> int:
    """Effective request of a pod for ``resource`` (requests, else limits, per container; the
    larger of the containers' sum and the largest init container), times ``scale``."""

    def container(c: Mapping[str, Any]) -> Fraction:
        resources = c.get("resources") or {}
        value = (resources.get("requests") or {}).get(resource)
        if value is None:
            value = (resources.get("limits") or {}).get(resource)
        if value is None:
            return Fraction(0)
        try:
            return parse_quantity(value)
        except QuantityError:
            return Fraction(0)

    app = sum((container(c) for c in spec.get("containers") or ()), Fraction(0))
    init = max((container(c) for c in spec.get("initContainers") or ()), default=Fraction(0))
    amount = int(max(app, init) * scale)
    # Requests repeat (500m, 1, 4Gi, ...): one int object per value, not one per pod.
    return _ints.setdefault(amount, amount) if len(_ints) < _SHARED_MAX else amount


def _cpu_millis(spec: Mapping[str, Any]) -> int:
    """Effective CPU request of a pod, in millicores (requests, else limits, per container)."""
    return _request(spec, "cpu", 1000)


def _unschedulable(status: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "PodScheduled"
        and c.get("status") == "False"
        and c.get("reason") == "Unschedulable"
        for c in status.get("conditions") or ()
    )


def _pod_group(spec: Mapping[str, Any]) -> str:
    group = spec.get("schedulingGroup")
    name = group.get("podGroupName") if isinstance(group, Mapping) else None
    return _intern(name) if isinstance(name, str) else ""


def pod_projection(
    annotation_keys: Iterable[str] = (),
    label_keys: Iterable[str] = (),
    gpu_count: Callable[[Mapping[str, Any]], int] | None = None,
    gpu_resource: Callable[[Mapping[str, Any]], str] | None = None,
) -> Callable[[Mapping[str, Any]], SlimPod]:
    """Project Pods keeping the named annotations and labels, placement, phase and requests.

    ``gpu_count`` computes :attr:`SlimPod.gpus` from the raw pod; which resources count as GPUs
    is the caller's rule (this package knows none), and without one ``gpus`` is 0.
    """
    annotations = tuple(annotation_keys)
    labels = tuple(label_keys)

    def project(raw: Mapping[str, Any]) -> SlimPod:
        meta = raw["metadata"]
        spec = raw.get("spec") or {}
        status = raw.get("status") or {}
        owners = meta.get("ownerReferences") or ()
        controller = next((o for o in owners if o.get("controller")), owners[0] if owners else {})
        return SlimPod(
            namespace=_intern(meta.get("namespace", "")),
            name=meta["name"],
            node_name=_intern(spec.get("nodeName") or ""),
            phase=_intern(status.get("phase") or "Pending"),
            annotations=_subset(meta.get("annotations"), annotations),
            labels=_subset(meta.get("labels"), labels),
            cpu_millis=_cpu_millis(spec),
            gpus=gpu_count(raw) if gpu_count is not None else 0,
            deleting="deletionTimestamp" in meta,
            owner_kind=_intern(str(controller.get("kind", ""))),
            nominated_node=_intern(status.get("nominatedNodeName") or ""),
            gpu_resource=_intern(gpu_resource(raw)) if gpu_resource is not None else "",
            memory_bytes=_request(spec, "memory", 1),
            unschedulable=not spec.get("nodeName") and _unschedulable(status),
            pod_group=_pod_group(spec),
        )

    return project


def pods_by_node(pod: SlimPod) -> Iterable[str]:
    """Index: the node a pod is bound to."""
    return (pod.node_name,) if pod.node_name else ()


def pods_by_annotation_and_phase(key: str, default: str) -> Callable[[SlimPod], Iterable[str]]:
    """Index: ``<annotation value>/<phase>`` (e.g. ``performance/Pending``), so the pods of one
    class in one phase are a single lookup instead of a scan."""

    def index(pod: SlimPod) -> Iterable[str]:
        return (f"{pod.annotations.get(key, default)}/{pod.phase}",)

    return index


@dataclass(frozen=True, slots=True)
class LeaseView:
    """The part of a coordination.k8s.io Lease that says whether its holder is alive."""

    renewed_at: float | None
    """Epoch seconds of the last renewal."""
    duration_s: float | None


def parse_time(value: Any) -> float | None:
    """An RFC 3339 time of the API (``2026-12-01T02:00:00Z``, with or without fractions) as
    epoch seconds; None when missing or unreadable."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def lease_view(raw: Mapping[str, Any]) -> LeaseView:
    """A Lease's renewal time and duration; None for either one missing or unreadable."""
    spec = raw.get("spec") or {}
    at = parse_time(spec.get("renewTime"))
    duration = spec.get("leaseDurationSeconds")
    return LeaseView(at, float(duration) if isinstance(duration, int | float) else None)
