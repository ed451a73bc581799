"""A TCP relay in front of the real API server, so tests can cut connections at will.

It is a fault injector for the network, not a stand-in for the server: every byte goes to and
from the real kube-apiserver (TLS passes through untouched).
"""

from __future__ import annotations

import asyncio
import contextlib


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
