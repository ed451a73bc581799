"""Writes that happen only when something changes, and only while the writer may write.

Every role writes through a ``Writer`` with its own field manager. Server-side apply keeps each
role the owner of its own fields; before an apply the writer compares the desired body with the
cached object, looking only at the fields this manager owns (:mod:`joulie.kube.ownership`), so a
field or condition another writer adds never causes a write. Merge patches serve simple label
edits and are compared with the cached object the same way.

The writer also bridges the moment between its own write and the cache catching up: it remembers
what it last wrote per object and the resourceVersion the server answered, and does not repeat a
write while the cache still shows that version or an older one. That memory is bounded by the
objects that exist: ``forget`` drops an object and its subresources.

``may_write`` is checked before every request (leadership, for a role that must write alone):
when it says no, :class:`NotPermitted` is raised instead of sending. A request once sent is not
abandoned when its caller is cancelled: the server would act on it anyway, so a writer that stops
(a leader handing over) first waits for those answers with :meth:`Writer.settle`, and only then
says it has stopped.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from joulie.kube.client import APPLY_PATCH, MERGE_PATCH, ApiError, KubeClient
from joulie.kube.ownership import MapLists, Observed, owns_exactly, resource_version, values_match


class NotPermitted(Exception):
    """A write was refused before it was sent, because ``may_write`` said no."""


def fingerprint(body: Any) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


class Writer:
    def __init__(
        self,
        client: KubeClient,
        field_manager: str,
        *,
        map_lists: MapLists | None = None,
        may_write: Callable[[], bool] = lambda: True,
    ) -> None:
        self.client = client
        self.field_manager = field_manager
        self.map_lists: MapLists = map_lists or {}
        self._may_write = may_write
        self._written: dict[str, tuple[str, int | None]] = {}
        """path -> (fingerprint of the last body sent, resourceVersion the server answered)."""
        self._in_flight: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        """Objects (and subresources) remembered: bounded by those written and not forgotten."""
        return len(self._written)

    def forget(self, path: str) -> None:
        """Drop what is remembered of the object at ``path`` and its subresources."""
        prefix = path + "/"
        for key in [k for k in self._written if k == path or k.startswith(prefix)]:
            del self._written[key]

    def remembered(self) -> list[str]:
        """The paths remembered, for a caller that prunes them by what still exists."""
        return list(self._written)

    def reset(self) -> None:
        """Forget everything (a new leadership term starts from what the cluster shows)."""
        self._written.clear()

    def _just_written(self, path: str, body: Mapping[str, Any], cached: int | None) -> bool:
        """We sent this very body and the cache has not yet seen anything newer than our write."""
        last = self._written.get(path)
        if last is None or last[0] != fingerprint(body):
            return False
        answered = last[1]
        return answered is not None and cached is not None and cached <= answered

    def _check(self) -> None:
        if not self._may_write():
            raise NotPermitted(f"{self.field_manager} may not write now")

    async def _send(self, method: str, path: str, **kwargs: Any) -> Any:
        """Check, then send; the request runs to its answer even if the caller is cancelled."""
        self._check()
        task = asyncio.ensure_future(self.client.request(method, path, **kwargs))
        self._in_flight.add(task)
        task.add_done_callback(_settled(self._in_flight))
        return await asyncio.shield(task)

    async def send(self, method: str, path: str, **kwargs: Any) -> Any:
        """Any other request (a subresource PUT, a delete with preconditions), under the same
        rules as every write here: refused with :class:`NotPermitted` while ``may_write`` says
        no, and run to its answer even if the caller is cancelled. It is not compared with a
        cache nor remembered: the caller decides whether it is needed. ``kwargs`` are those of
        :meth:`joulie.kube.client.KubeClient.request`."""
        return await self._send(method, path, **kwargs)

    async def settle(self, timeout: float = 10.0) -> bool:
        """Wait (at most ``timeout`` seconds) until every request sent has been answered; True
        when none is left in flight."""
        if self._in_flight:
            await asyncio.wait(set(self._in_flight), timeout=timeout)
        return not self._in_flight

    def _remember(self, path: str, body: Mapping[str, Any], answer: Any) -> None:
        self._written[path] = (
            fingerprint(body),
            resource_version(answer if isinstance(answer, Mapping) else None),
        )

    async def apply(
        self,
        path: str,
        desired: Mapping[str, Any],
        *,
        observed: Observed | None,
    ) -> Mapping[str, Any] | None:
        """Server-side apply ``desired`` (apiVersion, kind, metadata.name and every field this
        manager owns) at ``path`` (the object's URL, or its ``/status``), unless it would change
        nothing: ``observed`` is what the cache shows of that (sub)resource for this manager
        (:func:`joulie.kube.ownership.observe`; None when there is no object). Returns the
        server's answer, or None when nothing was sent."""
        if owns_exactly(desired, observed, self.map_lists):
            return None
        if self._just_written(path, desired, observed.version if observed else None):
            return None
        params = {"fieldManager": self.field_manager, "force": "true"}
        result = await self._send(
            "PATCH", path, params=params, body=dict(desired), content_type=APPLY_PATCH
        )
        self._remember(path, desired, result)
        return result  # type: ignore[no-any-return]

    async def merge_patch(
        self, path: str, patch: Mapping[str, Any], *, observed: Mapping[str, Any] | None
    ) -> Mapping[str, Any] | None:
        """JSON merge patch, sent only when ``patch`` is not already reflected in ``observed``
        (a ``None`` value deletes a field, and is a no-op when the field is absent)."""
        if observed is not None and _merge_is_noop(patch, observed):
            return None
        if self._just_written(path, patch, resource_version(observed)):
            return None
        params = {"fieldManager": self.field_manager}
        result = await self._send(
            "PATCH", path, params=params, body=dict(patch), content_type=MERGE_PATCH
        )
        self._remember(path, patch, result)
        return result  # type: ignore[no-any-return]

    async def delete(self, path: str) -> bool:
        """Delete the object at ``path``; False when it was already gone."""
        self.forget(path)
        try:
            await self._send("DELETE", path)
        except ApiError as exc:
            if exc.not_found:
                return False
            raise
        return True


def _settled(tasks: set[asyncio.Task[Any]]) -> Callable[[asyncio.Task[Any]], None]:
    def done(task: asyncio.Task[Any]) -> None:
        tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: the caller, if still there, has seen it already

    return done


def _merge_is_noop(patch: Mapping[str, Any], observed: Mapping[str, Any]) -> bool:
    """A merge patch replaces lists whole, so lists compare whole here."""
    for key, value in patch.items():
        if value is None:
            if key in observed:
                return False
        elif isinstance(value, Mapping):
            inner = observed.get(key)
            if not isinstance(inner, Mapping) or not _merge_is_noop(value, inner):
                return False
        elif key not in observed or not values_match(value, observed[key], {}, key):
            return False
    return True
