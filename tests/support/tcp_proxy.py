"""A TCP relay in front of the real API server, so tests can cut connections at will.

It is a fault injector for the network, not a stand-in for the server: every byte goes to and
from the real kube-apiserver (TLS passes through untouched).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any


class TcpProxy:
    def __init__(self, target_port: int) -> None:
        self._target = target_port
        self._server: asyncio.Server | None = None
        self._pairs: set[asyncio.Task[None]] = set()
        self.blocked = False
        self.port = 0
        self.connections = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        await self.cut()

    async def cut(self) -> None:
        """Drop every open connection (clients see a reset or an unexpected EOF)."""
        tasks = list(self._pairs)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.blocked:
            writer.close()
            return
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._pairs.add(task)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._target)
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except asyncio.CancelledError:
            pass
        finally:
            self._pairs.discard(task)
            for w in (writer, up_writer):
                with contextlib.suppress(Exception):
                    w.transport.abort()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    with contextlib.suppress(Exception):
        writer.write_eof()


class BackgroundProxy:
    """A :class:`TcpProxy` on an event loop of its own thread, for tests that are not async
    (a role running as a process, reached through the relay)."""

    def __init__(self, target_port: int) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.proxy = TcpProxy(target_port)
        self._run(self.proxy.start())

    @property
    def port(self) -> int:
        return self.proxy.port

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=30)

    def block(self) -> None:
        """Drop every open connection and refuse new ones: the client is cut off."""
        self._loop.call_soon_threadsafe(setattr, self.proxy, "blocked", True)
        self._run(self.proxy.cut())

    def unblock(self) -> None:
        self._loop.call_soon_threadsafe(setattr, self.proxy, "blocked", False)

    def close(self) -> None:
        self._run(self.proxy.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
