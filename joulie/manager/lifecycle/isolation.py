"""One node's work in a pass that goes on for the others: the drains' and shutdowns' steps and
the power-ons alike."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

from joulie.kube.writes import NotPermitted
from joulie.manager.lifecycle import metrics
from joulie.manager.lifecycle.node_edits import NodeGone

log = structlog.get_logger("joulie.lifecycle")


async def one_node(work: Callable[[], Awaitable[None]], node: str, what: str) -> Exception | None:
    """Run ``work``; a failure (a refused patch, a timeout) is logged and counted and returned
    for the caller to report, and the next pass tries that node again. Losing leadership and
    cancellation end the pass; a Node gone meanwhile is no failure."""
    try:
        await work()
    except (NotPermitted, asyncio.CancelledError):
        raise
    except NodeGone:
        return None
    except Exception as exc:
        metrics.NODE_ERRORS.inc()
        log.warning(f"{what} failed for a node", node=node, error=repr(exc))
        return exc
    return None
