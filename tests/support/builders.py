"""Builders for the objects tests hand to Joulie: Nodes, Pods, NodeHardware and NodeTwins (as a
client sends them to the API server or a watch brings them back), inventory groups and simulator
workloads.

Each builds a small valid object and takes keyword overrides. A Kubernetes field the caller does
not give is left out, as a client that does not set it leaves it out: a test states the fields it
is about and nothing else, and an informer's projection reads an absent field as empty.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from hack.cluster.nodes import node_manifest
from joulie.api import keys
from joulie.api.inventory import NodeGroup
from joulie.sim.trace import Workload

GPU_HOST_CPU = "AMD EPYC 9654 96-Core Processor"
"""The host CPU of the inventories' GPU nodes (2 sockets, 192 cores, 1536 GiB)."""
WORK_IMAGE = "example.com/work:1"
"""An image no kubelet pulls: KWOK nodes run nothing, and a pod bound nowhere never starts."""


def metadata(
    name: str,
    *,
    namespace: str | None = None,
    rv: int | str | None = None,
    uid: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    owner: str | None = None,
) -> dict[str, Any]:
    """``metadata`` with ``name`` and the fields given; ``owner`` is the kind of the controller
    that owns the object (a Pod's ReplicaSet, a mirror pod's Node)."""
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    if rv is not None:
        meta["resourceVersion"] = str(rv)
    if uid is not None:
        meta["uid"] = uid
    if labels is not None:
        meta["labels"] = dict(labels)
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    if owner is not None:
        meta["ownerReferences"] = [{"kind": owner, "controller": True}]
    return meta


# --- Nodes --------------------------------------------------------------------------------------


