"""Nodes for the node lifecycle's tests on the local cluster, and how they judge a Node."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from hack.cluster.runner import LocalCluster
from joulie.api import keys
from joulie.api.inventory import load_inventory
from joulie.manager.lifecycle.actuator_kwok import RECORD_LABEL, RECORD_VALUE
from tests.support.builders import container, kwok_node, pod_manifest

INVENTORY = Path(__file__).resolve().parents[1] / "data/inventories/02-cluster-nodes.yaml"
KWOK_RBAC = Path(__file__).resolve().parents[2] / "manifests/kwok/manager-lifecycle-kwok.yaml"
"""The grant the KWOK actuator needs (to delete Nodes)."""
E2E_LABEL = "joulie.io/e2e"
LONG_AGO = "2026-01-01T00:00:00Z"


def lifecycle_nodes(case: str, count: int, *, kwok: bool = True) -> list[dict[str, Any]]:
    """Nodes launched long ago (past their boot grace), labelled for ``case`` only, so a manager
    selecting that label sees them and no other test's. ``kwok`` False: a machine that is
    registered but whose kubelet never reports (never Ready, no Lease)."""
    group = load_inventory(INVENTORY).nodes[0]
    suffix = uuid.uuid4().hex[:5]
    nodes = []
    for i in range(count):
        node = kwok_node(f"lc-{case}-{suffix}-{i}", group, labels={E2E_LABEL: case}, managed=False)
        annotations = node["metadata"]["annotations"]
        annotations[keys.LAUNCHED_AT_ANNOTATION] = LONG_AGO
        if not kwok:
            del annotations[keys.KWOK_NODE_ANNOTATION]
        nodes.append(node)
    return nodes


def forget_kwok_records(cluster: LocalCluster) -> None:
    """Delete the records the KWOK actuator keeps of the Nodes it powered off, so that no later
    test's manager could power on another test's node."""
    cluster.kubectl(
        "delete",
        "configmaps",
        "--namespace=joulie-system",
        f"--selector={RECORD_LABEL}={RECORD_VALUE}",
        "--ignore-not-found",
    )


def phase(node: dict[str, Any] | None) -> str | None:
    """The lifecycle phase on the Node (None without one, or without the Node)."""
    if node is None:
        return None
    return (node["metadata"].get("annotations") or {}).get(keys.LIFECYCLE_PHASE_ANNOTATION)


def tainted(node: dict[str, Any]) -> bool:
    return any(t["key"] == keys.DRAINING_TAINT for t in node["spec"].get("taints") or ())


def untouched(node: dict[str, Any] | None) -> bool:
    """The node is there, schedulable, without our taint or any phase or cordon of ours."""
    if node is None:
        return False
    annotations = node["metadata"].get("annotations") or {}
    return (
        not node["spec"].get("unschedulable")
        and not tainted(node)
        and keys.LIFECYCLE_PHASE_ANNOTATION not in annotations
        and keys.LIFECYCLE_CORDONED_ANNOTATION not in annotations
    )


def create_pod(cluster: LocalCluster, namespace: str, prefix: str, spec: dict[str, Any]) -> str:
    """A pod of one busybox container plus ``spec`` (its placement, its requests); its name."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    body = {k: v for k, v in spec.items() if k != "requests"}
    requested = container(spec.get("requests"), image="busybox")
    with cluster.api() as api:
        api.post(
            f"/api/v1/namespaces/{namespace}/pods",
            json=pod_manifest(name, containers=[requested], spec=body),
        ).raise_for_status()
    return name


def bind_pod(cluster: LocalCluster, namespace: str, node: str) -> str:
    """A workload pod put straight on ``node`` (as a bind racing a drain's taint would)."""
    spec = {"nodeName": node, "tolerations": [{"operator": "Exists"}]}
    return create_pod(cluster, namespace, "work", spec)
