"""A power-off receiver for the webhook actuator's tests: a real HTTP server on 127.0.0.1 that
records each request and answers from a script."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestServer


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """Answers each request with the next scripted (status, headers, body); the last repeats."""

    script: list[tuple[int, dict[str, str], str]] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    delay_s: float = 0.0
    drip: tuple[float, int] | None = None
    """Send the body as (seconds between chunks, chunks), one byte each; a count of -1 streams
    64 KiB chunks without end."""
    sent: int = 0
    """Body bytes the streamed answers got out."""
    url: str = ""

    def answers(self, *script: tuple[int, dict[str, str], str] | int) -> None:
        self.script = [s if isinstance(s, tuple) else (s, {}, "") for s in script]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.received.append(Received(dict(request.headers), await request.read()))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        index = min(len(self.received), len(self.script)) - 1
        status, headers, text = self.script[index]
        if self.drip is None:
            return web.Response(status=status, headers=headers, text=text or None)
        response = web.StreamResponse(status=status, headers=headers)
        await response.prepare(request)
        pause, count = self.drip
        chunk = b"x" if count >= 0 else b"x" * 65536
        try:
            while count != 0:
                await response.write(chunk)
                self.sent += len(chunk)
                count -= 1 if count > 0 else 0
                await asyncio.sleep(pause)  # the slow sender is the behaviour under test
        except ConnectionError:  # the client stopped reading and hung up
            pass
        return response


@pytest_asyncio.fixture
async def receiver() -> AsyncIterator[Receiver]:
    receiver = Receiver()
    app = web.Application()
    app.router.add_post("/power-off", receiver.handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    receiver.url = f"http://127.0.0.1:{server.port}/power-off"
    try:
        yield receiver
    finally:
        await server.close()
