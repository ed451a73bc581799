"""The agent's view of the cluster: the nodes it serves, their NodeTwins and their NodeHardware.
A DaemonSet agent watches only its own node's two objects and the pods bound to its node
(:class:`OwnNodeCache`, field-selected: never a list of the fleet); the pool watches the nodes it
serves (:class:`AgentCache`).

Each collection is a slim projection of what the agent reads: a twin's spec (parsed once, a bad
one reported and treated as absent) and whether the manager still maintains it, plus what this
agent's field manager owns of the twin's status and of NodeHardware, for change-only writes. A
change of a twin's spec or of the served nodes queues that node; the agent's own writes and the
manager's status figures do not. For the DaemonSet, a pod arriving, leaving or changing class
on the node queues a pass too (the class of each GPU board's pod sets that board's cap).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import structlog
from pydantic import ValidationError

from joulie.agent.pod_devices import PodKey, pod_workload_class
from joulie.api import keys
from joulie.api.nodetwin import NodeTwinSpec
from joulie.core.twin import UNMANAGED_SOURCE
from joulie.kube.client import ApiError, KubeClient
from joulie.kube.informer import Handlers, Informer, InformerBundle
from joulie.kube.ownership import Observed, OwnedObject, observe, owned_projection
from joulie.kube.projections import SlimPod, pod_projection

log = structlog.get_logger("joulie.agent")

NODETWINS = f"/apis/{keys.API_VERSION}/{keys.NODE_TWIN_PLURAL}"
NODEHARDWARES = f"/apis/{keys.API_VERSION}/{keys.NODE_HARDWARE_PLURAL}"


@dataclass(frozen=True, slots=True)
class TwinIntent:
    """One NodeTwin as the agent reads it."""

    name: str
    spec: NodeTwinSpec | None
    """The parsed spec; None when it is missing or invalid (then the node's own settings are
    restored, as for a node that left the plan)."""
    problem: str | None
    managed: bool
    """False once the manager no longer plans the node (its status says ``unmanaged``)."""
    control: Observed
    """What this agent owns of the status (its ``controlStatus``)."""

    @property
    def stored_control(self) -> Mapping[str, Any]:
        return (self.control.fields.get("status") or {}).get("controlStatus") or {}

    def same_intent(self, other: TwinIntent) -> bool:
        return (self.spec, self.problem, self.managed) == (other.spec, other.problem, other.managed)


@dataclass(frozen=True, slots=True)
class PoolNode:
    """A node as the pool reads it: its name, and the KWOK annotation alone (whether KWOK
    fakes it). :class:`~joulie.kube.projections.SlimNode` keeps every label and allocatable
    besides: the bench inventory's 5,000 nodes held 5.0 MiB as SlimNodes, one shard's 2,500
    hold 0.3 MiB as PoolNodes (tracemalloc)."""

    name: str
    annotations: Mapping[str, str]


_NO_ANNOTATIONS: Mapping[str, str] = MappingProxyType({})
_KWOK_ANNOTATIONS: dict[str, Mapping[str, str]] = {}
"""The annotations each distinct KWOK value leaves, shared (in practice one: ``fake``)."""


def pool_node_projection(raw: Mapping[str, Any]) -> PoolNode:
    meta = raw["metadata"]
    value = (meta.get("annotations") or {}).get(keys.KWOK_NODE_ANNOTATION)
    if not isinstance(value, str):
        return PoolNode(name=sys.intern(meta["name"]), annotations=_NO_ANNOTATIONS)
    annotations = _KWOK_ANNOTATIONS.get(value)
    if annotations is None:
        annotations = MappingProxyType({keys.KWOK_NODE_ANNOTATION: value})
        if len(_KWOK_ANNOTATIONS) < 16:
            _KWOK_ANNOTATIONS[value] = annotations
    return PoolNode(name=sys.intern(meta["name"]), annotations=annotations)


def twin_projection(manager: str) -> Callable[[Mapping[str, Any]], TwinIntent]:
    def project(raw: Mapping[str, Any]) -> TwinIntent:
        spec: NodeTwinSpec | None = None
        problem: str | None = None
        try:
            spec = NodeTwinSpec.model_validate(raw.get("spec") or {})
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ".".join(map(str, first["loc"])) or "spec"
            problem = f"invalid spec ({exc.error_count()} error(s)); {where}: {first['msg']}"
        source = ((raw.get("status") or {}).get("powerMeasurement") or {}).get("source")
        return TwinIntent(
            name=raw["metadata"]["name"],
            spec=spec,
            problem=problem,
            managed=source != UNMANAGED_SOURCE,
            control=observe(raw, manager, "status", keep=("status",)),
        )

    return project


class AgentCache(InformerBundle):
    """``on_change(node)`` is called, synchronously, when something the agent acts on changed
    for that node."""

    def __init__(
        self,
        client: KubeClient,
        field_manager: str,
        node_selector: str,
        on_change: Callable[[str], None],
        *,
        serves: Callable[[str], bool] = lambda _node: True,
    ) -> None:
        """``serves``: whether a node is this replica's (its shard's). The three collections
        hold only those nodes' objects: each replica of two used to hold every node's
        NodeHardware, NodeTwin and Node, twice what it acts on."""
        self._on_change = on_change
        self.nodes: Informer[PoolNode] = Informer(
            client,
            "/api/v1/nodes",
            pool_node_projection,
            label_selector=node_selector or None,
            keep=lambda node: serves(node.name),
        )
        self.twins: Informer[TwinIntent] = Informer(
            client, NODETWINS, twin_projection(field_manager), keep=lambda twin: serves(twin.name)
        )
        self.hardware: Informer[OwnedObject] = Informer(
            client,
            NODEHARDWARES,
            owned_projection(field_manager),
            keep=lambda record: serves(record.name),
        )
        self.informers: list[Informer[Any]] = [self.nodes, self.twins, self.hardware]
        self.nodes.add_handlers(
            Handlers(
                on_add=lambda node: on_change(node.name),
                on_delete=lambda node: on_change(node.name),
            )
        )
        self.twins.add_handlers(
            Handlers(
                on_add=self._twin_added,
                on_update=self._twin_updated,
                on_delete=lambda twin: on_change(twin.name),
            )
        )

    def _twin_added(self, twin: TwinIntent) -> None:
        _report(None, twin)
        self._on_change(twin.name)

    def _twin_updated(self, old: TwinIntent, new: TwinIntent) -> None:
        _report(old, new)
        if not new.same_intent(old):
            self._on_change(new.name)


class OwnNodeCache(InformerBundle):
    """The NodeTwin and NodeHardware named after one node, and the pods bound to it.
    ``on_change()`` is called when the twin's intent changes (its spec, its validity, whether it
    is still planned) and when a pod comes, goes, or changes class or phase."""

    def __init__(
        self,
        client: KubeClient,
        field_manager: str,
        node: str,
        on_change: Callable[[], None],
        *,
        idle_timeout: float = 90.0,
    ) -> None:
        self.node = node
        self._on_change = on_change
        self._client = client
        self._project = twin_projection(field_manager)
        own = f"metadata.name={node}"
        self.twins: Informer[TwinIntent] = Informer(
            client,
            NODETWINS,
            self._project,
            field_selector=own,
            idle_timeout=idle_timeout,
        )
        self.hardware: Informer[OwnedObject] = Informer(
            client, NODEHARDWARES, owned_projection(field_manager), field_selector=own
        )
        # Of the annotations only the class is kept: another annotation's change is then no
        # update at all.
        self.pods: Informer[SlimPod] = Informer(
            client,
            "/api/v1/pods",
            pod_projection(annotation_keys=(keys.WORKLOAD_CLASS_ANNOTATION,)),
            field_selector=f"spec.nodeName={node}",
            idle_timeout=idle_timeout,
        )
        self.informers: list[Informer[Any]] = [self.twins, self.hardware, self.pods]
        self.twins.add_handlers(
            Handlers(
                on_add=self._twin_added,
                on_update=self._twin_updated,
                on_delete=lambda _: on_change(),
            )
        )
        self.pods.add_handlers(
            Handlers(
                on_add=lambda _: on_change(),
                on_update=self._pod_updated,
                on_delete=lambda _: on_change(),
            )
        )

    @property
    def twin(self) -> TwinIntent | None:
        return self.twins.get(self.node)

    def pod_class(self, pod: PodKey) -> str | None:
        """The workload class of a pod on this node; None when the cache does not hold it."""
        namespace, name = pod
        slim = self.pods.get(f"{namespace}/{name}")
        return pod_workload_class(slim.annotations) if slim is not None else None

    def _pod_updated(self, old: SlimPod, new: SlimPod) -> None:
        # A pod's devices are allocated when the kubelet admits it: by the time it runs, the
        # kubelet's answer holds them.
        if (pod_workload_class(old.annotations), old.phase) != (
            pod_workload_class(new.annotations),
            new.phase,
        ):
            self._on_change()

    async def read_twin(self) -> TwinIntent | None:
        """The twin as the API server holds it now (one GET), not as the watch last said."""
        try:
            raw = await self._client.request("GET", f"{NODETWINS}/{self.node}")
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return self._project(raw)

    def _twin_added(self, twin: TwinIntent) -> None:
        _report(None, twin)
        self._on_change()

    def _twin_updated(self, old: TwinIntent, new: TwinIntent) -> None:
        _report(old, new)
        if not new.same_intent(old):
            self._on_change()


def _report(old: TwinIntent | None, new: TwinIntent) -> None:
    """One warning when a twin's spec becomes unusable (or unusable differently)."""
    if new.problem is not None and (old is None or old.problem != new.problem):
        log.warning(
            "NodeTwin spec unusable; the node's own settings are restored until it is fixed",
            node=new.name,
            problem=new.problem,
        )
