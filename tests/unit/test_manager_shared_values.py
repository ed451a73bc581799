"""Alike nodes share the values the manager keeps per node (hardware views, twin hardware, the
condition kept in a memo): one instance each, not one per node."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import cast

from joulie.api import keys
from joulie.core.intents import agent_reporting
from joulie.hardware.catalog import Catalog
from joulie.kube.client import KubeClient
from joulie.manager.cache import ClusterCache
from joulie.manager.node_writer import _shared_reporting
from joulie.manager.planner import Planner
from joulie.manager.settings import ManagerSettings
from tests.support import builders


def test_alike_nodes_share_their_hardware_view_and_twin_hardware() -> None:
    settings = ManagerSettings.from_env({}).settings
    cache = ClusterCache(cast(KubeClient, None), "joulie-manager", lambda: None)
    for name in ("n1", "n2"):
        node = builders.node(name, rv=1, labels={keys.MANAGED_LABEL: "true"})
        cache.nodes._apply({"type": "ADDED", "object": node})
    planner = Planner(settings, cache, Catalog.load())
    n1, n2 = (cache.nodes.get(n) for n in ("n1", "n2"))
    assert n1 is not None
    assert n2 is not None
    m1, m2 = planner.current(n1, None), planner.current(n2, None)
    assert m1.view is m2.view
    assert planner.twin_hardware(m1) is planner.twin_hardware(m2)


def test_a_kept_condition_is_shared_when_alike() -> None:
    now = datetime(2026, 12, 3, tzinfo=UTC)
    a = agent_reporting(False, False, None, now)
    b = agent_reporting(False, False, None, now)
    assert a == b
    assert a is not b
    assert _shared_reporting(a) is _shared_reporting(b)
