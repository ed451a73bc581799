"""The workload class of every running pod, for the pool agent's per-board GPU caps.

The pool serves thousands of nodes, so it cannot field-select the pods of one node as the
DaemonSet does: it watches running pods (``status.phase=Running``, the pods the simulator gives
boards to) and holds only those that ask for GPUs on a node it serves, with where each runs and
its class (read as everywhere in Joulie, :func:`joulie.agent.pod_devices.pod_workload_class`).
Holding every running pod cost each replica about 42 MiB at 100,000 pods (peak RSS 168 -> 210
MiB in ``bench.agent_pool``). A pod arriving, leaving or changing class on a node calls
``on_change(node)``; nothing else about a pod does.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from joulie.agent.pod_devices import PodKey, is_gpu_resource, pod_workload_class
from joulie.kube.client import KubeClient
from joulie.kube.informer import Handlers, Informer, InformerBundle

__all__ = ["PodClass", "PoolPods", "pod_class_projection"]


@dataclass(frozen=True, slots=True)
class PodClass:
    node: str
    workload_class: str


def pod_class_projection(raw: Mapping[str, Any]) -> PodClass:
    """Where the pod runs and its class; a pod asking for no GPU is placed on no node (""): no
    board follows it."""
    meta = raw["metadata"]
    spec = raw.get("spec") or {}
    node = str(spec.get("nodeName") or "") if _asks_for_gpus(spec) else ""
    return PodClass(
        # One copy of each node's name however many pods run there.
        node=sys.intern(node),
        workload_class=pod_workload_class(meta.get("annotations") or {}),
    )


def _asks_for_gpus(spec: Mapping[str, Any]) -> bool:
    for container in spec.get("containers") or ():
        resources = (container or {}).get("resources") or {}
        for amounts in (resources.get("limits"), resources.get("requests")):
            if isinstance(amounts, Mapping) and any(map(is_gpu_resource, amounts)):
                return True
    return False


class PoolPods(InformerBundle):
    def __init__(
        self,
        client: KubeClient,
        on_change: Callable[[str], None],
        *,
        serves: Callable[[str], bool] = lambda _node: True,
        idle_timeout: float = 90.0,
    ) -> None:
        """``serves``: whether a node is this replica's (its shard's)."""
        self._on_change = on_change
        self.pods: Informer[PodClass] = Informer(
            client,
            "/api/v1/pods",
            pod_class_projection,
            field_selector="status.phase=Running",
            keep=lambda pod: bool(pod.node) and serves(pod.node),
            idle_timeout=idle_timeout,
        )
        super().__init__(self.pods)
        self.pods.add_handlers(
            Handlers(on_add=self._touched, on_update=self._updated, on_delete=self._touched)
        )

    def pod_class(self, pod: PodKey) -> str | None:
        """A running pod's class; None for a pod this cache does not hold (yet)."""
        namespace, name = pod
        found = self.pods.get(f"{namespace}/{name}")
        return found.workload_class if found is not None else None

    def _touched(self, pod: PodClass) -> None:
        if pod.node:
            self._on_change(pod.node)

    def _updated(self, old: PodClass, new: PodClass) -> None:
        if old != new:
            self._touched(old)
            if new.node != old.node:
                self._touched(new)
