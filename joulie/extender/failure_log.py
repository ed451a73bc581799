"""The extender's failure log: one line per distinct failure, however often kube-scheduler's
calls run into it (a log line per request would be thousands a minute); a recurrence is counted
and reported with its count at most every REPEAT_LOG_INTERVAL.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import structlog

log = structlog.get_logger("joulie.extender")

REPEAT_LOG_INTERVAL: Final = 600.0
"""A failure already logged is logged again (with how often it recurred) at most this often."""
_MAX_FAILURE_KEYS: Final = 1000


@dataclass
class _Seen:
    logged_at: float
    since: int = 0


@dataclass
class FailureLog:
    """One log line per distinct failure; a recurrence is only counted, and reported with its
    count at most every ``REPEAT_LOG_INTERVAL``."""

    clock: Callable[[], float]
    seen: dict[tuple[str, ...], _Seen] = field(default_factory=dict)

    def report(self, key: tuple[str, ...], event: str, **fields: Any) -> None:
        now = self.clock()
        entry = self.seen.get(key)
        if entry is None:
            if len(self.seen) >= _MAX_FAILURE_KEYS:
                return  # still counted in the metrics; the log stays bounded
            self.seen[key] = _Seen(now)
            log.warning(event, **fields)
            return
        entry.since += 1
        if now - entry.logged_at >= REPEAT_LOG_INTERVAL:
            log.warning(event, repeated=entry.since, **fields)
            entry.logged_at, entry.since = now, 0

    def internal(self, what: str, exc: BaseException, **fields: Any) -> None:
        """An unexpected exception: distinct by its type and the line that raised it, whatever
        its message says (messages name pods and nodes)."""
        frames = traceback.extract_tb(exc.__traceback__)
        where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        self.report(
            (what, type(exc).__name__, where),
            "unexpected error; answered without a decision",
            call=what,
            error=f"{type(exc).__name__}: {exc}",
            exc_info=exc,
            **fields,
        )
