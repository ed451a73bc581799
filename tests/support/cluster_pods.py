"""Pods in a namespace of the local cluster, for tests that watch where a scheduler puts them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hack.cluster.runner import LocalCluster
from tests.support.waiting import wait_until

__all__ = ["create_pods", "placed", "pod_namespace"]


@contextmanager
def pod_namespace(cluster: LocalCluster, prefix: str) -> Iterator[str]:
    """A fresh namespace for one test's pods, deleted afterwards and waited for: its pods are
    gone before the next test counts where pods landed."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    with cluster.api() as api:
        api.post("/api/v1/namespaces", json={"metadata": {"name": name}}).raise_for_status()
    try:
        yield name
    finally:
        with cluster.api() as api:
            api.delete(f"/api/v1/namespaces/{name}", params={"gracePeriodSeconds": "0"})
        wait_until(lambda: not placed(cluster, name), 60, f"the pods of {name} to go")


def create_pods(cluster: LocalCluster, namespace: str, pods: list[dict[str, Any]]) -> None:
    with cluster.api() as api:
        for manifest in pods:
            api.post(f"/api/v1/namespaces/{namespace}/pods", json=manifest).raise_for_status()


def placed(cluster: LocalCluster, namespace: str) -> dict[str, str]:
    """Pod name -> node ("" while unbound), for every pod of the namespace."""
    with cluster.api() as api:
        items = api.get(f"/api/v1/namespaces/{namespace}/pods").json().get("items") or []
    return {p["metadata"]["name"]: p["spec"].get("nodeName") or "" for p in items}