def node(
    name: str = "n1",
    *,
    rv: int | str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    allocatable: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A Node by name alone, plus the fields given. The API server accepts a Node with nothing
    but a name (it then has no capacity and is never Ready); a watch event's Node always has a
    resourceVersion, a created one must not."""
    body: dict[str, Any] = {
        "metadata": metadata(name, rv=rv, labels=labels, annotations=annotations)
    }
    if allocatable is not None:
        body["status"] = {"allocatable": dict(allocatable)}
    return body


def kwok_node(
    name: str,
    group: NodeGroup,
    *,
    labels: Mapping[str, str] | None = None,
    managed: bool = True,
) -> dict[str, Any]:
    """A KWOK Node as ``hack.cluster`` makes one for an inventory group (its hardware as labels,
    annotations and capacity, Joulie's managed label unless ``managed`` is False), plus
    ``labels`` (a test's own selector label, a rack)."""
    manifest = node_manifest(name, group, managed=managed)
    manifest["metadata"]["labels"].update(labels or {})
    return manifest


def kwok_nodes(
    prefix: str, groups: Iterable[NodeGroup], per_group: int, *, labels: Mapping[str, str]
) -> list[dict[str, Any]]:
    """``per_group`` KWOK Nodes of each group, group by group, named ``{prefix}-{group}-{i}``
    and carrying ``labels`` (a label of the test's own, so that a role selecting it sees these
    nodes and no other test's)."""
    return [
        kwok_node(f"{prefix}-{group.label}-{i}", group, labels=labels)
        for group in groups
        for i in range(per_group)
    ]


# --- Pods ---------------------------------------------------------------------------------------


def container(
    requests: Mapping[str, Any] | None = None,
    limits: Mapping[str, Any] | None = None,
    *,
    name: str = "c",
    image: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A container asking ``requests`` and ``limits`` (left out when not given; ``resources``
    itself is always there, as the API server returns it)."""
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = dict(requests)
    if limits is not None:
        resources["limits"] = dict(limits)
    body: dict[str, Any] = {"name": name}
    if image is not None:
        body["image"] = image
    return {**body, "resources": resources, **extra}


def pod(
    name: str = "p",
    *,
    namespace: str | None = None,
    node_name: str | None = None,
    phase: str | None = None,
    containers: list[dict[str, Any]] | None = None,
    annotations: Mapping[str, str] | None = None,
    rv: int | str | None = None,
    uid: str | None = None,
    owner: str | None = None,
    spec: Mapping[str, Any] | None = None,
    status: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A Pod as a watch brings it: ``metadata`` (see :func:`metadata`), ``spec`` with
    ``nodeName`` and ``containers`` where given plus ``spec``'s fields (``nodeSelector``,
    ``initContainers`` ...), and ``status`` (``phase`` plus ``status``'s fields) where given."""
    body: dict[str, Any] = {
        "metadata": metadata(
            name, namespace=namespace, rv=rv, uid=uid, annotations=annotations, owner=owner
        )
    }
    pod_spec: dict[str, Any] = {}
    if node_name is not None:
        pod_spec["nodeName"] = node_name
    if containers is not None:
        pod_spec["containers"] = containers
    body["spec"] = {**pod_spec, **(spec or {})}
    if phase is not None or status is not None:
        body["status"] = {**({"phase": phase} if phase is not None else {}), **(status or {})}
    return body


def pod_manifest(
    name: str,
    *,
    containers: list[dict[str, Any]] | None = None,
    node_name: str | None = None,
    annotations: Mapping[str, str] | None = None,
    spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A Pod to create (``apiVersion`` and ``kind`` set, no namespace: the path names it); by
    default one container ``work`` of :data:`WORK_IMAGE` asking nothing."""
    chosen = containers if containers is not None else [{"name": "work", "image": WORK_IMAGE}]
    body = pod(name, node_name=node_name, containers=chosen, annotations=annotations, spec=spec)
    return {"apiVersion": "v1", "kind": "Pod", **body}


# --- NodeHardware and NodeTwin ------------------------------------------------------------------


def joulie_object(
    kind: str, name: str, *, labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """What identifies a Joulie object in an apply: ``apiVersion``, ``kind`` and ``metadata``."""
    return {
        "apiVersion": keys.API_VERSION,
        "kind": kind,
        "metadata": metadata(name, labels=labels),
    }


def nodehardware(
    name: str,
    *,
    node_name: str | None = None,
    labels: Mapping[str, str] | None = None,
    rv: int | str | None = None,
    status: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The NodeHardware of node ``name`` as its agent writes it: named after the node, its spec
    naming the node it describes (``node_name``, to claim another), ``status`` where given."""
    body = joulie_object(keys.NODE_HARDWARE_KIND, name, labels=labels)
    if rv is not None:
        body["metadata"]["resourceVersion"] = str(rv)
    body["spec"] = {"nodeName": node_name if node_name is not None else name}
    if status is not None:
        body["status"] = dict(status)
    return body


def nodetwin(
    name: str,
    profile: str = "eco",
    *,
    labels: Mapping[str, str] | None = None,
    spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The NodeTwin of node ``name`` as the manager creates it: ``profile`` (eco unless given,
    as a node starts) plus ``spec``'s fields (caps, governors)."""
    body = joulie_object(keys.NODE_TWIN_KIND, name, labels=labels)
    body["spec"] = {"nodeName": name, "profile": profile, **(spec or {})}
    return body


# --- Inventory groups and workloads -------------------------------------------------------------


def inventory_group(
    prefix: str = "cpu",
    *,
    node_name: str | None = None,
    replicas: int = 1,
    cpu: str = GPU_HOST_CPU,
    cpu_sockets: int = 2,
    cpu_cores: int = 192,
    memory_gib: float = 1536,
    gpus: int = 0,
    product: str = "",
    vendor: str | None = None,
) -> dict[str, Any]:
    """One group of an inventory as its YAML gives it: ``replicas`` nodes named
    ``{prefix}-{i}`` (or the one node ``node_name``), by default a dual EPYC 9654 host without
    GPUs; with ``gpus``, ``product`` boards of ``vendor`` (NVIDIA unless given)."""
    group: dict[str, Any] = (
        {"node_name": node_name}
        if node_name is not None
        else {"node_name_prefix": prefix, "replicas": replicas}
    )
    return {
        **group,
        "vendor": vendor if vendor is not None else ("nvidia" if gpus else "none"),
        "product": product,
        "cpu": cpu,
        "cpu_sockets": cpu_sockets,
        "cpu_cores": cpu_cores,
        "memory_gib": memory_gib,
        "gpu_count": gpus,
    }


def node_group(prefix: str = "cpu", **overrides: Any) -> NodeGroup:
    """:func:`inventory_group` as the parsed :class:`NodeGroup`."""
    return NodeGroup.model_validate(inventory_group(prefix, **overrides))


def workload(
    id: str = "w",
    *,
    submit_s: float = 0.0,
    work_s: float = 3600.0,
    gpus: int = 0,
    gpu_resource: str | None = None,
    **overrides: Any,
) -> Workload:
    """A lone pod submitted at the start that runs an hour at full speed, with the Workload
    defaults otherwise (1 CPU, 1 GiB); with ``gpus``, whole NVIDIA GPUs unless ``gpu_resource``
    names another resource."""
    if gpus and gpu_resource is None:
        gpu_resource = "nvidia.com/gpu"
    return Workload(
        id=id, submit_s=submit_s, work_s=work_s, gpus=gpus, gpu_resource=gpu_resource, **overrides
    )


def inventory_yaml(*groups: Mapping[str, Any]) -> str:
    """An inventory file's text with ``groups`` (see :func:`inventory_group`)."""
    return yaml.safe_dump({"nodes": [dict(g) for g in groups]}, sort_keys=False)
