"""kvbench.client.transport.txstamp: software TX stamps on loopback, their parsing, the fallbacks."""

from __future__ import annotations

import asyncio
import select
import socket
import struct
import time
from types import SimpleNamespace

import pytest

from kvbench.client.record import RequestRecord
from kvbench.client.transport import kstamp, txstamp

linux_only = pytest.mark.skipif(
    txstamp.unavailable() is not None or kstamp.unavailable() is not None, reason=str(txstamp.unavailable())
)


def _pair() -> tuple[socket.socket, socket.socket]:
    with socket.socket() as lst:
        lst.bind(("127.0.0.1", 0))
        lst.listen()
        client = socket.create_connection(lst.getsockname())
        server, _ = lst.accept()
    for s in (client, server):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return client, server


def _anc(
    key: int, real_ns: int, origin: int = txstamp.SO_EE_ORIGIN_TIMESTAMPING
) -> list[tuple[int, int, bytes]]:
    ts = struct.pack("@qq", real_ns // 1_000_000_000, real_ns % 1_000_000_000) + bytes(32)
    err = struct.pack("@IBBBBII", 42, origin, 0, 0, 0, txstamp.SCM_TSTAMP_SND, key) + bytes(16)
    return [(socket.SOL_SOCKET, txstamp.SCM_TIMESTAMPING, ts), (socket.IPPROTO_IP, txstamp.IP_RECVERR, err)]


def test_parse_reads_the_byte_offset_and_the_software_stamp():
    assert txstamp.parse(_anc(9, 1_700_000_000_123_456_789)) == (9, 1_700_000_000_123_456_789)
    assert txstamp.parse(_anc(9, 5, origin=2)) is None  # an ICMP error, not a timestamp
    assert txstamp.parse(_anc(9, 5)[:1]) is None  # no sock_extended_err: no offset to match
    assert txstamp.parse([]) is None


def test_covers_compares_offsets_that_wrap():
    assert txstamp.covers(14, 14) and txstamp.covers(20, 14) and not txstamp.covers(13, 14)
    assert txstamp.covers(3, 0xFFFFFFF0)  # past the u32 wrap
    assert not txstamp.covers(0xFFFFFFF0, 3)


def test_no_tx_stamps_say_why(monkeypatch):
    monkeypatch.setattr(txstamp.sys, "platform", "darwin")
    assert txstamp.unavailable() == "no SO_TIMESTAMPING transmit timestamps on darwin"
    monkeypatch.setenv("KVBENCH_TX_STAMPS", "0")
    assert "KVBENCH_TX_STAMPS=0" in (txstamp.unavailable() or "")
    with socket.socket() as s:
        assert not txstamp.enable(s) and txstamp.attach(s) is None


def test_a_missing_stamp_keeps_the_loops_and_says_user():
    """No stamp by the first response bytes, or one from before the write: the row keeps its own."""
    clock = kstamp.ClockMap()
    for real in (None, time.time_ns() - 10**9):
        sent = time.perf_counter_ns()  # the loop's stamp before the write (origin 0)
        rec = RequestRecord(request_id="r", sent_ns=sent)
        conn = SimpleNamespace(
            tx=SimpleNamespace(take=lambda real=real: real), pool=SimpleNamespace(clock=clock)
        )
        txstamp.settle(conn, SimpleNamespace(rec=rec), 0, time.perf_counter_ns())
        row = rec.to_row()
        assert row["send_clock_source"] == "user" and row["sent_ns"] == sent and row["sent_user_ns"] is None
    sent = time.perf_counter_ns()
    rec = RequestRecord(request_id="r", sent_ns=sent)
    left = time.time_ns()  # when the last byte left, on the kernel's clock
    conn = SimpleNamespace(tx=SimpleNamespace(take=lambda: left), pool=SimpleNamespace(clock=clock))
    txstamp.settle(conn, SimpleNamespace(rec=rec), 0, time.perf_counter_ns())
    row = rec.to_row()  # a stamp after the write: the row's start, the loop's kept beside it
    assert row["send_clock_source"] == "kernel_tx" and row["sent_user_ns"] == sent <= row["sent_ns"]
    assert row["send_lag_ms"] >= 0
    clock.close()


@linux_only
def test_the_stamp_covers_the_last_byte_and_lies_between_write_and_reply():
    client, server = _pair()
    with client, server:
        client.setblocking(False)
        assert txstamp.enable(client)
        tx = txstamp.TxStamps(client)
        clock = kstamp.ClockMap()
        kstamp.enable(client)
        for n in (10, 5, 3000):  # the ids count bytes: each send's stamp is for its own last byte
            before = time.perf_counter_ns()
            tx.wrote(n)
            assert client.send(b"x" * n) == n
            tx.drain()
            assert not tx.due, "loopback queues the stamp before send() returns"
            got = b""
            while len(got) < n:
                got += server.recv(65536)
            server.send(b"ok")
            time.sleep(0.002)
            _data, rx = kstamp.read(client)
            real = tx.take()
            assert real is not None
            t = txstamp.to_mono(clock, real, time.perf_counter_ns())
            assert t is not None and before <= t + clock.window_ns
            if rx is not None:  # the reply's kernel RX stamp (RX stamping may still be warming up)
                assert t < rx - clock.offset
        assert tx.stamps == 3
        # the error queue is empty once read: no POLLERR left to wake the loop for ever
        p = select.poll()
        p.register(client, select.POLLIN)
        assert not any(ev & select.POLLERR for _fd, ev in p.poll(0))
        clock.close()


@linux_only
async def test_the_stamped_transport_drains_the_stamps_of_what_it_writes():
    client, server = _pair()
    received: list[bytes] = []

    class Proto:
        def connection_made(self, transport):
            pass

        def data_received_stamped(self, data, t_user, t_kernel):
            received.append(data)

        def eof_received(self):
            return False

        def connection_lost(self, exc):
            pass

    with server:
        client.setblocking(False)
        assert kstamp.enable(client)
        clock = kstamp.ClockMap()
        tr = kstamp.StampedTransport(
            asyncio.get_running_loop(), client, Proto(), clock, txstamp.attach(client)
        )
        assert tr.tx is not None
        tr.writelines((b"head ", b"body"))
        assert tr.tx.queued == 9 and not tr.tx.due and tr.tx.real is not None  # read right after the write
        tr.write(b"again")
        assert tr.tx.queued == 14 and tr.tx.real is not None and tr.tx.stamps == 2
        server.send(b"reply")
        for _ in range(200):
            if received:
                break
            await asyncio.sleep(0.005)
        assert received == [b"reply"]
        tr.abort()
        await asyncio.sleep(0)
        clock.close()
