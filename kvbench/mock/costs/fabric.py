"""The fabric sink: a raw TCP port that reads and discards noise traffic; each connection is a noise flow.

A flow is modelled at its **offered rate**: a sender that declares one (the first line it sends,
``KVBNOISE <modelled bytes/s>``; kvbench's tcp noise does against the mock) is modelled at that
rate, whatever its real bytes, which only confirm that it is on (a flow with no bytes in the last
``window_s`` is off). A connection that declares nothing is modelled at its real rate over the
window times the profile's fabric_noise_scale (modelled bytes per real byte). Every ``tick_s``
the flows' offered rates go to the engine, which shares the topology's links between them and
the G4 reads (max-min fair per flow, kvbench.model.topology): what a flow achieves never exceeds
a link's capacity, and a busy host that sends fewer real bytes does not change the model.

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
HEADER = b"KVBNOISE "  # then the flow's offered rate (modelled bytes/s) and a newline
HEADER_MAX = 64


class _SinkProtocol(asyncio.BufferedProtocol):
    def __init__(self, sink: FabricSink) -> None:
        self.sink = sink
        self.transport: asyncio.Transport | None = None
        self._buffer = memoryview(bytearray(RECV_BUFFER_BYTES))
        self._head: bytearray | None = bytearray()  # None once the header is read (or absent)
        self.declared: float | None = None  # offered rate, modelled bytes/s
        self.pending = 0  # real bytes since the last tick
        self.ticks: collections.deque[int] = collections.deque(maxlen=sink.window_ticks)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.sink.transports.add(self.transport)
        self.sink.flows.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.sink.transports.discard(self.transport)
        self.sink.flows.discard(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        if self._head is not None:
            self._read_header(bytes(self._buffer[:nbytes]))
        self.pending += nbytes
        self.sink.add(nbytes)

    def _read_header(self, data: bytes) -> None:
        assert self._head is not None
        self._head += data[: HEADER_MAX - len(self._head)]
        if not HEADER.startswith(bytes(self._head[: len(HEADER)])):
            self._head = None  # not a declaring sender: modelled from its real bytes
            return
        line, nl, _ = bytes(self._head).partition(b"\n")
        if nl or len(self._head) >= HEADER_MAX:
            self._head = None
            try:
                rate = float(line[len(HEADER) :].decode("ascii"))
            except (UnicodeDecodeError, ValueError):
                return
            self.declared = rate if rate > 0 and rate != float("inf") else None

    def offered(self, tick_s: float, scale: float) -> float:
        """This flow's offered rate now (modelled bytes/s; 0: no bytes in the window, off)."""
        self.ticks.append(self.pending)
        self.pending = 0
        real = sum(self.ticks)
        if real == 0:
            return 0.0
        if self.declared is not None:
            return self.declared
        return real / (len(self.ticks) * tick_s) * scale


class FabricSink:
    def __init__(
        self,
        host: str,
        port: int,
        noise_scale: float,
        on_rate: Callable[[float, tuple[float, ...]], None],
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
        self.window_ticks = max(1, round(window_s / tick_s))
        self.flows: set[_SinkProtocol] = set()
        self.real_bytes_total = 0
        self.modelled_rate = 0.0  # offered, all flows
        self.offered: tuple[float, ...] = ()
        self._server: asyncio.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.address: tuple[str, int] | None = None
        self.transports: set[asyncio.Transport] = set()

    def add(self, n: int) -> None:
        self.real_bytes_total += n
        self.metrics.noise_real_bytes.labels(self.metrics.model_name).inc(n)

    async def start(self) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _SinkProtocol(self), self.host, self.port)
        sock = self._server.sockets[0]
        self.address = (self.host, int(sock.getsockname()[1]))
        self._task = loop.create_task(self._run())
        return self.address

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        mn = self.metrics.model_name
        while True:
            await asyncio.sleep(self.tick_s)
            now = loop.time()
            # modelled bytes offered over the tick (rates are per model second, taken as measured
            # per real second since the noise runs in real time)
            self.metrics.noise_bytes.labels(mn).inc(self.modelled_rate * (now - last))
            last = now
            offered = tuple(
                r for r in (f.offered(self.tick_s, self.noise_scale) for f in self.flows) if r > 0
            )
            if sorted(offered) != sorted(self.offered):
                self.offered = offered
                self.modelled_rate = float(sum(offered))
                self.metrics.noise_rate.labels(mn).set(self.modelled_rate)
                self.on_rate(self.modelled_rate, offered)

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
