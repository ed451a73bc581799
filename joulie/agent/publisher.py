"""Writing a node's NodeHardware: the object, then its status, each only when what this agent owns
of it differs, plus a heartbeat.

``updatedAt`` is rewritten when the facts change or when the last one is older than the
heartbeat interval, so the manager (which calls an agent stale after 15 minutes) sees the agent
alive without a status write at every pass. The manager ignores the heartbeat itself: only a
change of the facts starts its work.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from joulie.agent.cache import NODEHARDWARES
from joulie.api import keys
from joulie.kube.ownership import OwnedObject
from joulie.kube.writes import Writer

__all__ = ["older", "publish_hardware"]


async def publish_hardware(
    writer: Writer,
    node: str,
    record: OwnedObject | None,
    facts: Mapping[str, Any],
    *,
    now: datetime,
    heartbeat: timedelta,
    labels: Mapping[str, str] | None = None,
) -> None:
    """Bring ``node``'s NodeHardware to ``facts`` (its status in wire form, without
    ``updatedAt``). ``record`` is what the cache holds of the object (None: not seen yet)."""
    ident: dict[str, Any] = {
        "apiVersion": keys.API_VERSION,
        "kind": keys.NODE_HARDWARE_KIND,
        "metadata": {"name": node},
    }
    main = {**ident, "spec": {"nodeName": node}}
    if labels:
        main["metadata"] = {"name": node, "labels": dict(labels)}
    await writer.apply(f"{NODEHARDWARES}/{node}", main, observed=record.main if record else None)
    stored = dict(record.stored_status) if record else {}
    beat = stored.pop("updatedAt", None)
    if facts != stored or older(beat, now - heartbeat):
        beat = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    await writer.apply(
        f"{NODEHARDWARES}/{node}/status",
        {**ident, "status": {**facts, "updatedAt": beat}},
        observed=record.status if record else None,
    )


def older(stamp: Any, than: datetime) -> bool:
    """Whether an RFC 3339 ``stamp`` is missing, unreadable or before ``than``."""
    if not isinstance(stamp, str):
        return True
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return True
    return moment < than
