"""The manager's one log line per reconcile says what each count counts: profile changes of
nodes are not API writes, and a reader must not take "applied: 0" beside "writes: 4" for
"none of the 4 writes took effect".

A real reconcile runs over real informers; only the API server is a stand-in that accepts every
write.
"""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from typing import Any, cast

from structlog.testing import capture_logs

from joulie.api import keys
from joulie.hardware.catalog import Catalog
from joulie.kube.client import KubeClient
from joulie.kube.events import EventRecorder
from joulie.kube.writes import Writer
from joulie.manager.cache import ClusterCache
from joulie.manager.controller import Controller
from joulie.manager.failures import NodeFailures
from joulie.manager.node_writer import MAP_LISTS, NodeWriter
from joulie.manager.planner import Planner
from joulie.manager.power import PowerReader, build_source
from joulie.manager.settings import ManagerSettings
from joulie.manager.twin_status import TwinTracker
from tests.support import builders


class AcceptingApi:
    """Answers every request as a server that took it."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []

    async def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        self.requests.append((method, path))
        return {"metadata": {"resourceVersion": str(len(self.requests))}}


def reconcile_once(api: AcceptingApi) -> MutableMapping[str, Any]:
    settings = ManagerSettings.from_env({"STATIC_HP_FRAC": "0.5"}).settings
    client = cast(KubeClient, api)
    cache = ClusterCache(client, "joulie-manager", lambda: None)
    for name in ("n1", "n2", "n3", "n4"):
        node = builders.node(name, rv=1, labels={keys.MANAGED_LABEL: "true"})
        cache.nodes._apply({"type": "ADDED", "object": node})
    events = EventRecorder(client, "joulie-manager", "test")
    controller = Controller(
        60.0,
        cache,
        Planner(settings, cache, Catalog.load()),
        NodeWriter(Writer(client, "joulie-manager", map_lists=MAP_LISTS), events),
        NodeFailures(events),
        PowerReader(build_source(settings), 30.0),
        TwinTracker(300.0),
        None,
    )
    with capture_logs() as logs:
        asyncio.run(controller.reconcile())
    (line,) = [entry for entry in logs if entry["event"] == "reconciled"]
    return line


def test_the_summary_names_profile_changes_and_api_writes_apart() -> None:
    # The first reconcile of four nodes: every twin and label is written, and no node changes
    # profile yet (a node seen for the first time records no change). The old line read
    # "applied": 0 beside "writes": 12.
    api = AcceptingApi()
    line = reconcile_once(api)
    assert line["api_writes"] == len(api.requests) == 12
    assert line["profile_changes_applied"] == 0
    assert line["profile_changes_deferred"] == 0
    for ambiguous in ("applied", "deferred", "writes"):
        assert ambiguous not in line
