"""The node-agent role in DaemonSet mode: the shell that ties :class:`DaemonAgent` to the process.

It loads the baseline kept on the node (``STATE_DIR``; a restart within the same boot reuses it),
opens NVML when the node has it, and runs the passes once connected. The hardware is restored
whatever happens first: SIGTERM before the API server was ever reached, a connection that
cannot be made for SPEC_READ_TIMEOUT (the previous agent's values may still be in force), or
the end of the passes.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import structlog

from joulie.agent.baseline import Baseline
from joulie.agent.cache import OwnNodeCache
from joulie.agent.daemon import DaemonAgent
from joulie.agent.gpu.backends import GpuBackends
from joulie.agent.gpu.nvidia import open_nvml
from joulie.agent.host_node import HostNode
from joulie.agent.pod_resources import PodResourcesClient
from joulie.agent.settings import AgentSettings
from joulie.agent.sysfs import Sysfs
from joulie.hardware.catalog import Catalog
from joulie.kube.client import KubeClient
from joulie.kube.connection import RoleConnection
from joulie.kube.writes import Writer

log = structlog.get_logger("joulie.agent")

FIELD_MANAGER = "joulie-agent"
WATCH_IDLE_MAX_S = 90.0
STATE_LOCK_WAIT_S = 30.0
"""How long a starting agent waits for the previous one (restoring at its SIGTERM) to let go of
the node's baseline."""


class DaemonRole:
    name = "agent"

    def __init__(self, settings: AgentSettings, client: KubeClient | None = None) -> None:
        self.settings = settings
        self._connection = RoleConnection(client)
        self.agent: DaemonAgent | None = None
        self.host: HostNode | None = None

    def is_ready(self) -> bool:
        return self.agent is not None and self.agent.cache.synced and self.agent.passes > 0

    def status(self) -> str:
        if self.agent is None:
            return self._connection.status()
        if self.agent.stale:
            return "NodeTwin unreadable: node's own settings restored"
        return f"node {self.settings.node_name}: {self.agent.passes} passes"

    def _host(self) -> HostNode:
        settings = self.settings
        sysfs = Sysfs(settings.host_root)
        baseline = Baseline.load(settings.state_dir, sysfs)
        baseline.hold(STATE_LOCK_WAIT_S)
        if baseline.note:
            log.warning("baseline", node=settings.node_name, note=baseline.note)
        if baseline.refusal:
            log.error("nothing will be written", node=settings.node_name, reason=baseline.refusal)
        return HostNode(
            sysfs,
            baseline,
            Catalog.load(),
            gpus=GpuBackends.of(sysfs, open_nvml()),
            dry_run=settings.simulate_only,
            governor_writes=settings.governor_writes,
            discovery_interval_s=settings.discovery_interval,
        )

    async def run(self, stopping: asyncio.Event) -> None:
        settings = self.settings
        started = time.monotonic()
        host = self.host = await asyncio.to_thread(self._host)
        if settings.simulate_only:
            log.info("SIMULATE_ONLY: nothing will be written to the hardware")
        try:
            client = await self._connect(stopping, host)
            if client is None:
                return
            idle = min(WATCH_IDLE_MAX_S, settings.spec_read_timeout / 3)
            agent_ref: list[DaemonAgent] = []
            cache = OwnNodeCache(
                client,
                FIELD_MANAGER,
                settings.node_name,
                lambda: agent_ref[0].wake.set() if agent_ref else None,
                idle_timeout=idle,
            )
            agent = self.agent = DaemonAgent(
                settings.node_name,
                cache,
                host,
                Writer(client, FIELD_MANAGER),
                control_interval_s=settings.control_interval,
                spec_read_timeout_s=settings.spec_read_timeout,
                heartbeat_s=settings.heartbeat_interval,
                started=started,
                pod_devices=PodResourcesClient(settings.pod_resources_socket),
            )
            agent_ref.append(agent)
            tasks: list[asyncio.Task[Any]] = cache.start(stopping)
            try:
                await agent.run(stopping)  # restores before it returns
            finally:
                await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            if self.agent is None:
                await asyncio.to_thread(host.restore_all)
                await asyncio.to_thread(host.close)
            await self._connection.close()

    async def _connect(self, stopping: asyncio.Event, host: HostNode) -> KubeClient | None:
        """Connect; if that takes longer than SPEC_READ_TIMEOUT, restore the node's own settings
        meanwhile (a previous agent's values may be in force for a spec no one can read)."""
        connecting = asyncio.create_task(self._connection.open(stopping))
        done, _ = await asyncio.wait({connecting}, timeout=self.settings.spec_read_timeout)
        if not done:
            log.warning(
                "API server unreachable for longer than SPEC_READ_TIMEOUT: restoring the node's "
                "own settings until it answers",
                node=self.settings.node_name,
                problem=self._connection.problem,
            )
            await asyncio.to_thread(host.restore_all)
        return await connecting
