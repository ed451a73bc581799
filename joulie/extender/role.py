"""The scheduler-extender role: kube-scheduler's filter and prioritize calls answered from watch
caches of NodeTwin, NodeHardware and the manager's Lease.

It listens from the start (kube-scheduler's calls are ``ignorable``, and until the caches have
synced every node passes and scores neutral), reports ready once they have, and writes nothing
to the cluster: no leader election is needed, and replicas behind one Service agree because
they watch the same objects.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from joulie.core.preemption_candidates import Candidate
from joulie.core.scoring import NEUTRAL_PRIORITY
from joulie.extender.cache import ExtenderCache
from joulie.extender.groups import GroupCache, podgroups_served
from joulie.extender.placement import CachePlacement
from joulie.extender.server import extender_app, serve
from joulie.extender.settings import ExtenderSettings
from joulie.extender.wire import Scores
from joulie.kube.client import KubeClient
from joulie.kube.connection import RoleConnection

log = structlog.get_logger("joulie.extender")


class _Unsynced:
    """The placement before the cluster is reached: every node passes and scores neutral."""

    def ready(self) -> bool:
        return False

    def filter(self, pod: Any, nodes: Any, labels: Any) -> list[str | None]:
        return [None] * len(nodes)

    def prioritize(self, pod: Any, nodes: Any) -> list[int]:
        return [NEUTRAL_PRIORITY] * len(nodes)

    def names_distinct(self, nodes: Any) -> bool:
        return False

    def preempt(self, pod: Any, candidates: Any) -> list[Candidate]:
        return list(candidates)

    def explain(self, pod: Any, node: str) -> dict[str, Any]:
        return {"node": node, "neutral": "the extender has not reached the cluster yet"}


class _Switch:
    """Delegates to the placement in use, so the server can start before the cache exists."""

    def __init__(self) -> None:
        self.current: Any = _Unsynced()

    def ready(self) -> bool:
        return bool(self.current.ready())

    def filter(self, pod: Any, nodes: Any, labels: Any) -> list[str | None]:
        result: list[str | None] = self.current.filter(pod, nodes, labels)
        return result

    def prioritize(self, pod: Any, nodes: Any) -> Scores:
        result: Scores = self.current.prioritize(pod, nodes)
        return result

    def names_distinct(self, nodes: Any) -> bool:
        return bool(self.current.names_distinct(nodes))

    def preempt(self, pod: Any, candidates: Any) -> list[Candidate]:
        result: list[Candidate] = self.current.preempt(pod, candidates)
        return result

    def explain(self, pod: Any, node: str) -> Any:
        return self.current.explain(pod, node)


class ExtenderRole:
    name = "extender"

    def __init__(self, settings: ExtenderSettings, client: KubeClient | None = None) -> None:
        self.settings = settings
        self._connection = RoleConnection(client)
        self.placement = _Switch()
        self.cache: ExtenderCache | None = None

    def is_ready(self) -> bool:
        return self.placement.ready()

    def status(self) -> str:
        if self.cache is None:
            return self._connection.status()
        if not self.cache.synced:
            return "syncing the NodeTwin, NodeHardware, Lease, Pod and PodGroup caches"
        return f"{len(self.cache.table)} nodes with twins"

    async def run(self, stopping: asyncio.Event) -> None:
        app = extender_app(self.placement, self.settings)
        server = asyncio.create_task(serve(app, self.settings, stopping))
        tasks: list[asyncio.Task[Any]] = []
        try:
            client = await self._connection.open(stopping)
            if client is not None:
                groups = GroupCache(client, await _podgroups_served(client))
                cache = self.cache = ExtenderCache(client, self.settings.pod_namespace, groups)
                tasks = cache.start(stopping)
                self.placement.current = CachePlacement(cache)
            await server  # until stopping (or the address cannot be bound: that ends the role)
        finally:
            if not server.done():
                server.cancel()
            await asyncio.gather(server, *tasks, return_exceptions=True)
            await self._connection.close()


async def _podgroups_served(client: KubeClient) -> bool:
    try:
        served = await podgroups_served(client)
    except Exception as exc:  # discovery refused or unreachable: go on without groups
        log.warning(
            "cannot tell whether PodGroups are served; preempt ignores groups", error=str(exc)
        )
        return False
    log.info("podgroups", served=served)
    return served


def build(settings: ExtenderSettings) -> ExtenderRole:
    return ExtenderRole(settings)
