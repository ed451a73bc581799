"""Informers: a local, always-current copy of one kind of object, kept by list + watch.

The semantics follow client-go's reflector: a paginated LIST, then a WATCH from the list's
resourceVersion with bookmarks, a randomised server timeout and an idle timeout on the client, a
fresh LIST when the server says the resourceVersion is too old (410 Gone), and exponential
backoff with jitter on errors. Objects are kept as *projections*: small values holding only the
fields Joulie reads, which is what lets 100,000 pods fit in a few tens of MiB, and which makes
update handlers fire only when something Joulie cares about changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import aiohttp
import structlog

from joulie.kube import metrics
from joulie.kube.client import METADATA, METADATA_LIST, ApiError, KubeClient, MalformedEvent

T = TypeVar("T")

Projection = Callable[[Mapping[str, Any]], T]
"""Turns a raw object into what the store keeps; may raise on malformed input."""
Indexer = Callable[[T], Iterable[str]]

log = structlog.get_logger("joulie.informer")

ListListener = Callable[[str, int], None]
"""Called with the resource and the object count each time a full list replaced a store."""
_list_listeners: list[ListListener] = []


def add_list_listener(listener: ListListener) -> Callable[[], None]:
    """Be told, process-wide, whenever any informer has replaced its store from a full list
    (the first sync and every relist after a 410 or an error), never for single watch events.
    Process-level policies hang off this, e.g. the runtime's garbage-collector policy, which
    freezes the objects a large list leaves behind. Returns a function that removes it again."""
    _list_listeners.append(listener)

    def remove() -> None:
        with contextlib.suppress(ValueError):
            _list_listeners.remove(listener)

    return remove


class _Relist(Exception):
    """The watch cannot resume from its resourceVersion; a full list is needed."""


@dataclass
class Backoff:
    """Exponential backoff with jitter (client-go's reflector: 0.8 s doubling to 30 s)."""

    initial: float = 0.8
    maximum: float = 30.0
    factor: float = 2.0
    jitter: float = 1.0
    _next: float = field(default=0.0, init=False)

    def reset(self) -> None:
        self._next = 0.0

    def next_delay(self) -> float:
        self._next = (
            self.initial if self._next == 0 else min(self._next * self.factor, self.maximum)
        )
        return self._next * (1 + random.random() * self.jitter) if self.jitter else self._next


@dataclass
class Handlers(Generic[T]):
    on_add: Callable[[T], None] | None = None
    on_update: Callable[[T, T], None] | None = None
    on_delete: Callable[[T], None] | None = None


def object_key(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` for namespaced objects, ``name`` for cluster-scoped ones."""
    meta = obj["metadata"]
    name = meta["name"]
    if not isinstance(name, str) or not name:
        raise ValueError("object without metadata.name")
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if namespace else name


PAGE_SIZE = 100
"""Objects per list page. Each page is decoded whole before it is projected, so its size is the
peak a list adds: at 100,000 pods, 100 a page instead of client-go's 500 took a pool agent's
peak RSS from 111.1 / 112.8 to 99.8 / 97.7 MiB (bench.agent_pool, two runs) for 1,000 requests
instead of 200 at sync."""


class Informer(Generic[T]):
    """One kind of object from one API collection path, e.g. ``/api/v1/pods``."""

    def __init__(
        self,
        client: KubeClient,
        path: str,
        projection: Projection[T],
        *,
        resource: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        metadata_only: bool = False,
        keep: Callable[[T], bool] | None = None,
        indexers: Mapping[str, Indexer[T]] | None = None,
        page_size: int = PAGE_SIZE,
        watch_timeout: tuple[int, int] = (300, 600),
        idle_timeout: float = 90.0,
        backoff: Backoff | None = None,
    ) -> None:
        self._client = client
        self._path = path
        self._projection = projection
        self.resource = resource or path.rstrip("/").rsplit("/", 1)[-1]
        self._selectors = {
            k: v
            for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector))
            if v
        }
        self._accept: tuple[dict[str, str], dict[str, str]] = (
            ({"accept": METADATA_LIST}, {"accept": METADATA}) if metadata_only else ({}, {})
        )
        """Accept headers of the list and of the watch, when not JSON: with ``metadata_only``
        the server sends each object's metadata alone (the projection sees nothing else)."""
        self._keep = keep
        """Which projected objects are held; one it refuses is treated as absent (an update
        that makes an object unwanted removes it). What a selector cannot express, such as
        the pods of one shard's nodes, then costs no memory."""
        self._page_size = page_size
        self._watch_timeout = watch_timeout
        self._idle_timeout = idle_timeout
        self._backoff = backoff or Backoff()
        self._store: dict[str, T] = {}
        self._indexers: dict[str, Indexer[T]] = dict(indexers or {})
        self._indexes: dict[str, defaultdict[str, dict[str, None]]] = {
            name: defaultdict(dict) for name in self._indexers
        }
        """Per index, per value, the keys holding it, as a dict used as an ordered set: a set
        of 20 keys keeps a 64-slot table, a dict of str keys a compact one (100,000 pods on
        5,000 nodes, indexed by node: 11.2 -> 2.6 MiB by tracemalloc)."""
        self._handlers: list[Handlers[T]] = []
        self._synced = asyncio.Event()
        self._resource_version = ""
        self._log = log.bind(resource=self.resource)
        self._reported_malformed: set[str] = set()
        self.last_contact: float | None = None
        """``time.monotonic()`` when the server last showed this informer is current: a list
        answered, a watch accepted, an event or bookmark received. None before the first."""
        self.last_error: BaseException | None = None
        """Why the last list or watch failed; cleared when a list succeeds (a one-shot caller
        reports it instead of waiting on a sync that will not come)."""

    # --- reading ---------------------------------------------------------------------------

    @property
    def has_synced(self) -> bool:
        """True once the first full list is in the store."""
        return self._synced.is_set()

    async def wait_synced(self, timeout: float | None = None) -> None:
        await asyncio.wait_for(self._synced.wait(), timeout)

    @property
    def resource_version(self) -> str:
        return self._resource_version

    def get(self, key: str) -> T | None:
        return self._store.get(key)

    def keys(self) -> list[str]:
        return list(self._store)

    def values(self) -> list[T]:
        return list(self._store.values())

    def items(self) -> list[tuple[str, T]]:
        return list(self._store.items())

    def __len__(self) -> int:
        return len(self._store)

    def __contains__(self, key: object) -> bool:
        return key in self._store

    def by_index(self, index: str, value: str) -> list[T]:
        keys = self._indexes[index].get(value, ())
        return [self._store[k] for k in keys]

    def index_count(self, index: str, value: str) -> int:
        """How many objects an index value holds, without copying them."""
        return len(self._indexes[index].get(value, ()))

    def index_keys(self, index: str, value: str) -> set[str]:
        return set(self._indexes[index].get(value, ()))

    def index_values(self, index: str) -> list[str]:
        return [v for v, keys in self._indexes[index].items() if keys]

    def add_handlers(self, handlers: Handlers[T]) -> None:
        """Handlers are called in event order, from the informer's task; they must not block.
        Added after the first sync, they are replayed the current store as adds."""
        self._handlers.append(handlers)
        if self.has_synced and handlers.on_add:
            for obj in self._store.values():
                handlers.on_add(obj)

    # --- running ---------------------------------------------------------------------------

    async def run(self, stopping: asyncio.Event) -> None:
        """List and watch until ``stopping`` is set."""
        stop = asyncio.create_task(stopping.wait())
        try:
            while not stopping.is_set():
                work = asyncio.create_task(self._list_and_watch())
                await asyncio.wait([work, stop], return_when=asyncio.FIRST_COMPLETED)
                if not work.done():
                    work.cancel()
                    await asyncio.gather(work, return_exceptions=True)
                    return
                error = work.exception()
                if error is None:
                    continue
                self.last_error = error
                delay = self._backoff.next_delay()
                self._log.warning(
                    "list/watch failed, retrying", error=str(error), retry_in_s=round(delay, 2)
                )
                metrics.WATCH_RESTARTS.labels(self.resource, "error").inc()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), delay)
        finally:
            stop.cancel()

    async def _list_and_watch(self) -> None:
        if not self._resource_version:
            await self._list()
        while True:
            try:
                await self._watch()
            except _Relist:
                metrics.RELISTS.labels(self.resource).inc()
                self._log.info("resourceVersion expired, listing again")
                await self._list()

    async def _list(self) -> None:
        fresh: dict[str, T] = {}
        params: dict[str, Any] = {**self._selectors, "limit": self._page_size}
        resource_version = ""
        while True:
            try:
                page = await self._client.request(
                    "GET", self._path, params=params, timeout=60, **self._accept[0]
                )
            except ApiError as exc:
                if exc.gone and "continue" in params:
                    # The continue token outlived its snapshot: start the list over.
                    params = {**self._selectors, "limit": self._page_size}
                    fresh.clear()
                    continue
                raise
            resource_version = resource_version or page["metadata"]["resourceVersion"]
            for raw in page.get("items") or ():
                decoded = self._decode(raw)
                if decoded is not None and self._wanted(decoded[1]):
                    fresh[decoded[0]] = decoded[1]
            token = page["metadata"].get("continue")
            if not token:
                break
            params = {**params, "continue": token}
        self._replace(fresh)
        self._resource_version = resource_version
        self._touch()
        self.last_error = None
        self._backoff.reset()
        if not self._synced.is_set():
            self._synced.set()
            self._log.info("synced", objects=len(self._store))

    async def _watch(self) -> None:
        params = {
            **self._selectors,
            "resourceVersion": self._resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": random.randint(*self._watch_timeout),
        }
        applied = 0
        opened = quiet = False

        def on_open() -> None:
            nonlocal opened
            opened = True
            self._touch()

        try:
            async for event in self._client.watch(
                self._path,
                params=params,
                idle_timeout=self._idle_timeout,
                on_open=on_open,
                **self._accept[1],
            ):
                self._apply(event)
                self._touch()
                applied += 1
        except MalformedEvent as exc:
            # The stream can no longer be trusted to be in sync; resume from the last good
            # resourceVersion rather than guessing.
            metrics.MALFORMED.labels(self.resource).inc()
            self._log.warning("malformed watch line, resuming", line=exc.text[:200])
            reason = "malformed"
        except ApiError as exc:
            if exc.gone:
                raise _Relist from exc
            raise
        except TimeoutError:
            reason = "disconnected"
            # Accepted, then silent for idle_timeout: a quiet collection, not a failing server;
            # reconnecting at once is no tight loop.
            quiet = opened
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError):
            reason = "disconnected"
        else:
            reason = "timeout"
        metrics.WATCH_RESTARTS.labels(self.resource, reason).inc()
        if applied or quiet or reason == "timeout":
            self._backoff.reset()
        else:
            # A stream that ends before delivering anything (a server that drops connections
            # at once, a line it cannot stop sending) must not become a tight reconnect loop.
            await asyncio.sleep(self._backoff.next_delay())

    def _touch(self) -> None:
        self.last_contact = time.monotonic()

    # --- store updates ---------------------------------------------------------------------

    def _decode(self, raw: Any) -> tuple[str, T] | None:
        try:
            key = object_key(raw)
        except (KeyError, TypeError, ValueError):
            self._malformed("<unnamed>", "object without metadata.name")
            return None
        try:
            obj = self._projection(raw)
        except Exception as exc:  # any projection failure skips just this object
            self._malformed(key, f"{type(exc).__name__}: {exc}")
            return None
        # A projection that keeps its own key (SlimPod) lends the store that string: one copy
        # of each pod's identity instead of two (about 6 MiB at 100,000 pods).
        own = getattr(obj, "key", None)
        return (own if own == key else key), obj

    def _wanted(self, obj: T) -> bool:
        return self._keep is None or self._keep(obj)

    def _malformed(self, key: str, reason: str) -> None:
        metrics.MALFORMED.labels(self.resource).inc()
        if key not in self._reported_malformed:
            self._reported_malformed.add(key)
            self._log.warning("skipping malformed object", object=key, reason=reason)

    def _apply(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        raw = event["object"]
        if kind == "ERROR":
            raise ApiError.from_status(raw)
        rv = (raw.get("metadata") or {}).get("resourceVersion")
        if kind == "BOOKMARK":
            if rv:
                self._resource_version = rv
            return
        metrics.WATCH_EVENTS.labels(self.resource, str(kind)).inc()
        if kind == "DELETED":
            try:
                key = object_key(raw)
            except (KeyError, TypeError, ValueError):
                self._malformed("<unnamed>", "deleted object without metadata.name")
            else:
                self._remove(key)
        elif kind in ("ADDED", "MODIFIED"):
            decoded = self._decode(raw)
            if decoded is not None and self._wanted(decoded[1]):
                self._put(*decoded)
            else:
                # An object we cannot read must not linger in its last readable form, nor one
                # no longer wanted.
                with_key = _safe_key(raw)
                if with_key is not None:
                    self._remove(with_key)
        if rv:
            self._resource_version = rv

    def _replace(self, fresh: dict[str, T]) -> None:
        if not self._store:
            self._adopt(fresh)
        else:
            for key in [k for k in self._store if k not in fresh]:
                self._remove(key)
            for key, obj in fresh.items():
                self._put(key, obj)
        for listener in list(_list_listeners):
            try:
                listener(self.resource, len(self._store))
            except Exception:  # a listener's bug must not stop the informer
                self._log.exception("list listener failed")

    def _adopt(self, fresh: dict[str, T]) -> None:
        """An empty store takes the listed objects as they are: copying them into it one by one
        held two dicts of every object at the end of a first sync (100,000 pods: a second dict
        of about 5 MiB; the manager's peak RSS, which comes later, did not move measurably).
        Handlers are told of each once every object is
        stored and indexed, so what they look up is whole."""
        self._store = fresh
        for key, obj in fresh.items():
            for name, indexer in self._indexers.items():
                for value in indexer(obj):
                    self._indexes[name][value][key] = None
        adds = [h.on_add for h in self._handlers if h.on_add]
        if adds:
            for obj in fresh.values():
                for on_add in adds:
                    on_add(obj)

    def _put(self, key: str, obj: T) -> None:
        old = self._store.get(key)
        if old is not None and old == obj:
            return
        self._unindex(key, old)
        self._store[key] = obj
        for name, indexer in self._indexers.items():
            for value in indexer(obj):
                self._indexes[name][value][key] = None
        for h in self._handlers:
            if old is None:
                if h.on_add:
                    h.on_add(obj)
            elif h.on_update:
                h.on_update(old, obj)

    def _remove(self, key: str) -> None:
        old = self._store.pop(key, None)
        if old is None:
            return
        self._unindex(key, old)
        self._reported_malformed.discard(key)
        for h in self._handlers:
            if h.on_delete:
                h.on_delete(old)

    def _unindex(self, key: str, old: T | None) -> None:
        if old is None:
            return
        for name, indexer in self._indexers.items():
            index = self._indexes[name]
            for value in indexer(old):
                keys = index.get(value)
                if keys is not None:
                    keys.pop(key, None)
                    if not keys:
                        del index[value]


def _safe_key(raw: Any) -> str | None:
    try:
        return object_key(raw)
    except (KeyError, TypeError, ValueError):
        return None


class InformerBundle:
    """Informers that run, sync and report together: a role's caches subclass it and set
    ``informers``; a few informers of their own make one directly."""

    def __init__(self, *informers: Informer[Any]) -> None:
        self.informers: list[Informer[Any]] = list(informers)

    @property
    def synced(self) -> bool:
        return all(i.has_synced for i in self.informers)

    async def wait_synced(self) -> None:
        for informer in self.informers:
            await informer.wait_synced()

    def start(self, stopping: asyncio.Event) -> list[asyncio.Task[None]]:
        """Run every informer until ``stopping`` is set; the tasks to gather at the end."""
        return [asyncio.create_task(i.run(stopping)) for i in self.informers]
