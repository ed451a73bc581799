"""Where the energy accounts outlive a process: ONE ConfigMap, ``joulie-energy-accounts`` in the
manager's namespace, holding every account's total, what it saved and lost, the overhead and the
time of the last reading counted.

One object for the whole cluster, written by the leader at most once a minute (and as its term
ends), so accounting costs no API write per pod or per node. The write goes through the
manager's fenced :class:`joulie.kube.writes.Writer`: a process that does not lead cannot write
it. A new leader (or a restarted one) reads it once at the start of its term and continues the
totals from there.

What is read is bounded and checked (it is an object anyone with the grant may edit): a
ConfigMap that is not usable is reported and the accounts start from zero, to be overwritten at
the next write.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from joulie.kube.client import APPLY_PATCH, ApiError
from joulie.kube.writes import Writer

__all__ = ["CONFIGMAP_NAME", "StoredTotals", "UnusableStore", "load", "save"]

CONFIGMAP_NAME: Final = "joulie-energy-accounts"
MAX_STORED_BYTES: Final = 240 * 1024
"""Per field (used, saved, lost, podgroups): a ConfigMap holds at most 1 MiB in all. 2,000
accounts or 500 PodGroups of the longest names fit."""


@dataclass(frozen=True)
class StoredTotals:
    accounts: Mapping[str, float] = field(default_factory=dict)
    """Joules per account ("<namespace>/<class>")."""
    overhead: float = 0.0
    """Joules no pod explains."""
    through: float = 0.0
    """Epoch seconds of the last reading counted (0: none)."""
    saved: Mapping[str, float] = field(default_factory=dict)
    """Joules per account the same work would have drawn more without Joulie's controls."""
    lost: Mapping[str, float] = field(default_factory=dict)
    """Joules per account Joulie's controls cost (the net saving is saved less lost)."""
    groups: Sequence[tuple[str, tuple[float, float, float]]] = ()
    """Per PodGroup ("<namespace>/<podgroup>"), joules used, saved and lost; booked longest
    ago first."""


class UnusableStore(ValueError):
    """The ConfigMap exists but its data cannot be read as totals."""


def path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/configmaps/{CONFIGMAP_NAME}"


def _joules(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise UnusableStore(f"{what} is {value!r}, not a number of joules")
    try:
        joules = float(value)
    except ValueError:
        raise UnusableStore(f"{what} is {value!r}, not a number of joules") from None
    if not math.isfinite(joules) or joules < 0:
        raise UnusableStore(f"{what} is {value!r}, not a finite number of joules >= 0")
    return joules


def _json(data: Mapping[str, Any], name: str, empty: str) -> Any:
    """The field ``name`` decoded, bounded in size; ``empty`` when absent."""
    raw = data.get(name, empty)
    if not isinstance(raw, str) or len(raw) > MAX_STORED_BYTES:
        raise UnusableStore(f"{name} is not a JSON text of at most {MAX_STORED_BYTES} bytes")
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise UnusableStore(f"{name} is not JSON: {exc}") from None


def _accounts(data: Mapping[str, Any], name: str) -> dict[str, float]:
    decoded = _json(data, name, "{}")
    if not isinstance(decoded, dict):
        raise UnusableStore(f"{name} is not a JSON object {{account: joules}}")
    accounts = {}
    for key, value in decoded.items():
        namespace, _, workload_class = key.rpartition("/")
        if not namespace or not workload_class:
            raise UnusableStore(f"{name}: account {key!r} is not <namespace>/<class>")
        accounts[key] = _joules(value, f"{name}: account {key!r}")
    return accounts


def parse(data: Mapping[str, Any]) -> StoredTotals:
    """The totals in a ConfigMap's ``data``; raises :class:`UnusableStore` naming what is wrong.
    Totals written before the saving was counted have no ``saved`` or ``lost``: none yet."""
    return StoredTotals(
        _accounts(data, "accounts"),
        _joules(data.get("overhead", 0), "overhead"),
        _joules(data.get("through", 0), "through"),
        _accounts(data, "saved"),
        _accounts(data, "lost"),
        tuple(_groups(data)),
    )


def _groups(data: Mapping[str, Any]) -> list[tuple[str, tuple[float, float, float]]]:
    decoded = _json(data, "podgroups", "[]")
    if not isinstance(decoded, list):
        raise UnusableStore("podgroups is not a JSON list of [group, used, saved, lost]")
    groups = []
    for entry in decoded:
        if not (isinstance(entry, list) and len(entry) == 4 and isinstance(entry[0], str)):
            raise UnusableStore(f"podgroups entry {entry!r} is not [group, used, saved, lost]")
        group = entry[0]
        namespace, _, name = group.partition("/")
        if not namespace or not name:
            raise UnusableStore(f"podgroups: {group!r} is not <namespace>/<podgroup>")
        used, saved, lost = (_joules(v, f"podgroups: {group!r}") for v in entry[1:])
        groups.append((group, (used, saved, lost)))
    return groups


async def load(writer: Writer, namespace: str) -> StoredTotals:
    """The stored totals (empty when there is no ConfigMap yet). Raises :class:`UnusableStore`
    for one that cannot be read as totals, and the client's errors for a failed read (the caller
    must not write over totals it could not read)."""
    try:
        found = await writer.client.request("GET", path(namespace))
    except ApiError as exc:
        if exc.not_found:
            return StoredTotals()
        raise
    data = found.get("data") if isinstance(found, Mapping) else None
    return parse(data if isinstance(data, Mapping) else {})


def _encoded(accounts: Mapping[str, float]) -> str:
    return json.dumps(dict(sorted(accounts.items())), separators=(",", ":"))


def encode(totals: StoredTotals) -> dict[str, str]:
    # repr-exact floats: a restart continues from exactly what was counted.
    return {
        "accounts": _encoded(totals.accounts),
        "overhead": repr(float(totals.overhead)),
        "through": repr(float(totals.through)),
        "saved": _encoded(totals.saved),
        "lost": _encoded(totals.lost),
        "podgroups": json.dumps(
            [[group, *values] for group, values in totals.groups], separators=(",", ":")
        ),
    }


async def save(writer: Writer, namespace: str, totals: StoredTotals) -> None:
    """Apply the ConfigMap (server-side apply, the writer's field manager); raises
    :class:`joulie.kube.writes.NotPermitted` when the writer may not write."""
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": CONFIGMAP_NAME,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "joulie"},
        },
        "data": encode(totals),
    }
    await writer.send(
        "PATCH",
        path(namespace),
        params={"fieldManager": writer.field_manager, "force": "true"},
        body=body,
        content_type=APPLY_PATCH,
    )
