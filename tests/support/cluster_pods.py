"""Pods in a namespace of the local cluster, for tests that watch where a scheduler puts them."""

from __future__ import annotations

from typing import Any

from hack.cluster.runner import LocalCluster

__all__ = ["create_pods", "placed"]


def create_pods(cluster: LocalCluster, namespace: str, pods: list[dict[str, Any]]) -> None:
    with cluster.api() as api:
        for manifest in pods:
            api.post(f"/api/v1/namespaces/{namespace}/pods", json=manifest).raise_for_status()


def placed(cluster: LocalCluster, namespace: str) -> dict[str, str]:
    """Pod name -> node ("" while unbound), for every pod of the namespace."""
    with cluster.api() as api:
        items = api.get(f"/api/v1/namespaces/{namespace}/pods").json().get("items") or []
    return {p["metadata"]["name"]: p["spec"].get("nodeName") or "" for p in items}
