"""Kubernetes Events (events.k8s.io/v1) that do not flood the API.

The first occurrence of an event creates it; repeats of the same event (same object, type,
reason, action and note) are counted and folded into the event's ``series`` with at most one
patch per ``series_interval``, as client-go's event recorder does. After ``window`` without a
repeat, a new occurrence starts a new event.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog

from joulie.kube.client import MERGE_PATCH, ApiError, KubeClient

log = structlog.get_logger("joulie.events")

NORMAL = "Normal"
WARNING = "Warning"


@dataclass(frozen=True)
class ObjectRef:
    """The object an event is about."""

    kind: str
    name: str
    api_version: str = "v1"
    namespace: str = ""
    uid: str = ""

    def to_wire(self) -> dict[str, str]:
        ref = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.namespace:
            ref["namespace"] = self.namespace
        if self.uid:
            ref["uid"] = self.uid
        return ref


@dataclass
class _Seen:
    name: str
    namespace: str
    count: int
    first: float
    last: float
    patched: float


def _micro_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class EventRecorder:
    def __init__(
        self,
        client: KubeClient,
        controller: str,
        instance: str,
        *,
        cluster_namespace: str = "default",
        series_interval: float = 30.0,
        window: float = 600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._controller = controller
        self._instance = instance
        self._cluster_namespace = cluster_namespace
        self._series_interval = series_interval
        self._window = window
        self._clock = clock
        self._seen: dict[tuple[str, ...], _Seen] = {}

    async def emit(
        self, regarding: ObjectRef, type_: str, reason: str, action: str, note: str
    ) -> None:
        """Record one occurrence. Never raises: an event that cannot be written is logged."""
        now = self._clock()
        key = (regarding.kind, regarding.namespace, regarding.name, type_, reason, action, note)
        self._prune(now)
        seen = self._seen.get(key)
        try:
            if seen is None or now - seen.last > self._window:
                await self._create(key, regarding, type_, reason, action, note, now)
                return
            seen.count += 1
            seen.last = now
            if now - seen.patched >= self._series_interval:
                await self._patch_series(seen, now)
        except Exception as exc:
            # An Event is a report, never a reason to stop the work it reports on (a refused
            # create, a timeout and a dropped connection alike).
            log.warning("event not recorded", reason=reason, object=regarding.name, error=repr(exc))

    async def _create(
        self,
        key: tuple[str, ...],
        regarding: ObjectRef,
        type_: str,
        reason: str,
        action: str,
        note: str,
        now: float,
    ) -> None:
        namespace = regarding.namespace or self._cluster_namespace
        name = f"{regarding.name}.{uuid.uuid4().hex[:12]}"
        body: dict[str, Any] = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "eventTime": _micro_time(now),
            "reportingController": self._controller,
            "reportingInstance": self._instance,
            "action": action,
            "reason": reason,
            "regarding": regarding.to_wire(),
            "note": note[:1024],
            "type": type_,
        }
        await self._client.request(
            "POST", f"/apis/events.k8s.io/v1/namespaces/{namespace}/events", body=body
        )
        self._seen[key] = _Seen(name, namespace, 1, now, now, now)

    async def _patch_series(self, seen: _Seen, now: float) -> None:
        patch = {"series": {"count": seen.count, "lastObservedTime": _micro_time(now)}}
        try:
            await self._client.request(
                "PATCH",
                f"/apis/events.k8s.io/v1/namespaces/{seen.namespace}/events/{seen.name}",
                body=patch,
                content_type=MERGE_PATCH,
            )
        except ApiError as exc:
            if not exc.not_found:
                raise
            # The event expired on the server (event TTL); the next repeat starts a new one.
            seen.last = now - self._window - 1
            return
        seen.patched = now

    def _prune(self, now: float) -> None:
        stale = [k for k, s in self._seen.items() if now - s.last > self._window]
        for k in stale:
            del self._seen[k]
