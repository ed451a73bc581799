"""Writes that happen only when something changes.

Every role writes through a ``Writer`` with its own field manager. Before sending, the writer
compares the desired fields with what the informer cache shows (``observed``); when every
desired field is already there, no request is sent. Without a cache entry it remembers what it
last wrote successfully, so repeating the same desired state is free either way. Server-side
apply keeps each role the owner of its own fields; merge patches serve simple label edits.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from joulie.kube.client import APPLY_PATCH, MERGE_PATCH, ApiError, KubeClient

R = TypeVar("R")


def is_subset(desired: Any, observed: Any) -> bool:
    """True when every field of ``desired`` has the same value in ``observed``.

    Lists compare whole (a desired list is the list); numbers compare by value (``60`` equals
    ``60.0``, as the API server may echo either).
    """
    if isinstance(desired, Mapping):
        if not isinstance(observed, Mapping):
            return False
        return all(k in observed and is_subset(v, observed[k]) for k, v in desired.items())
    if isinstance(desired, list):
        return (
            isinstance(observed, list)
            and len(desired) == len(observed)
            and all(is_subset(d, o) for d, o in zip(desired, observed, strict=True))
        )
    if isinstance(desired, bool) or isinstance(observed, bool):
        return desired is observed
    return bool(desired == observed)


def fingerprint(body: Any) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


async def retry_on_conflict(
    operation: Callable[[], Awaitable[R]], attempts: int = 5, base_delay: float = 0.01
) -> R:
    """Run ``operation`` again (re-reading inside it) when the server reports a conflict."""
    for attempt in range(attempts):
        try:
            return await operation()
        except ApiError as exc:
            if not exc.conflict or attempt == attempts - 1:
                raise
            await asyncio.sleep(base_delay * (2**attempt) * (1 + random.random()))
    raise AssertionError("unreachable")  # pragma: no cover


class Writer:
    def __init__(self, client: KubeClient, field_manager: str) -> None:
        self.client = client
        self.field_manager = field_manager
        self._written: dict[str, str] = {}

    def _unchanged(
        self, path: str, desired: Mapping[str, Any], observed: Mapping[str, Any] | None
    ) -> bool:
        if observed is not None:
            return is_subset(desired, observed)
        return self._written.get(path) == fingerprint(desired)

    def forget(self, path: str) -> None:
        """Drop the memory of the last write (e.g. the object was deleted)."""
        self._written.pop(path, None)

    async def apply(
        self,
        path: str,
        desired: Mapping[str, Any],
        *,
        observed: Mapping[str, Any] | None = None,
        force: bool = True,
    ) -> Mapping[str, Any] | None:
        """Server-side apply ``desired`` (apiVersion, kind, metadata.name and the fields this
        role owns) at ``path`` (the object's URL, or its ``/status``). Returns the object the
        server answered with, or None when nothing needed to change."""
        if self._unchanged(path, desired, observed):
            return None
        params = {"fieldManager": self.field_manager, "force": "true" if force else "false"}
        result = await self.client.request(
            "PATCH", path, params=params, body=dict(desired), content_type=APPLY_PATCH
        )
        self._written[path] = fingerprint(desired)
        return result  # type: ignore[no-any-return]

    async def merge_patch(
        self,
        path: str,
        patch: Mapping[str, Any],
        *,
        observed: Mapping[str, Any] | None = None,
    ) -> Mapping[str, Any] | None:
        """JSON merge patch, sent only when ``patch`` is not already reflected in ``observed``.

        (A ``None`` value in a merge patch deletes a field; such a patch is always sent unless
        ``observed`` lacks the field.)
        """
        if observed is not None and _merge_is_noop(patch, observed):
            return None
        if observed is None and self._written.get(path) == fingerprint(patch):
            return None
        params = {"fieldManager": self.field_manager}
        result = await self.client.request(
            "PATCH", path, params=params, body=dict(patch), content_type=MERGE_PATCH
        )
        self._written[path] = fingerprint(patch)
        return result  # type: ignore[no-any-return]

    async def create(self, collection: str, obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """Create ``obj``; None when it exists already (409)."""
        try:
            result = await self.client.request(
                "POST", collection, params={"fieldManager": self.field_manager}, body=dict(obj)
            )
        except ApiError as exc:
            if exc.conflict:
                return None
            raise
        return result  # type: ignore[no-any-return]

    async def delete(self, path: str) -> bool:
        """Delete the object at ``path``; False when it was already gone."""
        self.forget(path)
        try:
            await self.client.request("DELETE", path)
        except ApiError as exc:
            if exc.not_found:
                return False
            raise
        return True


def _merge_is_noop(patch: Mapping[str, Any], observed: Mapping[str, Any]) -> bool:
    for key, value in patch.items():
        if value is None:
            if key in observed:
                return False
        elif isinstance(value, Mapping):
            inner = observed.get(key)
            if not isinstance(inner, Mapping) or not _merge_is_noop(value, inner):
                return False
        elif not is_subset(value, observed.get(key, _MISSING)):
            return False
    return True


_MISSING = object()
