"""Polling helpers for tests that watch a real system converge."""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any

import httpx


def wait_until(check: Any, timeout: float, what: str, interval: float = 0.2) -> Any:
    """Call ``check`` until it returns something truthy (returned) or ``timeout`` passes (the
    test fails naming ``what``). An HTTP error counts as "not yet": servers start and restart."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
        except httpx.HTTPError:
            result = None
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(interval)


async def eventually(check: Any, timeout: float, what: str, interval: float = 0.05) -> Any:
    """The asyncio twin of :func:`wait_until`, for checks that must let the event loop run (an
    informer, an elector, a work queue in the same process). ``check`` may be a coroutine
    function; its truthy result is returned. An HTTP error counts as "not yet" here too."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
            if inspect.isawaitable(result):
                result = await result
        except httpx.HTTPError:
            result = None
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(interval)
