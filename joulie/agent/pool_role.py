"""The node-agent role in pool mode (``AGENT_MODE=pool``, the StatefulSet for KWOK nodes).

One process serves the nodes of its shard through the HTTP backend (``pool.py``). The simulator
answers for the whole node at one URL, so the CPU endpoints serve the GPUs too. Every node served
is a key of one work queue, queued when its twin's spec or the node set changes and once every
CONTROL_INTERVAL; a node that fails is logged (once per distinct failure) and tried again at the
next pass, without holding back the others. No leader election: each node belongs to exactly one
shard, so no two agents write the same objects.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import structlog

from joulie.agent.cache import AgentCache
from joulie.agent.http_backend import HttpBackend
from joulie.agent.metrics import NODE_SYNCS, PASS_SECONDS, SERVED_NODES
from joulie.agent.pool import PoolAgent
from joulie.agent.pool_pods import PoolPods
from joulie.agent.settings import AgentSettings
from joulie.agent.sharding import ordinal, shard_of
from joulie.hardware.catalog import Catalog
from joulie.kube.client import KubeClient
from joulie.kube.connection import RoleConnection
from joulie.kube.workqueue import WorkQueue, run_workers
from joulie.kube.writes import Writer

log = structlog.get_logger("joulie.agent")

FIELD_MANAGER = "joulie-agent"
WORKERS = 32
"""Nodes handled at once (each is a telemetry read, and sometimes a control request and writes)."""


class PoolRole:
    name = "agent"

    def __init__(self, settings: AgentSettings, client: KubeClient | None = None) -> None:
        self.settings = settings
        self._connection = RoleConnection(client)
        self._cache: AgentCache | None = None
        self._pods: PoolPods | None = None
        self._failing: dict[str, str] = {}
        self.passes = 0

    def is_ready(self) -> bool:
        return (
            self._cache is not None
            and self._cache.synced
            and self._pods is not None
            and self._pods.synced
        )

    def status(self) -> str:
        if self._cache is None:
            return self._connection.status()
        return f"pool shard {self._shard()} of {self.settings.pool_shards}"

    def _shard(self) -> int:
        if self.settings.pool_shards == 1:
            return 0
        return ordinal(self.settings.pod_name) or 0

    async def run(self, stopping: asyncio.Event) -> None:
        settings = self.settings
        client = await self._connection.open(stopping)
        if client is None:
            return
        queue: WorkQueue[str] = WorkQueue("joulie-agent")
        shard, shards = self._shard(), settings.pool_shards
        cache = AgentCache(
            client,
            FIELD_MANAGER,
            settings.pool_node_selector,
            queue.add,
            serves=lambda node: shard_of(node, shards) == shard,
        )
        self._cache = cache
        backend = HttpBackend(
            settings.telemetry_cpu_http_endpoint,
            settings.telemetry_cpu_control_http_endpoint,
            settings.telemetry_http_timeout,
        )

        def pod_moved(node: str) -> None:
            # A pod came, went or changed class on one of this shard's nodes: its boards' caps
            # may change (the periodic pass would see it too, a little later).
            if agent.mine(node) and cache.nodes.get(node) is not None:
                queue.add(node)

        # The pods of this shard's nodes alone (``agent`` is bound below, before any event).
        pods = PoolPods(client, pod_moved, serves=lambda node: agent.mine(node))
        self._pods = pods
        agent = PoolAgent(
            cache,
            backend,
            Writer(client, FIELD_MANAGER, map_lists={"conditions": ("type",)}),
            Catalog.load(),
            shard=shard,
            shards=shards,
            governor_writes=settings.governor_writes,
            heartbeat_s=settings.heartbeat_interval,
            pod_class=pods.pod_class,
        )
        tasks: list[asyncio.Task[Any]] = cache.start(stopping) + pods.start(stopping)

        pending: set[str] = set()
        """The nodes of the current pass not yet synced."""
        pass_started = 0.0

        async def handle(node: str) -> None:
            try:
                await agent.sync(node)
            except Exception as exc:
                NODE_SYNCS.labels("failed").inc()
                message = f"{type(exc).__name__}: {exc}"
                if self._failing.get(node) != message:
                    log.warning("node not brought in line; trying again", node=node, error=message)
                self._failing[node] = message
            else:
                NODE_SYNCS.labels("ok").inc()
                if self._failing.pop(node, None) is not None:
                    log.info("node in line again", node=node)
            if node in pending:
                pending.discard(node)
                if not pending:
                    PASS_SECONDS.observe(time.monotonic() - pass_started)

        async def passes() -> None:
            nonlocal pass_started
            await cache.wait_synced()
            await pods.wait_synced()
            while not stopping.is_set():
                served = agent.served()
                SERVED_NODES.set(len(served))
                if not pending:  # a pass still running is not restarted
                    pending.update(served)
                    pass_started = time.monotonic()
                for node in served:
                    queue.add(node)
                agent.forget_gone()
                self.passes += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), settings.control_interval)

        tasks.append(asyncio.create_task(passes()))
        try:
            await run_workers(queue, handle, WORKERS, stopping)
        finally:
            await asyncio.gather(*tasks, return_exceptions=True)
            await backend.close()
            await self._connection.close()
