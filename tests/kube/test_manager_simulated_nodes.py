"""The manager's half of confining the pool-mode agent, against the real API server: it labels
each NodeTwin ``joulie.io/simulated`` from whether KWOK fakes the node, puts the label back when
someone else changes it, and believes NodeHardware the pool published only for the KWOK node.

The pool writes with its own ServiceAccount here. Admission lets it create a NodeHardware named
after a real node that has none yet, so the manager's rule is what keeps that node's facts out.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from hack.cluster.runner import LocalCluster
from joulie.api import keys
from joulie.api.inventory import load_inventory
from joulie.kube.client import KubeClient
from joulie.manager.role import ManagerRole
from joulie.manager.settings import ManagerSettings
from tests.support.builders import joulie_object, kwok_node, nodehardware
from tests.support.tokens import role_client
from tests.support.waiting import eventually

pytestmark = [pytest.mark.kube, pytest.mark.asyncio]

INVENTORY = Path(__file__).resolve().parents[1] / "data" / "inventories" / "02-cluster-nodes.yaml"
E2E = "kube-simulated"
TWINS = f"/apis/{keys.API_VERSION}/{keys.NODE_TWIN_PLURAL}"
HARDWARE = f"/apis/{keys.API_VERSION}/{keys.NODE_HARDWARE_PLURAL}"
APPLY = {"Content-Type": "application/apply-patch+yaml"}
SIM, REAL = "ksim-0", "kreal-0"


def twin(cluster: LocalCluster, name: str) -> dict[str, Any]:
    with cluster.api() as api:
        answer = api.get(f"{TWINS}/{name}")
    return answer.json() if answer.status_code == 200 else {}


def simulated_label(cluster: LocalCluster, name: str) -> str | None:
    labels = twin(cluster, name).get("metadata", {}).get("labels") or {}
    return labels.get(keys.SIMULATED_LABEL)


def reporting(cluster: LocalCluster, name: str) -> str | None:
    conditions = (twin(cluster, name).get("status") or {}).get("conditions") or [{}]
    reason = conditions[0].get("reason")
    return str(reason) if reason is not None else None


def reconciles() -> float:
    return REGISTRY.get_sample_value("joulie_manager_reconciles_total") or 0.0


def publish_as_pool(cluster: LocalCluster, name: str) -> None:
    """What the pool agent does for a node: its NodeHardware, labelled simulated, then status."""
    labels = {keys.SIMULATED_LABEL: "true"}
    ident = joulie_object(keys.NODE_HARDWARE_KIND, name, labels=labels)
    params = {"fieldManager": "joulie-agent", "force": "true"}
    with role_client(cluster, "agent-pool") as pool:
        pool.patch(
            f"{HARDWARE}/{name}",
            params=params,
            headers=APPLY,
            json=nodehardware(name, labels=labels),
        ).raise_for_status()
        pool.patch(
            f"{HARDWARE}/{name}/status",
            params=params,
            headers=APPLY,
            json={**ident, "status": {"cpu": {"sockets": 2}}},
        ).raise_for_status()


async def test_twins_say_which_nodes_kwok_fakes(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = load_inventory(INVENTORY).nodes[0]
    sim = kwok_node(SIM, group, labels={"joulie.io/e2e": E2E})
    real = kwok_node(REAL, group, labels={"joulie.io/e2e": E2E})
    del real["metadata"]["annotations"][keys.KWOK_NODE_ANNOTATION]  # a kubelet's node
    cluster.create_ready_nodes([sim])
    cluster.create_nodes([real])
    monkeypatch.setenv("POD_NAMESPACE", "joulie-system")
    loaded = ManagerSettings.from_env(
        {"RECONCILE_INTERVAL": "1s", "NODE_SELECTOR": f"joulie.io/e2e={E2E}"}
    )
    assert not loaded.problems
    stopping = asyncio.Event()
    client = await KubeClient.from_kubeconfig(str(cluster.role_kubeconfig("manager")))
    task = asyncio.create_task(ManagerRole(loaded.settings, client).run(stopping))
    try:
        await eventually(
            lambda: (
                simulated_label(cluster, SIM) == "true"
                and simulated_label(cluster, REAL) == "false"
            ),
            40,
            "both twins labelled",
        )

        # Someone else relabels the real node's twin: the manager, which owns the label, puts
        # it back (the pool could otherwise write that twin's status).
        with cluster.api() as api:
            api.patch(
                f"{TWINS}/{REAL}",
                headers={"Content-Type": "application/merge-patch+json"},
                json={"metadata": {"labels": {keys.SIMULATED_LABEL: "true"}}},
            ).raise_for_status()
        await eventually(
            lambda: simulated_label(cluster, REAL) == "false", 20, "the real twin's label back"
        )

        # A node KWOK stops faking (and fakes again): the label's value follows.
        for value, label in ((None, "false"), (keys.KWOK_NODE_VALUE, "true")):
            with cluster.api() as api:
                api.patch(
                    f"/api/v1/nodes/{SIM}",
                    headers={"Content-Type": "application/merge-patch+json"},
                    json={"metadata": {"annotations": {keys.KWOK_NODE_ANNOTATION: value}}},
                ).raise_for_status()
            await eventually(
                lambda label=label: simulated_label(cluster, SIM) == label,
                20,
                f"the KWOK node's twin labelled {label}",
            )

        # The pool publishes hardware for both nodes; only the KWOK node's counts.
        publish_as_pool(cluster, REAL)
        publish_as_pool(cluster, SIM)
        await eventually(
            lambda: reporting(cluster, SIM) == "NodeHardwareCurrent",
            20,
            "the KWOK node's NodeHardware to count",
        )
        seen = reconciles()
        await eventually(lambda: reconciles() >= seen + 2, 20, "two more reconciles")
        assert reporting(cluster, REAL) == "NoNodeHardware"
    finally:
        stopping.set()
        await asyncio.wait_for(task, 30)
        await client.close()
        with cluster.api() as api:
            for name in (SIM, REAL):
                api.delete(f"{HARDWARE}/{name}")
                api.delete(f"/api/v1/nodes/{name}")
                api.delete(f"{TWINS}/{name}")
