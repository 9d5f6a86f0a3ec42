"""kvbench.client.transport.kstamp: a kernel stamp on loopback, the clock map, the recvmsg transport."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from kvbench.client.transport import kstamp

linux_only = pytest.mark.skipif(kstamp.unavailable() is not None, reason=str(kstamp.unavailable()))


def _wait_until_stamped(client: socket.socket, server: socket.socket) -> None:
    """Linux turns RX stamping on a moment after the first socket asks (a deferred static key)."""
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        server.send(b"w")
        _data, real = kstamp.read(client)
        if real is not None:
            return
        time.sleep(0.01)
    pytest.fail("no kernel receive stamp within 2 s of enabling SO_TIMESTAMPNS")


def _pair() -> tuple[socket.socket, socket.socket]:
    with socket.socket() as lst:
        lst.bind(("127.0.0.1", 0))
        lst.listen()
        client = socket.create_connection(lst.getsockname())
        server, _ = lst.accept()
    server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return client, server


def test_clock_map_maps_realtime_onto_perf_counter():
    clock = kstamp.ClockMap()
    assert clock.window_ns < 1_000_000  # the tightest bracket of 64 reads: well under a millisecond
    now = time.perf_counter_ns()
    t = clock.to_mono(time.time_ns(), now + 1_000_000)
    assert t is not None and abs(t - now) < 1_000_000
    # a stamp later than the read itself (a wall-clock step) is refused, not trusted
    assert clock.to_mono(time.time_ns() + 10**9, time.perf_counter_ns()) is None
    info = clock.finish()
    assert info["rejected_stamps"] == 1 and info["kernel_stamped_reads"] == 1
    assert abs(info["drift_ns"]) < 5_000_000 and info["offset_span_ns"] >= 0


@linux_only
def test_a_stamp_is_the_senders_write_time_not_the_read_time():
    client, server = _pair()
    with client, server:
        assert kstamp.enable(client)
        clock = kstamp.ClockMap()
        _wait_until_stamped(client, server)
        errors = []
        for _ in range(20):
            before = time.perf_counter_ns()
            server.send(b"x" * 200)
            after = time.perf_counter_ns()
            time.sleep(0.005)  # the reader is late by 5 ms; the stamp must not be
            data, real = kstamp.read(client)
            assert data == b"x" * 200 and real is not None
            t = clock.to_mono(real, time.perf_counter_ns())
            assert t is not None
            errors.append((t - before, after - t))
        errors.sort()
        mid = errors[len(errors) // 2]
        # inside the sender's send() call (loopback stamps in netif_rx), give or take the calibration
        assert -100_000 < mid[0] < 500_000 and -100_000 < mid[1] < 500_000


@linux_only
def test_segments_queued_unread_carry_the_newest_stamp():
    """Documents the kernel's rule (tcp_try_coalesce): a read's stamp is its newest segment's."""
    client, server = _pair()
    with client, server:
        assert kstamp.enable(client)
        clock = kstamp.ClockMap()
        _wait_until_stamped(client, server)
        server.send(b"A" * 10)
        time.sleep(0.02)
        second = time.perf_counter_ns()
        server.send(b"B" * 10)
        time.sleep(0.005)
        data, real = kstamp.read(client, 10)  # even a read of the first segment alone
        assert data == b"A" * 10 and real is not None
        t = clock.to_mono(real, time.perf_counter_ns())
        assert t is not None and abs(t - second) < 5_000_000


def test_no_timestamps_say_why(monkeypatch):
    monkeypatch.setattr(kstamp.sys, "platform", "darwin")
    assert "darwin" in str(kstamp.unavailable())
    a, b = _pair()
    with a, b:
        assert kstamp.enable(a) is False


class _Sink:
    def __init__(self) -> None:
        self.data = bytearray()
        self.stamps: list[tuple[int, int | None]] = []
        self.lost = asyncio.get_running_loop().create_future()
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:  # the loop's own transport (fallback)
        self.data_received_stamped(data, time.perf_counter_ns(), None)

    def data_received_stamped(self, data: bytes, t_user: int, t_kernel: int | None) -> None:
        self.data += data
        self.stamps.append((t_user, t_kernel))

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)


async def _echo_server(chunks: list[bytes]) -> tuple[asyncio.Server, list[bytes]]:
    got: list[bytes] = []

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        got.append(await r.readexactly(sum(map(len, chunks))))
        w.write(b"done")
        await w.drain()
        w.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0), got


@linux_only
async def test_stamped_transport_writes_in_order_reads_stamped_and_sees_eof():
    loop = asyncio.get_running_loop()
    big = bytes(range(256)) * (32 * 1024)  # 8 MiB: more than the socket takes at once
    chunks = [b"head\r\n", big, b"tail"]
    srv, got = await _echo_server(chunks)
    host, port = srv.sockets[0].getsockname()[:2]
    async with srv:
        tr, sink = await kstamp.open_stamped(loop, _Sink, host, port, kstamp.ClockMap())
        assert isinstance(tr, kstamp.StampedTransport)
        tr.writelines(chunks[:2])
        tr.write(chunks[2])
        assert await asyncio.wait_for(sink.lost, 10) is None  # EOF after "done" closes it
        assert got == [b"".join(chunks)]
        assert bytes(sink.data) == b"done"
        assert all(k is not None and k <= u for u, k in sink.stamps)
        assert tr.is_closing()


async def test_without_a_clock_the_loops_own_transport_is_used():
    loop = asyncio.get_running_loop()
    srv, _ = await _echo_server([b"ping"])
    host, port = srv.sockets[0].getsockname()[:2]
    async with srv:
        tr, sink = await kstamp.open_stamped(loop, _Sink, host, port, None)
        assert not isinstance(tr, kstamp.StampedTransport)
        tr.write(b"ping")  # type: ignore[attr-defined]
        await asyncio.wait_for(sink.lost, 10)
        assert bytes(sink.data) == b"done" and sink.stamps[0][1] is None


async def test_connect_refused_raises_oserror():
    loop = asyncio.get_running_loop()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused
        with pytest.raises(OSError):
            await kstamp.open_stamped(loop, _Sink, "127.0.0.1", port, kstamp.ClockMap())


@linux_only
async def test_close_sends_what_was_written_first():
    loop = asyncio.get_running_loop()
    got = loop.create_future()

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        got.set_result(await r.read())  # to EOF
        w.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    host, port = srv.sockets[0].getsockname()[:2]
    async with srv:
        tr, sink = await kstamp.open_stamped(loop, _Sink, host, port, kstamp.ClockMap())
        big = b"z" * (16 * 1024 * 1024)
        tr.write(big)
        tr.close()  # most of it is still buffered here
        assert tr.is_closing()
        assert len(await asyncio.wait_for(got, 20)) == len(big)
        await asyncio.wait_for(sink.lost, 10)
