"""The controller manager role: plans every eligible node's power profile and writes its NodeTwin.

This file only wires the parts together and ties them to the process's life:

* ``cache.py``: informers, indexes and the triggers that start a reconcile;
* ``planner.py``: the plan and each node's intent from the cache (pure ``core`` calls);
* ``node_writer.py``: change-only writes of a node's twin, label and status, and its Events;
* ``cleanup.py``: twins of deleted or unplanned nodes;
* ``failures.py``: nodes whose writes fail, reported once and retried alone;
* ``controller.py``: the reconcile loop, which is the leader's work;
* ``energy.py``: the energy each workload used, kept in one ConfigMap across leaders;
* ``metrics.py``.

Only the holder of the ``joulie-manager`` Lease writes; followers keep their caches warm, so a
takeover starts with a synced view of the cluster.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from joulie.api import keys
from joulie.hardware.catalog import Catalog
from joulie.kube.client import KubeClient
from joulie.kube.connection import RoleConnection
from joulie.kube.events import EventRecorder
from joulie.kube.informer import Informer
from joulie.kube.leader import LeaderElectionConfig, LeaderElector, default_identity
from joulie.kube.writes import Writer
from joulie.manager.cache import ClusterCache
from joulie.manager.controller import Controller
from joulie.manager.energy import EnergyAccountant
from joulie.manager.energy_groups import GroupAccounts
from joulie.manager.facility import FacilityPoller
from joulie.manager.failures import NodeFailures
from joulie.manager.lifecycle.build import build_lifecycle, node_leases
from joulie.manager.lifecycle.controller import LifecycleController
from joulie.manager.lifecycle.settings import LifecycleMode
from joulie.manager.node_writer import MAP_LISTS, NodeWriter
from joulie.manager.planner import Planned, Planner
from joulie.manager.power import PowerReader, build_source
from joulie.manager.settings import ManagerSettings
from joulie.manager.twin_status import TwinTracker

FIELD_MANAGER = "joulie-manager"
LEASE_NAME = keys.MANAGER_LEASE
DEFAULT_NAMESPACE = "joulie-system"


class ManagerRole:
    name = "manager"

    def __init__(
        self,
        settings: ManagerSettings,
        client: KubeClient | None = None,
        *,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        """``client``: an open client to use (else one is connected in :meth:`run`);
        ``wall_clock``: the time decisions are made at (tests move it)."""
        self.settings = settings
        self._connection = RoleConnection(client)
        self._wall_clock = wall_clock
        self._namespace = os.environ.get("POD_NAMESPACE") or DEFAULT_NAMESPACE
        self._cache: ClusterCache | None = None
        self._planner: Planner | None = None
        self._elector: LeaderElector | None = None
        self.controller: Controller | None = None
        self.lifecycle: LifecycleController | None = None
        self._leases: Informer[Any] | None = None
        self._lifecycle_writer: Writer | None = None
        self._energy: EnergyAccountant | None = None

    # --- what the runtime reads -----------------------------------------------------------

    def is_ready(self) -> bool:
        return (
            self._cache is not None
            and self._cache.synced
            and self._elector is not None
            and self._elector.is_ready()
        )

    def status(self) -> str:
        if self._elector is not None:
            return self._elector.status()
        return self._connection.status()

    @property
    def informers(self) -> list[Informer[Any]]:
        """The informers, once built (empty before)."""
        if self._cache is None:
            return []
        return [*self._cache.informers, *([self._leases] if self._leases is not None else [])]

    @property
    def cache(self) -> ClusterCache | None:
        """The cluster cache, once built."""
        return self._cache

    @property
    def is_leader(self) -> bool:
        return self._elector is not None and self._elector.is_leader

    # --- running --------------------------------------------------------------------------

    def _build_cache(self, client: KubeClient) -> ClusterCache:
        self._cache = ClusterCache(client, FIELD_MANAGER, on_change=self._trigger)
        self._planner = Planner(
            self.settings, self._cache, Catalog.load(), lambda: self._wall_clock().timestamp()
        )
        return self._cache

    def _trigger(self) -> None:
        if self.controller is not None:
            self.controller.trigger()

    async def observe(
        self, client: KubeClient, stopping: asyncio.Event
    ) -> list[asyncio.Task[None]]:
        """Start the informers only (no election, no writes) and wait until they synced."""
        cache = self._build_cache(client)
        tasks = cache.start(stopping)
        await cache.wait_synced()
        return tasks

    def planned(self) -> Planned:
        """The plan from the caches (after :meth:`observe` or during :meth:`run`)."""
        assert self._planner is not None, "observe() or run() first"
        return self._planner.planned()

    async def run(self, stopping: asyncio.Event) -> None:
        client = await self._connection.open(stopping)
        if client is None:  # stopped before the cluster answered
            return
        settings = self.settings
        cache = self._build_cache(client)
        assert self._planner is not None
        elector = LeaderElector(
            client,
            LeaderElectionConfig(namespace=self._namespace, name=LEASE_NAME),
            on_started_leading=lambda: self._lead(),
            name="manager-leader-election",
        )
        self._elector = elector
        events = EventRecorder(client, FIELD_MANAGER, default_identity())
        # Every write asks the elector first: past the renew deadline nothing more is sent,
        # even before the elector's own loop has noticed.
        writer = Writer(
            client, FIELD_MANAGER, map_lists=MAP_LISTS, may_write=lambda: elector.is_leader
        )
        power = PowerReader(build_source(settings), settings.reconcile_interval / 2)
        facility = FacilityPoller(settings) if settings.enable_facility_metrics else None
        if settings.lifecycle_mode is not LifecycleMode.OFF:
            self._leases = node_leases(client)
            self.lifecycle, self._lifecycle_writer = build_lifecycle(
                settings,
                client,
                cache,
                self._leases,
                self._planner.managed,
                events,
                lambda: elector.is_leader,
                self._wall_clock,
                self._namespace,
            )
        self._energy = EnergyAccountant(
            cache,
            writer,
            self._namespace,
            settings.reconcile_interval,
            settings.energy_accounts_max,
            models=self._planner.power_model,
            groups=GroupAccounts(settings.energy_podgroups_max),
        )
        self.controller = Controller(
            settings.reconcile_interval,
            cache,
            self._planner,
            NodeWriter(writer, events),
            NodeFailures(events),
            power,
            TwinTracker(settings.node_power_trend_window),
            facility,
            self._wall_clock,
            self._energy,
        )
        tasks: list[asyncio.Task[Any]] = [
            asyncio.create_task(i.run(stopping)) for i in self.informers
        ]
        # The facility poller also runs on followers, so a new leader starts with current figures.
        if facility is not None:
            tasks.append(asyncio.create_task(facility.run(stopping)))
        try:
            # Returns once ``stopping`` is set, after the leader's work has stopped and the Lease
            # was released.
            await elector.run(stopping)
        finally:
            await asyncio.gather(*tasks, return_exceptions=True)
            await power.close()
            if self.lifecycle is not None:
                await self.lifecycle.close()
            await self._connection.close()

    async def _lead(self) -> None:
        """The term's work: the reconcile loop and, beside it, the node lifecycle. Both end
        together (the elector cancels this when the term ends)."""
        assert self.controller is not None
        if self._energy is not None:
            self._energy.new_term()
        try:
            if self.lifecycle is None:
                await self.controller.lead()
                return
            try:
                async with asyncio.TaskGroup() as group:
                    group.create_task(self.controller.lead())
                    group.create_task(self.lifecycle.lead())
            finally:
                if self._lifecycle_writer is not None:
                    await self._lifecycle_writer.settle()
        finally:
            # Still leading (the Lease is released only after this returns): the accounts
            # counted since the last write go to the ConfigMap now, not a minute later.
            if self._energy is not None:
                await self._energy.end_term()


def build(settings: ManagerSettings) -> ManagerRole:
    return ManagerRole(settings)
