"""Garbage collection of twins: the twin of a node that is gone is deleted, and the twin of a node
that exists but is no longer planned (reserved, cordoned, out of the selector) loses its figures.

Each twin is handled on its own: one that cannot be written is logged and tried again at the next
reconcile, and does not stop the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator

import structlog

from joulie.core.twin import retired_status
from joulie.kube.ownership import OwnedObject
from joulie.kube.writes import NotPermitted
from joulie.manager.cache import ClusterCache
from joulie.manager.node_writer import NodeWriter

log = structlog.get_logger("joulie.manager")


class TwinCleanup:
    def __init__(
        self,
        cache: ClusterCache,
        writer: NodeWriter,
        drain: Callable[[Iterator[Awaitable[object]]], Awaitable[list[object]]],
    ) -> None:
        self._cache = cache
        self._writer = writer
        self._drain = drain

    async def retire_unplanned(self, planned: set[str]) -> None:
        """Strip the figures from the twin status of nodes that exist but are not planned:
        nothing keeps them current, so they must not look current. The schedulable class stays,
        as the spec (and the caps the agent enforces) stay too; the source says ``unmanaged``."""

        def jobs() -> Iterator[Awaitable[object]]:
            for name, twin in self._cache.twins.items():
                if name not in planned and self._cache.nodes.get(name) is not None:
                    desired = retired_status(dict(twin.stored_status))
                    if desired is not None:
                        yield self._isolated("retire", name, self._retire(twin, desired))

        await self._drain(jobs())

    async def _retire(self, twin: OwnedObject, status: dict[str, object]) -> None:
        if await self._writer.retire(twin, status):
            log.info("twin of an unplanned node marked unmanaged", node=twin.name)

    async def delete_orphans(self) -> int:
        """Delete the NodeTwins of nodes that no longer exist; returns how many."""
        existing = set(self._cache.nodes.keys())
        deleted = 0
        for name in sorted(self._cache.twins.keys()):
            if name not in existing and await self._isolated(
                "delete", name, self._writer.delete(name)
            ):
                deleted += 1
        return deleted

    async def _isolated(self, what: str, name: str, job: Awaitable[object]) -> object:
        try:
            return await job
        except (NotPermitted, asyncio.CancelledError):
            raise
        except Exception as exc:
            log.warning(
                f"could not {what} a twin; trying again next reconcile", twin=name, error=repr(exc)
            )
            return None
