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
    url: str = ""

    def answers(self, *script: tuple[int, dict[str, str], str] | int) -> None:
        self.script = [s if isinstance(s, tuple) else (s, {}, "") for s in script]

    async def handle(self, request: web.Request) -> web.Response:
        self.received.append(Received(dict(request.headers), await request.read()))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        index = min(len(self.received), len(self.script)) - 1
        status, headers, text = self.script[index]
        return web.Response(status=status, headers=headers, text=text or None)


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
