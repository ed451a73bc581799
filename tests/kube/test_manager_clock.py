"""The manager role in this process against the real API server, with an injected wall clock:
an agent that stops writing its NodeHardware is reported stale once 15 minutes have passed on
the manager's clock, without a test that waits 15 minutes."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hack.cluster.runner import LocalCluster
from joulie.api import keys
from joulie.api.inventory import load_inventory
from joulie.kube.client import KubeClient
from joulie.manager.role import ManagerRole
from joulie.manager.settings import ManagerSettings
from tests.support.builders import joulie_object, kwok_node, nodehardware
from tests.support.waiting import eventually

pytestmark = [pytest.mark.kube, pytest.mark.asyncio]

INVENTORY = Path(__file__).resolve().parents[1] / "data" / "inventories" / "02-cluster-nodes.yaml"
SELECTOR = "joulie.io/e2e=kube-clock"
TWINS = f"/apis/{keys.API_VERSION}/{keys.NODE_TWIN_PLURAL}"
HARDWARE = f"/apis/{keys.API_VERSION}/{keys.NODE_HARDWARE_PLURAL}"
APPLY = {"Content-Type": "application/apply-patch+yaml"}


def condition(cluster: LocalCluster, name: str) -> dict[str, Any]:
    with cluster.api() as api:
        answer = api.get(f"{TWINS}/{name}")
    if answer.status_code == 404:
        return {}
    answer.raise_for_status()
    conditions = (answer.json().get("status") or {}).get("conditions") or [{}]
    return dict(conditions[0])


async def test_agent_reporting_goes_stale_on_the_managers_clock(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = kwok_node(
        "kclock-0", load_inventory(INVENTORY).nodes[0], labels={"joulie.io/e2e": "kube-clock"}
    )
    name = node["metadata"]["name"]
    cluster.create_ready_nodes([node])
    monkeypatch.setenv("POD_NAMESPACE", "joulie-system")
    loaded = ManagerSettings.from_env({"RECONCILE_INTERVAL": "1s", "NODE_SELECTOR": SELECTOR})
    assert not loaded.problems
    now = [datetime.now(UTC)]
    stopping = asyncio.Event()
    client = await KubeClient.from_kubeconfig(str(cluster.role_kubeconfig("manager")))
    role = ManagerRole(loaded.settings, client, wall_clock=lambda: now[0])
    task = asyncio.create_task(role.run(stopping))
    try:
        await eventually(lambda: role.is_leader, 40, "the role to lead")
        first = await eventually(
            lambda: (c := condition(cluster, name)).get("reason") == "NoNodeHardware" and c,
            20,
            "a twin without NodeHardware",
        )
        assert first["status"] == "False"
        ident = joulie_object(keys.NODE_HARDWARE_KIND, name)
        params = {"fieldManager": "joulie-agent", "force": "true"}
        with cluster.api() as api:
            api.patch(
                f"{HARDWARE}/{name}",
                params=params,
                headers=APPLY,
                json=nodehardware(name),
            ).raise_for_status()
            api.patch(
                f"{HARDWARE}/{name}/status",
                params=params,
                headers=APPLY,
                json={**ident, "status": {"cpu": {"sockets": 2}}},
            ).raise_for_status()
        current = await eventually(
            lambda: (c := condition(cluster, name)).get("reason") == "NodeHardwareCurrent" and c,
            20,
            "the agent's report to count as current",
        )
        assert current["status"] == "True"

        now[0] += timedelta(minutes=16)
        stale = await eventually(
            lambda: (c := condition(cluster, name)).get("reason") == "NodeHardwareStale" and c,
            20,
            "the report to go stale on the manager's clock",
        )
        assert stale["status"] == "False"
        assert "last wrote NodeHardware status at" in stale["message"]
        assert stale["lastTransitionTime"] == now[0].strftime("%Y-%m-%dT%H:%M:%SZ")
    finally:
        stopping.set()
        await asyncio.wait_for(task, 30)
        await client.close()
        with cluster.api() as api:
            api.delete(f"{HARDWARE}/{name}")
            api.delete(f"/api/v1/nodes/{name}")
    # A graceful stop hands the Lease back at once.
    with cluster.api() as api:
        lease = api.get(
            "/apis/coordination.k8s.io/v1/namespaces/joulie-system/leases/joulie-manager"
        )
    assert lease.json()["spec"].get("holderIdentity") in (None, "")
