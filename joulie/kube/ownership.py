"""The fields a field manager owns, read from server-side apply's ``managedFields``.

With server-side apply the applied body *is* the manager's whole claim: a field it applied before
and leaves out now is removed from the object. So "is my apply a no-op?" has two parts, and
neither may look at fields other writers own:

1. the set of field paths the manager owns now (``managedFields``, ``fieldsV1``) equals the set
   its desired body would own; otherwise a field left the body, or was never applied;
2. every value in the desired body equals the object's value at the same path, where lists the
   schema declares as map-lists are matched entry by entry on their keys (another manager's
   condition beside ours is not a difference).

In ``metadata`` only labels and annotations are compared by value (the values at the keys the
manager owns are all an :class:`Observed` keeps of it); anything else there is compared by its
paths alone.

Paths use the ``fieldsV1`` spelling (``f:spec``, ``k:{"type":"Ready"}``). The ``.`` marker that
the API server adds for a map or list entry a manager owns as a whole is dropped, and so are the
paths that only lead to deeper ones, so both sides compare as sets of leaves whatever the API
server's bookkeeping detail.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

FieldPath = tuple[str, ...]
MapLists = Mapping[str, tuple[str, ...]]
"""Field name -> the keys of its entries, for lists with ``x-kubernetes-list-type: map``."""


@dataclass(frozen=True, slots=True)
class Observed:
    """What a write compares with: the cached object's top-level fields of interest (``spec``,
    ``status``, ...), the paths the writer's manager owns in them, and the object's version."""

    fields: Mapping[str, Any]
    owned: frozenset[FieldPath] | None
    version: int | None


def observe(
    raw: Mapping[str, Any], manager: str, subresource: str = "", keep: Iterable[str] = ("spec",)
) -> Observed:
    """The :class:`Observed` of a raw object for ``manager`` on ``subresource``."""
    meta = raw.get("metadata") or {}
    owned = managed_paths(meta.get("managedFields"), manager, subresource)
    fields = {k: _compact(raw[k]) for k in keep if k in raw}
    claimed = _owned_metadata(meta, owned)
    if claimed:
        fields["metadata"] = claimed
    return Observed(fields=fields, owned=owned, version=resource_version(raw))


_INTERNED_MAX_CHARS = 64
_COMPACT_DEPTH = 32
_SUBTREE_MAX_CHARS = 512
"""Largest object shared, as compact JSON: blocks and conditions are ~100-300 characters."""
_SUBTREE_MAX_KEYS = 32
"""Objects with more keys are not even serialized to look for a twin (a map of nodes, say)."""
_SUBTREES_MAX = 4096
_shared_subtrees: dict[str, Mapping[str, Any]] = {}


def _compact(value: Any, depth: int = 0) -> Any:
    """The same JSON value with every object key and every short string interned, and every
    small object below the top (a condition, a block of ``spec`` or ``status``) one read-only
    instance shared by every cached object holding the same content.

    A decoded watch event holds its own copy of every key (``json`` shares keys within one
    document only), so 5,000 cached twins held 5,000 copies of each of their ~40 keys and
    enum-like values: 44 -> 24 MiB for 5,000 twins (tracemalloc). Nodes of one policy also
    repeat whole blocks (the spec's CPU and policy parts, the agent's control outcomes, a
    condition written in the same pass): sharing those took the bench cluster's 5,000 twins
    from 14.5 to 6.1 MiB (tracemalloc). Deeper than any Joulie object nests, a value is kept
    as it is."""
    if depth >= _COMPACT_DEPTH:
        return value
    if isinstance(value, dict):
        if depth and len(value) <= _SUBTREE_MAX_KEYS:
            return _shared_subtree(value, depth)
        return {sys.intern(k): _compact(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_compact(v, depth + 1) for v in value]
    if isinstance(value, str) and len(value) <= _INTERNED_MAX_CHARS:
        return sys.intern(value)
    return value


def _shared_subtree(value: dict[str, Any], depth: int) -> Mapping[str, Any]:
    """One read-only mapping per distinct small object (read-only: every holder shares it).
    Bounded: a full table starts over, so contents unique per object cannot grow it."""
    try:
        key = json.dumps(value, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        key = ""
    held = _shared_subtrees.get(key) if key else None
    if held is not None:
        return held
    compacted = MappingProxyType({sys.intern(k): _compact(v, depth + 1) for k, v in value.items()})
    if key and len(key) <= _SUBTREE_MAX_CHARS:
        if len(_shared_subtrees) >= _SUBTREES_MAX:
            _shared_subtrees.clear()
        _shared_subtrees[key] = compacted
    return compacted


@dataclass(frozen=True, slots=True)
class OwnedObject:
    """One object as a writer's cache keeps it: what its field manager owns of the object itself
    (``spec`` and the like) and of its ``status`` subresource, and the status as stored."""

    name: str
    main: Observed
    status: Observed

    @property
    def stored_status(self) -> Mapping[str, Any]:
        return self.status.fields.get("status") or {}


def owned_projection(manager: str) -> Callable[[Mapping[str, Any]], OwnedObject]:
    """An informer projection keeping, per object, what ``manager`` owns of it."""

    def project(raw: Mapping[str, Any]) -> OwnedObject:
        return OwnedObject(
            name=raw["metadata"]["name"],
            main=observe(raw, manager, "", keep=("spec",)),
            status=observe(raw, manager, "status", keep=("status",)),
        )

    return project


def resource_version(raw: Mapping[str, Any] | None) -> int | None:
    """The object's resourceVersion as a number (etcd revisions are), None if it is not one."""
    try:
        return int((raw or {})["metadata"]["resourceVersion"])
    except (KeyError, TypeError, ValueError):
        return None


