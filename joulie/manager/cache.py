"""The manager's view of the cluster: informers over Nodes, Pods, NodeHardware and NodeTwins, the
indexes a reconcile looks facts up in, and the triggers that decide which change starts one.

Every collection is kept as a slim frozen projection of the fields some decision reads, so an
update that touches nothing else never reaches a handler, and a reconcile compares cache objects
by identity. A trigger fires only when a field the plan, an intent or the twin reads has changed:
an agent's NodeHardware heartbeat, a standard pod starting, or our own label write do not.

NodeHardware labelled as written for a simulated node (``joulie.io/simulated: "true"``, what the
pool-mode agent writes) is believed only for a node KWOK fakes: for a real node it is ignored,
with one warning, so a pool agent cannot stand in for a real node's own agent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from joulie.api import keys
from joulie.api.gpu import pod_gpu_count, pod_gpu_resource
from joulie.core.intents import is_active_performance_pod, is_running_pod, uses_multi_gpu
from joulie.kube.client import KubeClient
from joulie.kube.informer import Handlers, Informer, InformerBundle
from joulie.kube.ownership import OwnedObject, owned_projection
from joulie.kube.projections import SlimNode, SlimPod, node_projection, pod_projection
from joulie.manager.hardware_facts import HardwareFacts, hardware_facts
from joulie.manager.metrics import TRIGGERS

log = structlog.get_logger("joulie.manager")

NODETWINS = f"/apis/{keys.API_VERSION}/{keys.NODE_TWIN_PLURAL}"
NODEHARDWARES = f"/apis/{keys.API_VERSION}/{keys.NODE_HARDWARE_PLURAL}"
PERFORMANCE = "performance"

_PERFORMANCE_PHASE = "performance-phase"
_ACTIVE_PERFORMANCE = "active-performance"
_MULTI_GPU = "multi-gpu"
_NODE = "node"
_WORKLOAD_NODE = "workload-node"
_PENDING = "pending"

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
MIRROR_NAMESPACES = frozenset({"kube-system"})
"""Where a mirror pod counts as node-local system work: kubeadm and the usual installers put
the static control-plane and node pods there, and only cluster administrators create pods in
it. A tenant could create a pod with the mirror annotation and a Node owner reference in its
own namespace and so get a busy node drained and powered off."""
_PLANNING_ANNOTATIONS = (
    keys.HW_CPU_MODEL_ANNOTATION,
    keys.HW_GPU_MODEL_ANNOTATION,
    keys.KWOK_NODE_ANNOTATION,
)
"""Node annotations a plan or an intent reads; the others kept (the lifecycle's) start none."""
LIFECYCLE_NODE_ANNOTATIONS = (
    keys.LAUNCHED_AT_ANNOTATION,
    keys.IDLE_SINCE_ANNOTATION,
    keys.LIFECYCLE_PHASE_ANNOTATION,
    keys.LIFECYCLE_SINCE_ANNOTATION,
    keys.LIFECYCLE_CORDONED_ANNOTATION,
    keys.LIFECYCLE_RETRY_AFTER_ANNOTATION,
    keys.LIFECYCLE_FAILURES_ANNOTATION,
    keys.LIFECYCLE_EXCLUDE_ANNOTATION,
    "cluster-autoscaler.kubernetes.io/scale-down-disabled",
    "karpenter.sh/do-not-disrupt",
    "cluster.x-k8s.io/machine",
    "cluster.x-k8s.io/cluster-namespace",
)
"""Node annotations the node lifecycle reads."""


def simulated_node(node: SlimNode) -> bool:
    """Whether KWOK fakes this node (it picks its nodes by this annotation)."""
    return keys.kwok_node(node.annotations)


def _pod_class(pod: SlimPod) -> str | None:
    return pod.annotations.get(keys.WORKLOAD_CLASS_ANNOTATION)


def _performance_phase(pod: SlimPod) -> tuple[str, ...]:
    """Index: the phase of each performance pod, so P (performance pods running or pending) is
    two look-ups; other pods are not indexed (at 100,000 pods their sets cost 4 MiB)."""
    return (pod.phase,) if _pod_class(pod) == PERFORMANCE else ()


def _active_performance_node(pod: SlimPod) -> tuple[str, ...]:
    """Index: the node of a pod that holds back a downgrade (the guard)."""
    if pod.node_name and is_active_performance_pod(pod.phase, pod.deleting, _pod_class(pod)):
        return (pod.node_name,)
    return ()


def _multi_gpu_node(pod: SlimPod) -> tuple[str, ...]:
    """Index: the node of a running pod whose GPU count the sustained-preset rule counts."""
    if pod.node_name and is_running_pod(pod.phase, pod.deleting) and uses_multi_gpu(pod.gpus):
        return (pod.node_name,)
    return ()


def is_mirror_pod(pod: SlimPod) -> bool:
    """A static pod's mirror as the kubelet makes it: the mirror annotation, its Node as the
    controlling owner, in a namespace of :data:`MIRROR_NAMESPACES`. Anyone who may create pods
    can write the annotation and a Node owner reference, so neither alone proves anything."""
    return (
        MIRROR_ANNOTATION in pod.annotations
        and pod.owner_kind == "Node"
        and pod.namespace in MIRROR_NAMESPACES
    )


def is_workload(pod: SlimPod) -> bool:
    """A pod that keeps its node from being drained and powered off: anything not finished that
    is not provably node-local system work, which is a DaemonSet's pod (those run on every
    node and never block a removal) or a static pod's mirror (:func:`is_mirror_pod`). A pod
    that merely looks like a mirror counts as work."""
    return (
        pod.phase not in ("Succeeded", "Failed")
        and pod.owner_kind != "DaemonSet"
        and not is_mirror_pod(pod)
    )


def workload_nodes(pod: SlimPod) -> tuple[str, ...]:
    """Index: the nodes a workload pod makes busy: where it is bound, and where preemption is
    making room for it."""
    if not is_workload(pod):
        return ()
    if pod.nominated_node and pod.nominated_node != pod.node_name:
        return tuple(n for n in (pod.node_name, pod.nominated_node) if n)
    return (pod.node_name,) if pod.node_name else ()


def _pending(pod: SlimPod) -> tuple[str, ...]:
    if (
        not pod.node_name
        and pod.phase == "Pending"
        and not pod.deleting
        and pod.owner_kind != "DaemonSet"
    ):
        return (_PENDING,)
    return ()


def _planning_annotations(node: SlimNode) -> tuple[str | None, ...]:
    return tuple(node.annotations.get(key) for key in _PLANNING_ANNOTATIONS)


def _hardware_node(facts: HardwareFacts) -> tuple[str, ...]:
    return (facts.node,)


def _planning_labels(node: SlimNode) -> dict[str, str]:
    """All labels but the one this role writes, so our own label patch starts no reconcile."""
    return {k: v for k, v in node.labels.items() if k != keys.POWER_PROFILE_LABEL}


class ClusterCache(InformerBundle):
    """The informers, their indexes, and the triggers (``on_change`` is called, synchronously,
    when something a decision reads has changed)."""

    def __init__(self, client: KubeClient, field_manager: str, on_change: Callable[[], None]):
        self._on_change = on_change
        self.nodes: Informer[SlimNode] = Informer(
            client,
            "/api/v1/nodes",
            node_projection(annotation_keys=[*_PLANNING_ANNOTATIONS, *LIFECYCLE_NODE_ANNOTATIONS]),
        )
        self.pods: Informer[SlimPod] = Informer(
            client,
            "/api/v1/pods",
            pod_projection(
                annotation_keys=[keys.WORKLOAD_CLASS_ANNOTATION, MIRROR_ANNOTATION],
                gpu_count=pod_gpu_count,
                gpu_resource=pod_gpu_resource,
            ),
            indexers={
                _PERFORMANCE_PHASE: _performance_phase,
                # Per-node facts the intents need, kept current by the informer so that a
                # reconcile looks them up instead of walking every node's pods.
                _ACTIVE_PERFORMANCE: _active_performance_node,
                _MULTI_GPU: _multi_gpu_node,
                # The node lifecycle's facts: which nodes have work, and what waits for a node.
                _WORKLOAD_NODE: workload_nodes,
                _PENDING: _pending,
            },
        )
        self.hardware: Informer[HardwareFacts] = Informer(
            client, NODEHARDWARES, hardware_facts, indexers={_NODE: _hardware_node}
        )
        self.twins: Informer[OwnedObject] = Informer(
            client, NODETWINS, owned_projection(field_manager)
        )
        self.informers: list[Informer[Any]] = [self.nodes, self.pods, self.hardware, self.twins]
        self._distrusted: set[str] = set()
        """NodeHardware already warned about as simulated facts for a real node."""
        self.nodes.add_handlers(
            Handlers(
                on_add=lambda _: self._fire("node"),
                on_update=self._node_updated,
                on_delete=lambda _: self._fire("node"),
            )
        )
        self.pods.add_handlers(
            Handlers(on_add=self._pod_seen, on_update=self._pod_updated, on_delete=self._pod_seen)
        )
        self.hardware.add_handlers(
            Handlers(
                on_add=self._hardware_added,
                on_update=self._hardware_updated,
                on_delete=self._hardware_deleted,
            )
        )

    # --- look-ups ---------------------------------------------------------------------------

    def performance_pods(self) -> int:
        """P: running and pending performance pods cluster-wide, not terminating."""
        return sum(
            1
            for phase in ("Running", "Pending")
            for pod in self.pods.by_index(_PERFORMANCE_PHASE, phase)
            if not pod.deleting
        )

    def active_performance_pods(self, node: str) -> int:
        return self.pods.index_count(_ACTIVE_PERFORMANCE, node)

    def multi_gpu_pods(self, node: str) -> list[SlimPod]:
        # Most nodes have none: a count costs no list.
        if not self.pods.index_count(_MULTI_GPU, node):
            return []
        return self.pods.by_index(_MULTI_GPU, node)

    def workload_pods(self, node: str) -> list[SlimPod]:
        """Pods that make ``node`` busy (bound or nominated to it; see :func:`is_workload`)."""
        if not self.pods.index_count(_WORKLOAD_NODE, node):
            return []
        return self.pods.by_index(_WORKLOAD_NODE, node)

    def workload_count(self, node: str) -> int:
        """How many pods make ``node`` busy (a count costs no list)."""
        return self.pods.index_count(_WORKLOAD_NODE, node)

    def pending_pods(self) -> list[SlimPod]:
        """Pods waiting for a node (unbound, Pending, not DaemonSet pods)."""
        return self.pods.by_index(_PENDING, _PENDING)

    def hardware_of(self, node: str) -> HardwareFacts | None:
        """The NodeHardware that describes ``node``, of those its facts may come from."""
        found = self.hardware.by_index(_NODE, node)
        if not found:
            return None
        if not any(f.simulated for f in found):
            return found[0]
        described = self.nodes.get(node)
        if described is not None and simulated_node(described):
            if self._distrusted:
                self._distrusted.difference_update(f.name for f in found)
            return found[0]
        for facts in found:
            if facts.simulated and facts.name not in self._distrusted:
                self._distrusted.add(facts.name)
                log.warning(
                    "NodeHardware labelled simulated describes a node KWOK does not fake; "
                    "its facts are ignored",
                    node=node,
                    nodehardware=facts.name,
                )
        return next((f for f in found if not f.simulated), None)

    def on_node_touched(self, listener: Callable[[str], None]) -> None:
        """Call ``listener`` with the name of every node whose workload pods, Node or
        NodeHardware facts may have changed (the energy accountant rebuilds only their plans);
        given every node of the current caches first."""

        def pod(*pods: SlimPod) -> None:
            for p in pods:
                if p.node_name:
                    listener(p.node_name)
                if p.nominated_node:
                    listener(p.nominated_node)

        def hardware_updated(old: HardwareFacts, new: HardwareFacts) -> None:
            if not new.same_for_planning(old):
                listener(old.node)
                listener(new.node)

        self.pods.add_handlers(Handlers(on_add=pod, on_update=pod, on_delete=pod))
        self.nodes.add_handlers(
            Handlers(
                on_add=lambda n: listener(n.name),
                on_update=lambda _, n: listener(n.name),
                on_delete=lambda n: listener(n.name),
            )
        )
        self.hardware.add_handlers(
            Handlers(
                on_add=lambda f: listener(f.node),
                on_update=hardware_updated,
                on_delete=lambda f: listener(f.node),
            )
        )

    # --- triggers ---------------------------------------------------------------------------

    def _fire(self, source: str) -> None:
        TRIGGERS.labels(source).inc()
        self._on_change()

    def _node_updated(self, old: SlimNode, new: SlimNode) -> None:
        if (
            _planning_labels(old) != _planning_labels(new)
            or _planning_annotations(old) != _planning_annotations(new)
            or old.unschedulable != new.unschedulable
            or old.deleting != new.deleting
            or old.allocatable != new.allocatable
        ):
            self._fire("node")

    def _pod_seen(self, pod: SlimPod) -> None:
        if _pod_class(pod) == PERFORMANCE or _multi_gpu_node(pod):
            self._fire("pod")

    def _pod_updated(self, old: SlimPod, new: SlimPod) -> None:
        if (
            PERFORMANCE in (_pod_class(old), _pod_class(new))
            and (
                (old.phase, old.deleting, old.node_name) != (new.phase, new.deleting, new.node_name)
                or _pod_class(old) != _pod_class(new)
            )
        ) or _multi_gpu_node(old) != _multi_gpu_node(new):
            self._fire("pod")

    def _hardware_added(self, facts: HardwareFacts) -> None:
        _report_problem(None, facts)
        self._fire("nodehardware")

    def _hardware_updated(self, old: HardwareFacts, new: HardwareFacts) -> None:
        _report_problem(old, new)
        if not new.simulated:
            self._distrusted.discard(new.name)
        if not new.same_for_planning(old):
            self._fire("nodehardware")

    def _hardware_deleted(self, facts: HardwareFacts) -> None:
        self._distrusted.discard(facts.name)
        self._fire("nodehardware")


def _report_problem(old: HardwareFacts | None, new: HardwareFacts) -> None:
    """One warning when a node's NodeHardware becomes unusable (or unusable differently)."""
    if new.problem is not None and (old is None or old.problem != new.problem):
        log.warning("NodeHardware unusable", node=new.node, problem=new.problem)
