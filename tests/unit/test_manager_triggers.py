"""Which cluster changes start a manager reconcile: those a decision reads, and nothing else.

Watch events go through the real informers (projection, indexes, handlers); only the API server
is absent, which these decisions do not need.
"""

from __future__ import annotations

from typing import Any, cast

import pytest

from joulie.api import keys
from joulie.kube.client import KubeClient
from joulie.manager.cache import ClusterCache
from tests.support import builders
from tests.support.builders import container, node, nodehardware


@pytest.fixture
def cache() -> tuple[ClusterCache, list[int]]:
    fired = [0]

    def count() -> None:
        fired[0] += 1

    return ClusterCache(cast(KubeClient, None), "joulie-manager", count), fired


def pod(
    name: str, *, phase: str = "Running", gpus: int = 0, klass: str | None = None, rv: int = 1
) -> dict[str, Any]:
    return builders.pod(
        name,
        namespace="default",
        rv=rv,
        annotations={keys.WORKLOAD_CLASS_ANNOTATION: klass} if klass else {},
        node_name="n1",
        containers=[container(limits={"nvidia.com/gpu": str(gpus)} if gpus else None)],
        phase=phase,
        status={"conditions": [{"type": "Ready", "lastProbeTime": str(rv)}]},
    )


def hardware(sockets: int, beat: int) -> dict[str, Any]:
    """The NodeHardware of n1 as its agent's ``beat``-th write leaves it."""
    updated = f"2026-01-01T00:{beat // 60:02d}:{beat % 60:02d}Z"
    return nodehardware("n1", rv=beat, status={"cpu": {"sockets": sockets}, "updatedAt": updated})


def event(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


def test_standard_pods_start_nothing(cache: tuple[ClusterCache, list[int]]) -> None:
    c, fired = cache
    c.pods._apply(event("ADDED", pod("web", phase="Pending")))
    c.pods._apply(event("MODIFIED", pod("web", rv=2)))
    c.pods._apply(event("MODIFIED", pod("one-gpu", gpus=1, rv=3)))
    c.pods._apply(event("DELETED", pod("web", rv=4)))
    assert fired[0] == 0


def test_performance_pods_start_a_reconcile_when_they_move(
    cache: tuple[ClusterCache, list[int]],
) -> None:
    c, fired = cache
    c.pods._apply(event("ADDED", pod("p", phase="Pending", klass="performance")))
    assert fired[0] == 1
    c.pods._apply(event("MODIFIED", pod("p", phase="Running", klass="performance", rv=2)))
    assert fired[0] == 2
    # A status heartbeat that leaves phase, node and deletion alone is not a change.
    c.pods._apply(event("MODIFIED", pod("p", phase="Running", klass="performance", rv=3)))
    assert fired[0] == 2


def test_a_multi_gpu_pod_of_any_class_is_a_change(cache: tuple[ClusterCache, list[int]]) -> None:
    c, fired = cache
    c.pods._apply(event("ADDED", pod("train", phase="Pending", gpus=4)))
    assert fired[0] == 0  # not running yet: the sustained rule counts running pods
    c.pods._apply(event("MODIFIED", pod("train", gpus=4, rv=2)))
    assert fired[0] == 1
    assert [p.gpus for p in c.multi_gpu_pods("n1")] == [4]
    c.pods._apply(event("MODIFIED", pod("train", phase="Succeeded", gpus=4, rv=3)))
    assert fired[0] == 2
    assert c.multi_gpu_pods("n1") == []


def test_nodehardware_heartbeats_are_not_changes(cache: tuple[ClusterCache, list[int]]) -> None:
    c, fired = cache
    c.hardware._apply(event("ADDED", hardware(2, 1)))
    assert fired[0] == 1
    for second in range(2, 60):  # 58 heartbeats
        c.hardware._apply(event("MODIFIED", hardware(2, second)))
    assert fired[0] == 1
    c.hardware._apply(event("MODIFIED", hardware(1, 60)))
    assert fired[0] == 2
    facts = c.hardware_of("n1")
    assert facts is not None
    assert facts.status is not None
    assert facts.status.updated_at is None


def test_an_invalid_nodehardware_status_is_unusable(cache: tuple[ClusterCache, list[int]]) -> None:
    c, _fired = cache
    broken = hardware(2, 1)
    broken["status"]["cpu"]["sockets"] = -3
    c.hardware._apply(event("ADDED", broken))
    facts = c.hardware_of("n1")
    assert facts is not None
    assert facts.status is None
    assert facts.problem is not None
    assert "sockets" in facts.problem


def test_our_own_label_is_not_a_change(cache: tuple[ClusterCache, list[int]]) -> None:
    c, fired = cache
    c.nodes._apply(event("ADDED", node(rv=1, labels={"a": "1"})))
    assert fired[0] == 1
    c.nodes._apply(
        event("MODIFIED", node(rv=2, labels={"a": "1", keys.POWER_PROFILE_LABEL: "eco"}))
    )
    assert fired[0] == 1
    c.nodes._apply(
        event("MODIFIED", node(rv=3, labels={"a": "2", keys.POWER_PROFILE_LABEL: "eco"}))
    )
    assert fired[0] == 2
