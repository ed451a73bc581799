"""The workload class of every running pod, for the pool agent's per-board GPU caps.

The pool serves thousands of nodes, so it cannot field-select the pods of one node as the
DaemonSet does: it watches running pods (``status.phase=Running``, the pods the simulator gives
boards to) and keeps of each only where it runs and its class (read as everywhere in Joulie,
:func:`joulie.agent.pod_devices.pod_workload_class`). A pod arriving, leaving or changing class
on a node calls ``on_change(node)``; nothing else about a pod does.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from joulie.agent.pod_devices import PodKey, pod_workload_class
from joulie.kube.client import KubeClient
from joulie.kube.informer import Handlers, Informer, InformerBundle

__all__ = ["PodClass", "PoolPods", "pod_class_projection"]


@dataclass(frozen=True, slots=True)
class PodClass:
    node: str
    workload_class: str


def pod_class_projection(raw: Mapping[str, Any]) -> PodClass:
    meta = raw["metadata"]
    spec = raw.get("spec") or {}
    return PodClass(
        # One copy of each node's name however many pods run there.
        node=sys.intern(str(spec.get("nodeName") or "")),
        workload_class=pod_workload_class(meta.get("annotations") or {}),
    )


class PoolPods(InformerBundle):
    def __init__(
        self, client: KubeClient, on_change: Callable[[str], None], *, idle_timeout: float = 90.0
    ) -> None:
        self._on_change = on_change
        self.pods: Informer[PodClass] = Informer(
            client,
            "/api/v1/pods",
            pod_class_projection,
            field_selector="status.phase=Running",
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
