"""One NodeHardware as the manager reads it: the agent's status, parsed once, with the blocks
identical nodes share held once."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from joulie.api import keys
from joulie.api.nodehardware import NodeHardwareStatus

__all__ = ["HardwareFacts", "hardware_facts"]


@dataclass(frozen=True, slots=True)
class HardwareFacts:
    """One NodeHardware as far as the manager reads it."""

    name: str
    """The NodeHardware's own name."""
    node: str
    """The node it describes (spec.nodeName, else its own name)."""
    status: NodeHardwareStatus | None
    """The agent's report without its write time; None when missing or invalid."""
    problem: str | None
    """Why ``status`` is None although the agent wrote one (it is invalid)."""
    last_write: datetime | None
    """When its status was last written, by any writer (managedFields): the agent's pulse."""
    simulated: bool
    """Labelled as written for a simulated node (``keys.SIMULATED_LABEL`` is "true"): believed
    only for a node KWOK fakes."""

    def same_for_planning(self, other: HardwareFacts) -> bool:
        return (self.node, self.status, self.problem, self.simulated) == (
            other.node,
            other.status,
            other.problem,
            other.simulated,
        )


_SHARED_BLOCKS = ("cpu", "gpu", "capabilities", "quality")
_SHARED_BLOCKS_MAX = 4096
_shared_blocks: dict[tuple[str, str], Any] = {}
_shared_statuses: dict[tuple[int, ...], NodeHardwareStatus] = {}


def _hardware_status(raw: Mapping[str, Any]) -> NodeHardwareStatus:
    """The status validated whole, without its write time (the agent's pulse, not a fact about
    the hardware), each block of it (cpu, gpu, capabilities, quality) the one instance already
    held for the same content.

    Nodes of one model report the same blocks, and a parsed status costs about 9 KiB (46 MiB of
    the manager's heap at 5,000 nodes, tracemalloc in bench.manager); the blocks are never
    changed in place (a new status is a new object). Bounded: a full table starts over."""
    status = NodeHardwareStatus.model_validate(raw)
    update: dict[str, Any] = {"updated_at": None}
    for name in _SHARED_BLOCKS:
        block = getattr(status, name)
        if block is None:
            continue
        key = (name, json.dumps(raw.get(name), sort_keys=True, separators=(",", ":")))
        held = _shared_blocks.get(key)
        if held is not None:
            update[name] = held
            continue
        if len(_shared_blocks) >= _SHARED_BLOCKS_MAX:
            _shared_blocks.clear()
        _shared_blocks[key] = block
    if status.model_extra or any(
        name not in _SHARED_BLOCKS and name != "updated_at" and value is not None
        for name, value in status
    ):
        # Fields beyond the shared blocks (a newer agent's, or unknown ones) would make two
        # statuses with the same blocks differ: such a status stays its own.
        return status.model_copy(update=update)
    # The status itself is then shared too, by the blocks it is made of: a status instance of
    # its own cost each node about 0.5 KiB (5,000 alike statuses: 3.0 -> 0.56 MiB, tracemalloc).
    # The table holds each status, and so its blocks, so an id is not reused while it is there.
    whole = tuple(id(update.get(name, getattr(status, name))) for name in _SHARED_BLOCKS)
    held_status = _shared_statuses.get(whole)
    if held_status is None:
        held_status = status.model_copy(update=update)
        if len(_shared_statuses) >= _SHARED_BLOCKS_MAX:
            _shared_statuses.clear()
        _shared_statuses[whole] = held_status
    return held_status


def hardware_facts(raw: Mapping[str, Any]) -> HardwareFacts:
    meta = raw["metadata"]
    node = str((raw.get("spec") or {}).get("nodeName") or meta["name"])
    status: NodeHardwareStatus | None = None
    problem: str | None = None
    if raw.get("status"):
        try:
            status = _hardware_status(raw["status"])
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(map(str, first["loc"])) or "status"
            problem = f"invalid status ({exc.error_count()} error(s)); {where}: {first['msg']}"
    simulated = (meta.get("labels") or {}).get(keys.SIMULATED_LABEL) == "true"
    return HardwareFacts(
        str(meta["name"]),
        node,
        status,
        problem,
        _status_written_at(meta.get("managedFields")),
        simulated,
    )


def _status_written_at(managed: Any) -> datetime | None:
    times = [
        entry.get("time")
        for entry in managed or ()
        if entry.get("subresource") == "status" and entry.get("time")
    ]
    if not times:
        return None
    try:
        return datetime.fromisoformat(str(max(times)).replace("Z", "+00:00"))
    except ValueError:
        return None
