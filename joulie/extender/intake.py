"""How the extender takes a request's body: one call at a time, within the request's time limit
and the size limit, a large body read and decoded off the event loop; and the answers a call
gets when its body is refused."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final, TypeVar

from aiohttp import web

from joulie.api import json_body
from joulie.extender import wire
from joulie.extender.failure_log import FailureLog
from joulie.extender.metrics import Outcome, Verb
from joulie.settings import format_duration

__all__ = [
    "MAX_BODIES_AT_ONCE",
    "OFF_LOOP_BYTES",
    "Answer",
    "BodyIntake",
    "Refused",
    "text_answer",
]

_T = TypeVar("_T")

MAX_BODIES_AT_ONCE: Final = 1
"""Calls whose bodies are read and decided at once. A body is held about three times while it is
read (the bytes, the part decoded apart from the node names, the decoded values), so memory for
bodies stays under about 3 x EXTENDER_MAX_BODY_BYTES plus one earlier body still being answered:
four 100 MB bodies on four connections took the process from 74 to 486 MiB at most
(bench.hostile); two at a time, each kept on its idle connection, had taken it to 788 MiB."""
OFF_LOOP_BYTES: Final = 1024**2
"""Bodies from this size on are read on a thread (a 5,000-name body, 100 KB, takes about a
millisecond on the loop; a thread's hand-off would cost more than it saves)."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    outcome: Outcome
    nodes: int | None = None
    content_type: str = "application/json"


def text_answer(status: int, outcome: Outcome, reason: str) -> Answer:
    return Answer(status, (reason + "\n").encode(), outcome, content_type="text/plain")


class Refused(Exception):
    def __init__(self, answer: Answer) -> None:
        self.answer = answer


class BodyIntake:
    """The bodies of one extender's calls."""

    def __init__(
        self,
        *,
        max_body: int,
        limit_s: float,
        clock: Callable[[], float],
        failures: FailureLog,
        lists: wire.NameLists,
    ) -> None:
        self.max_body = max_body
        self.limit_s = limit_s
        self.clock = clock
        self.failures = failures
        self.lists = lists
        # Bodies held at once: kube-scheduler sends one call at a time (filter, then
        # prioritize). The others wait their turn within their time limit: four 100 MB bodies at
        # once had taken RSS to 640 MiB.
        self._admitted = asyncio.Semaphore(MAX_BODIES_AT_ONCE)
        # Large bodies are read on a thread of their own, so that the event loop (health probes,
        # informers, other calls) goes on meanwhile: a million names had held it for 4 s. One
        # thread: the reading is CPU work, and NameLists is shared.
        self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="extender-read")

    def close(self) -> None:
        self._reader.shutdown(wait=False, cancel_futures=True)

    async def parse(
        self,
        body: bytes,
        verb: Verb,
        distinct: wire.NamesCheck | None = None,
        only_for: wire.PodTest | None = None,
    ) -> wire.ExtenderArgs:
        """The body's ExtenderArgs; ``distinct`` checks a new NodeNames array (for the pods
        ``only_for`` names, else for all), on the event loop only (it reads state the loop
        changes, so a body read on a thread goes without)."""
        if len(body) >= OFF_LOOP_BYTES:
            distinct = None
        return await self.off_loop(
            body, verb, lambda: wire.parse_args(body, self.lists, distinct, only_for)
        )

    async def off_loop(self, body: bytes, verb: Verb, reader_of: Callable[[], _T]) -> _T:
        if len(body) < OFF_LOOP_BYTES:
            return self._read(reader_of, verb)
        # The value comes back in a box, not as the future's result: the executor's future is
        # still held by its thread for a moment after the await returns (in 200 of 200 tries),
        # long enough for the answer to be made and the collector to come back while it holds
        # a decoded 5,000-Node body, which a collection then walks (80 ms in bench.extender).
        box: list[_T] = []
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._reader, lambda: box.append(self._read(reader_of, verb)))
        return box.pop()

    def _read(self, reader: Callable[[], _T], verb: Verb) -> _T:
        """The body as ``reader`` reads it; a malformed one is refused with 400 and its reason."""
        try:
            return reader()
        except wire.WireError as exc:
            self.failures.report(
                (verb.value, "bad_request"),
                "refused a malformed request",
                verb=verb.value,
                reason=exc.reason,
            )
            raise Refused(text_answer(400, Outcome.BAD_REQUEST, exc.reason)) from None
        except Exception as exc:  # a bug in the reading must not become a 500
            self.failures.internal(verb.value, exc)
            reason = f"body could not be read: {type(exc).__name__}: {exc}"
            raise Refused(text_answer(400, Outcome.INTERNAL_ERROR, reason)) from None

    async def read_body(self, request: web.Request, started: float, within: float | None) -> bytes:
        length = request.content_length
        if length is not None and length > self.max_body:
            raise Refused(self.too_large())
        try:
            remaining = None if within is None else max(within - (self.clock() - started), 0.0)
            async with asyncio.timeout(remaining):
                # Not request.read(): it keeps the body on the request, and aiohttp keeps the
                # request until the connection's next one, so every idle keep-alive connection
                # held its last body (four 100 MB calls on four connections: 754 MiB peak).
                return await json_body.read_capped(request.content.iter_any(), self.max_body)
        except TimeoutError:
            reason = (
                f"body not received within EXTENDER_REQUEST_TIMEOUT={format_duration(self.limit_s)}"
            )
            raise Refused(text_answer(408, Outcome.TIMEOUT, reason)) from None
        except json_body.JsonBodyError:  # chunked, and past the limit
            raise Refused(self.too_large()) from None
        except Exception as exc:  # the sender went away or broke its framing mid-body
            reason = f"body could not be read: {type(exc).__name__}: {exc}"
            raise Refused(text_answer(400, Outcome.BAD_REQUEST, reason)) from None

    @asynccontextmanager
    async def turn(self, started: float) -> AsyncIterator[None]:
        """Wait, within the time limit, until fewer than MAX_BODIES_AT_ONCE bodies are held;
        429 (too many at once: never a 5xx to kube-scheduler) when no turn comes."""
        try:
            async with asyncio.timeout(max(self.limit_s - (self.clock() - started), 0.0)):
                await self._admitted.acquire()
        except TimeoutError:
            reason = (
                "other calls held the extender (it reads one at a time) for all of "
                f"EXTENDER_REQUEST_TIMEOUT={format_duration(self.limit_s)}"
            )
            raise Refused(text_answer(429, Outcome.TIMEOUT, reason)) from None
        try:
            yield
        finally:
            self._admitted.release()

    def too_large(self) -> Answer:
        reason = f"body larger than EXTENDER_MAX_BODY_BYTES ({self.max_body} bytes)"
        return text_answer(413, Outcome.TOO_LARGE, reason)
