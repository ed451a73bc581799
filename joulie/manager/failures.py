"""Nodes whose writes fail: logged and reported once, counted every time, retried on their own.

One node's refusal (an admission policy, a webhook, a conflict, a timeout) must not hold back the
others, so the reconcile records it here and goes on; the controller retries that node alone with
backoff. The log line and the Event come when a node starts failing or fails differently, and a
line when it converges again, not once per attempt.
"""

from __future__ import annotations

import asyncio

import aiohttp
import structlog

from joulie.kube.client import ApiError
from joulie.kube.events import EventRecorder, ObjectRef
from joulie.kube.projections import SlimNode
from joulie.manager.metrics import FAILING_NODES, NODE_ERRORS

log = structlog.get_logger("joulie.manager")

WRITE_FAILED_REASON = "NodeTwinWriteFailed"


def failure_reason(exc: BaseException) -> str:
    """A short, bounded label for the metric: the API's reason (Forbidden, Invalid, Conflict,
    ...), Timeout or Connection."""
    if isinstance(exc, ApiError):
        return exc.reason or str(exc.status)
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return "Timeout"
    if isinstance(exc, aiohttp.ClientError | OSError):
        return "Connection"
    return type(exc).__name__


class NodeFailures:
    def __init__(self, events: EventRecorder) -> None:
        self._events = events
        self._failing: dict[str, str] = {}
        """node -> the message last reported for it."""

    def __contains__(self, name: object) -> bool:
        return name in self._failing

    def __len__(self) -> int:
        return len(self._failing)

    async def failed(self, node: SlimNode, exc: BaseException) -> None:
        reason = failure_reason(exc)
        NODE_ERRORS.labels(reason).inc()
        message = f"{reason}: {exc}"[:900]
        if self._failing.get(node.name) != message:
            self._failing[node.name] = message
            FAILING_NODES.set(len(self._failing))
            log.warning("node write failed; retrying it alone", node=node.name, error=message)
            await self._events.emit(
                ObjectRef(kind="Node", name=node.name, uid=node.uid),
                "Warning",
                WRITE_FAILED_REASON,
                "Reconcile",
                f"Joulie could not write this node's NodeTwin or profile label ({message}); "
                "its caps stay as they were until a retry succeeds.",
            )

    def succeeded(self, name: str) -> None:
        if self._failing.pop(name, None) is not None:
            FAILING_NODES.set(len(self._failing))
            log.info("node writes succeed again", node=name)

    def forget(self, keep: set[str]) -> None:
        """Drop nodes that are gone or no longer planned."""
        for name in [n for n in self._failing if n not in keep]:
            del self._failing[name]
        FAILING_NODES.set(len(self._failing))

    def reset(self) -> None:
        self._failing.clear()
        FAILING_NODES.set(0)
