"""The manager role in this process against the real API server: a burst of changes (pods bound
one after another) shares reconciles, at most one per TRIGGER_MIN_GAP, and the last change of the
burst is still reconciled."""

from __future__ import annotations

import asyncio
import time

import pytest
from prometheus_client import REGISTRY

from hack.cluster.runner import LocalCluster
from joulie.kube.client import KubeClient
from joulie.manager.controller import TRIGGER_MIN_GAP
from joulie.manager.role import ManagerRole
from joulie.manager.settings import ManagerSettings
from tests.support.waiting import eventually

pytestmark = [pytest.mark.kube, pytest.mark.asyncio]


def reconciles() -> float:
    return REGISTRY.get_sample_value("joulie_manager_reconciles_total") or 0.0


async def test_a_burst_of_changes_shares_reconciles(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "joulie-system")
    # No node matches: each reconcile is quick, so only the gap keeps them apart.
    loaded = ManagerSettings.from_env(
        {"RECONCILE_INTERVAL": "1h", "NODE_SELECTOR": "joulie.io/e2e=kube-triggers-none"}
    )
    assert not loaded.problems
    stopping = asyncio.Event()
    client = await KubeClient.from_kubeconfig(str(cluster.role_kubeconfig("manager")))
    role = ManagerRole(loaded.settings, client)
    start = reconciles()
    task = asyncio.create_task(role.run(stopping))
    try:
        await eventually(lambda: role.is_leader, 40, "the role to lead")
        await eventually(lambda: reconciles() > start, 20, "the first reconcile")
        controller = role.controller
        assert controller is not None

        before = reconciles()
        began = time.monotonic()
        for _ in range(40):  # a change every 50 ms for 2 s, as a churn of pods makes them
            controller.trigger()
            await asyncio.sleep(0.05)
        controller.trigger()
        during = reconciles() - before
        at_end = reconciles()
        elapsed = time.monotonic() - began
        assert 1 <= during <= elapsed / TRIGGER_MIN_GAP + 1, (during, elapsed)
        assert during <= 41 / 4  # each change its own reconcile is what the gap prevents
        # The burst's last change is not lost: a reconcile starts after it.
        await eventually(lambda: reconciles() > at_end, 5, "a reconcile after the last change")
    finally:
        stopping.set()
        await asyncio.wait_for(task, 30)
        await client.close()