def managed_paths(
    managed_fields: Iterable[Mapping[str, Any]] | None, manager: str, subresource: str = ""
) -> frozenset[FieldPath] | None:
    """The leaf paths ``manager`` owns through apply on ``subresource`` ("" for the main
    resource); None when it has applied nothing there."""
    for entry in managed_fields or ():
        if (
            entry.get("manager") == manager
            and entry.get("operation") == "Apply"
            and (entry.get("subresource") or "") == subresource
        ):
            return _shared(_leaves(_walk_fields(entry.get("fieldsV1") or {}, ())))
    return None


_SHARED_MAX = 4096
_shared_sets: dict[frozenset[FieldPath], frozenset[FieldPath]] = {}


def _shared(paths: frozenset[FieldPath]) -> frozenset[FieldPath]:
    """One copy of each distinct set: the objects one manager writes mostly own the same
    fields, so 5,000 twins share a handful of sets instead of holding 10,000 of them."""
    found = _shared_sets.get(paths)
    if found is not None:
        return found
    if len(_shared_sets) < _SHARED_MAX:
        _shared_sets[paths] = paths
    return paths


_METADATA_MAPS = ("labels", "annotations")
"""The parts of ``metadata`` whose values an apply is compared on."""
_shared_metadata: dict[tuple[tuple[str, str, str], ...], Mapping[str, Mapping[str, str]]] = {}


def _owned_metadata(
    meta: Mapping[str, Any], owned: frozenset[FieldPath] | None
) -> Mapping[str, Mapping[str, str]]:
    """The labels and annotations ``owned`` covers, with their current values. The few a writer
    sets repeat on every object it writes, so equal sets are shared (read-only, bounded)."""
    found: list[tuple[str, str, str]] = []
    for path in owned or ():
        if len(path) == 3 and path[0] == "f:metadata" and path[1][2:] in _METADATA_MAPS:
            part, key = path[1][2:], path[2][2:]
            values = meta.get(part) or {}
            if key in values:
                found.append((part, key, str(values[key])))
    if not found:
        return {}
    items = tuple(sorted(found))
    shared = _shared_metadata.get(items)
    if shared is None:
        parts: dict[str, dict[str, str]] = {}
        for part, key, value in items:
            parts.setdefault(part, {})[key] = value
        shared = MappingProxyType({k: MappingProxyType(v) for k, v in parts.items()})
        if len(_shared_metadata) < _SHARED_MAX:
            _shared_metadata[items] = shared
    return shared


