"""One policy for JSON that arrives from outside the process: bounded in bytes and in depth.

Every JSON body Joulie reads (the extender's calls, the simulator service's control requests,
the answers of telemetry backends and Prometheus) and every JSON setting goes through here, so a
hostile sender meets the same limits everywhere (a shutdown webhook's answer is not decoded: only
its first 4 KiB are read):

* at most ``max_bytes`` bytes, checked before anything is decoded;
* decoded by orjson, in C and without Python recursion (a body it cannot read is refused with
  the parser's reason);
* nested at most :data:`MAX_DEPTH` levels. Deeper documents decode, but code that walks or
  writes them recursively (``json.dumps``, ``repr`` in a log line, pydantic) would then reach
  Python's recursion limit far from the request: a Nodes-form filter body nested 990 levels
  deep came back as a 500 after 2.3 s. No Kubernetes object comes near the limit (a Pod with
  affinities and managed fields is about 15 levels).
"""

from __future__ import annotations

from collections.abc import AsyncIterable
from typing import Any, Final

import orjson

__all__ = [
    "MAX_DEPTH",
    "JsonBodyError",
    "check_depth",
    "containers_in",
    "loads",
    "read_capped",
]

MAX_DEPTH: Final = 254
"""Deepest nesting accepted: the deepest orjson writes, so a document with many objects is
checked in one C call (one it can write back is within the limit)."""


class JsonBodyError(ValueError):
    """A body outside the policy; ``reason`` says which limit and where, for a 400."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def check_depth(value: Any, what: str = "body", containers: int | None = None) -> None:
    """JsonBodyError when decoded JSON nests deeper than :data:`MAX_DEPTH`. ``containers`` (an
    upper bound of the objects and arrays in it, such as the count of ``{`` and ``[`` in its
    text) picks the cheaper way: with few, a walk of them (no copy of a body that is mostly one
    long string); with many, orjson writing it (one C call, a transient copy)."""
    if containers is None or containers > _WALKED_CONTAINERS:
        try:
            orjson.dumps(value)
            return
        except TypeError:
            # orjson's recursion limit, or something it does not write (an integer past 64
            # bits, a lone surrogate, which the standard library's decoder produces): walk it.
            pass
    if _depth_over(value, MAX_DEPTH):
        raise JsonBodyError(f"{what} is nested deeper than {MAX_DEPTH} levels")


_WALKED_CONTAINERS: Final = 10_000
"""Up to this many objects and arrays a walk costs a few milliseconds."""


def containers_in(raw: bytes | str) -> int:
    """An upper bound of the objects and arrays in JSON text (brackets inside strings count
    too): two scans in C."""
    if isinstance(raw, str):
        return raw.count("{") + raw.count("[")
    return raw.count(b"{") + raw.count(b"[")


def _depth_over(value: Any, limit: int) -> bool:
    """Whether ``value`` nests deeper than ``limit``: level by level, without recursion."""
    level = [value] if isinstance(value, dict | list) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        deeper: list[Any] = []
        for item in level:
            children = item.values() if isinstance(item, dict) else item
            deeper.extend(c for c in children if isinstance(c, dict | list))
        level = deeper
    return False


def loads(raw: bytes | str, *, max_bytes: int, what: str = "body") -> Any:
    """``raw`` decoded under the policy; JsonBodyError naming ``what`` and the limit otherwise."""
    size = len(raw.encode() if isinstance(raw, str) else raw)
    if size > max_bytes:
        raise JsonBodyError(f"{what} is {size} bytes, more than the {max_bytes} accepted")
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise JsonBodyError(f"{what} is not JSON: {exc}") from None
    check_depth(value, what, containers_in(raw))
    return value


async def read_capped(chunks: AsyncIterable[bytes], max_bytes: int, what: str = "body") -> bytes:
    """A streamed body (aiohttp's ``content.iter_chunked``, httpx's ``aiter_bytes``) read whole,
    or JsonBodyError as soon as it passes ``max_bytes``: an answer is never held beyond the
    limit, however much the sender has."""
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > max_bytes:
            raise JsonBodyError(f"{what} is more than the {max_bytes} bytes accepted")
        parts.append(chunk)
    return b"".join(parts)
