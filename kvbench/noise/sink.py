"""The receiving end of tcp noise: a TCP sink that reads and discards bytes, counting them.

`kvbench noise sink` runs one on any machine (bind 0.0.0.0 to accept other machines' traffic; the
default is 127.0.0.1); tests and the CLI use `async with tcp_sink() as s`. Reading into one
preallocated buffer (asyncio.BufferedProtocol) keeps a sink cheap at many GB/s; connections are
capped so that a stray client cannot exhaust file descriptors.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

SINK_MAX_CONNECTIONS = 256
SINK_BUFFER_BYTES = 1 << 20


class _SinkProtocol(asyncio.BufferedProtocol):
    def __init__(self, sink: TcpSink) -> None:
        self.sink = sink
        self.buf = bytearray(SINK_BUFFER_BYTES)
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        if len(self.sink.transports) >= SINK_MAX_CONNECTIONS:
            transport.abort()
            return
        self.transport = transport
        self.sink.transports.add(transport)
        self.sink.connections += 1

    def get_buffer(self, sizehint: int) -> bytearray:
        return self.buf

    def buffer_updated(self, nbytes: int) -> None:
        self.sink.bytes_received += nbytes

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.sink.transports.discard(self.transport)


class TcpSink:
    """A TCP sink that reads and discards bytes; counts them in `bytes_received`."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self.bytes_received = 0
        self.connections = 0  # accepted so far
        self.transports: set[asyncio.Transport] = set()
        self._server: asyncio.Server | None = None

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _SinkProtocol(self), self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for t in list(self.transports):
                t.abort()
            self.transports.clear()
            await self._server.wait_closed()
            self._server = None
            await asyncio.sleep(0)  # let the aborted transports finish closing


@contextlib.asynccontextmanager
async def tcp_sink(host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[TcpSink]:
    """In-process sink (tests, the CLI): `async with tcp_sink() as s: ... s.port, s.bytes_received`."""
    sink = TcpSink(host, port)
    await sink.start()
    try:
        yield sink
    finally:
        await sink.close()
