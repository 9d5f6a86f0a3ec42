"""The fabric sink: a raw TCP port that reads and discards noise traffic and measures it.

Every ``tick_s`` the bytes received over the last ``window_s`` give a real rate; times the
profile's fabric_noise_scale it is the modelled noise rate (bytes per model second, taken
as measured per real second, since the noise generator runs in real time). The engine
charges it against the fabric capacity that G4 reads share, so noise slows G4 onboarding
only through contention.

Reading is kept cheap, since the noise is meant to act on the model and not on the CPU the mock
shares with the requests: each connection receives into one reused 1 MiB buffer
(asyncio.BufferedProtocol), not a new bytes object per read (~30% less CPU per GB on loopback).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable
from typing import cast

from kvbench.mock.metrics import MockMetrics

RECV_BUFFER_BYTES = 1 << 20


class _SinkProtocol(asyncio.BufferedProtocol):
    def __init__(self, sink: FabricSink) -> None:
        self.sink = sink
        self.transport: asyncio.Transport | None = None
        self._buffer = memoryview(bytearray(RECV_BUFFER_BYTES))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.sink.transports.add(self.transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.sink.transports.discard(self.transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.sink.add(nbytes)


class FabricSink:
    def __init__(
        self,
        host: str,
        port: int,
        noise_scale: float,
        on_rate: Callable[[float], None],
        metrics: MockMetrics,
        window_s: float = 0.5,
        tick_s: float = 0.05,
    ) -> None:
        self.host = host
        self.port = port
        self.noise_scale = noise_scale
        self.on_rate = on_rate
        self.metrics = metrics
        self.tick_s = tick_s
        self._ticks: collections.deque[int] = collections.deque(maxlen=max(1, round(window_s / tick_s)))
        self._pending = 0
        self.real_bytes_total = 0
        self.modelled_rate = 0.0
        self._server: asyncio.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.address: tuple[str, int] | None = None
        self.transports: set[asyncio.Transport] = set()

    def add(self, n: int) -> None:
        self._pending += n
        self.real_bytes_total += n
        mn = self.metrics.model_name
        self.metrics.noise_real_bytes.labels(mn).inc(n)
        self.metrics.noise_bytes.labels(mn).inc(n * self.noise_scale)

    async def start(self) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _SinkProtocol(self), self.host, self.port)
        sock = self._server.sockets[0]
        self.address = (self.host, int(sock.getsockname()[1]))
        self._task = loop.create_task(self._run())
        return self.address

    async def _run(self) -> None:
        window = self._ticks.maxlen or 1
        while True:
            await asyncio.sleep(self.tick_s)
            self._ticks.append(self._pending)
            self._pending = 0
            rate = sum(self._ticks) / (window * self.tick_s) * self.noise_scale
            if rate != self.modelled_rate:
                self.modelled_rate = rate
                self.metrics.noise_rate.labels(self.metrics.model_name).set(rate)
                self.on_rate(rate)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._server is not None:
            self._server.close()
            for t in list(self.transports):
                t.abort()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