def applied_paths(body: Mapping[str, Any], map_lists: MapLists) -> frozenset[FieldPath]:
    """The leaf paths an apply of ``body`` claims (apiVersion, kind and the object's name and
    namespace identify the object and are not owned)."""
    fields = {k: v for k, v in body.items() if k not in ("apiVersion", "kind")}
    meta = dict(fields.pop("metadata", None) or {})
    meta.pop("name", None)
    meta.pop("namespace", None)
    if meta:
        fields["metadata"] = meta
    return _leaves(_walk_body(fields, (), map_lists))


def values_match(desired: Any, observed: Any, map_lists: MapLists, field: str = "") -> bool:
    """True when every value in ``desired`` is the same in ``observed``.

    Numbers compare by value (``60`` equals ``60.0``, as the API server may echo either); lists
    compare whole unless ``field`` is a map-list, whose entries are found by their keys.
    """
    if isinstance(desired, Mapping):
        if not isinstance(observed, Mapping):
            return False
        return all(
            k in observed and values_match(v, observed[k], map_lists, k) for k, v in desired.items()
        )
    if isinstance(desired, list):
        if not isinstance(observed, list):
            return False
        keys = map_lists.get(field)
        if keys:
            by_key = {_entry_key(o, keys): o for o in observed if isinstance(o, Mapping)}
            return all(
                isinstance(d, Mapping)
                and (o := by_key.get(_entry_key(d, keys))) is not None
                and values_match(d, o, map_lists)
                for d in desired
            )
        return len(desired) == len(observed) and all(
            values_match(d, o, map_lists) for d, o in zip(desired, observed, strict=True)
        )
    if isinstance(desired, bool) or isinstance(observed, bool):
        return desired is observed
    return bool(desired == observed)


def owns_exactly(
    desired: Mapping[str, Any], observed: Observed | None, map_lists: MapLists
) -> bool:
    """Whether applying ``desired`` would change nothing: same owned paths, same values."""
    return (
        observed is not None
        and observed.owned is not None
        and observed.owned == applied_paths(desired, map_lists)
        and values_match(_owned_part(desired), observed.fields, map_lists)
    )


def _owned_part(body: Mapping[str, Any]) -> dict[str, Any]:
    """The values an apply of ``body`` is compared on: everything but the object's identity,
    and of its metadata the labels and annotations."""
    part = {k: v for k, v in body.items() if k not in ("apiVersion", "kind", "metadata")}
    meta = body.get("metadata") or {}
    claimed = {k: meta[k] for k in _METADATA_MAPS if meta.get(k)}
    if claimed:
        part["metadata"] = claimed
    return part


def _entry_key(entry: Mapping[str, Any], keys: tuple[str, ...]) -> str:
    return "k:" + json.dumps({k: entry.get(k) for k in keys}, sort_keys=True, separators=(",", ":"))


def _walk_fields(tree: Mapping[str, Any], prefix: FieldPath) -> Iterator[FieldPath]:
    for key, sub in tree.items():
        if key == ".":
            yield prefix
            continue
        step = key
        if key.startswith("k:"):  # re-encode, so both sides spell an entry's key alike
            with contextlib.suppress(ValueError):
                step = "k:" + json.dumps(json.loads(key[2:]), sort_keys=True, separators=(",", ":"))
        path = (*prefix, step)
        if isinstance(sub, Mapping) and sub:
            yield from _walk_fields(sub, path)
        else:
            yield path


def _walk_body(value: Any, prefix: FieldPath, map_lists: MapLists) -> Iterator[FieldPath]:
    if isinstance(value, Mapping):
        if not value and prefix:
            yield prefix
        for key, sub in value.items():
            path = (*prefix, f"f:{key}")
            keys = map_lists.get(key)
            if keys and isinstance(sub, list):
                if not sub:
                    yield path
                for entry in sub:
                    if isinstance(entry, Mapping):
                        yield from _walk_body(entry, (*path, _entry_key(entry, keys)), map_lists)
            else:
                yield from _walk_body(sub, path, map_lists)
        return
    yield prefix


def _leaves(paths: Iterable[FieldPath]) -> frozenset[FieldPath]:
    """Drop the paths that only lead to deeper ones."""
    found = set(paths)
    inner = {path[:i] for path in found for i in range(1, len(path))}
    return frozenset(found - inner)
