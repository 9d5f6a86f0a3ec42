"""The mock's fabric sink: a flow's offered rate from its declaration or its real bytes, the
window that turns a silent flow off, and the sink's rate callback over a real loopback socket."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kvbench.mock.costs.fabric import HEADER_MAX, FabricSink, _SinkProtocol
from kvbench.mock.metrics import MockMetrics


class _Transport:
    def abort(self) -> None:
        pass


def _sink(scale: float = 1.0, window_s: float = 0.5, tick_s: float = 0.05) -> FabricSink:
    return FabricSink("127.0.0.1", 0, scale, lambda total, flows: None, MockMetrics("m"), window_s, tick_s)


def _flow(sink: FabricSink) -> _SinkProtocol:
    p = _SinkProtocol(sink)
    p.connection_made(_Transport())  # type: ignore[arg-type]
    return p


def _feed(p: _SinkProtocol, data: bytes) -> None:
    buf = p.get_buffer(len(data))
    buf[: len(data)] = data
    p.buffer_updated(len(data))


def test_a_declared_rate_is_the_flow_s_offered_rate_whatever_its_bytes() -> None:
    sink = _sink()
    p = _flow(sink)
    _feed(p, b"KVBNOISE 2.5e9\n" + b"x" * 100)
    assert p.declared == 2.5e9
    assert p.offered(sink.tick_s, sink.noise_scale) == 2.5e9
    _feed(p, b"y" * 7)  # a few real bytes: still on, still the declared rate
    assert p.offered(sink.tick_s, sink.noise_scale) == 2.5e9
    assert sink.real_bytes_total == 15 + 100 + 7


def test_the_header_may_arrive_in_pieces() -> None:
    sink = _sink()
    p = _flow(sink)
    for piece in (b"KVB", b"NOISE 12", b"34\npayload"):
        _feed(p, piece)
    assert p.declared == 1234.0


def test_a_flow_is_off_after_a_window_without_bytes() -> None:
    sink = _sink(window_s=0.2, tick_s=0.05)  # 4 ticks
    assert sink.window_ticks == 4
    p = _flow(sink)
    _feed(p, b"KVBNOISE 100\n")
    rates = [p.offered(sink.tick_s, 1.0) for _ in range(6)]
    # on for the tick with bytes and the 3 after it (still in the window), then off
    assert rates == [100.0, 100.0, 100.0, 100.0, 0.0, 0.0]


def test_an_undeclared_flow_is_modelled_from_its_real_rate_times_the_scale() -> None:
    sink = _sink(scale=1000.0, window_s=0.1, tick_s=0.05)  # 2 ticks in the window
    p = _flow(sink)
    _feed(p, b"plain bytes, no header" + b"z" * 78)  # 100 B this tick
    assert p.declared is None
    # 100 real bytes over a window of 1 tick so far (0.05 s) = 2000 B/s, x1000 modelled
    assert p.offered(sink.tick_s, sink.noise_scale) == pytest.approx(2000.0 * 1000)
    _feed(p, b"w" * 300)
    # now 400 B over 2 ticks (0.1 s)
    assert p.offered(sink.tick_s, sink.noise_scale) == pytest.approx(4000.0 * 1000)


@pytest.mark.parametrize("line", [b"KVBNOISE fast\n", b"KVBNOISE -5\n", b"KVBNOISE inf\n", b"KVBNOISE 0\n"])
def test_a_bad_declaration_falls_back_to_real_bytes(line: bytes) -> None:
    sink = _sink()
    p = _flow(sink)
    _feed(p, line)
    assert p.declared is None
    assert p.offered(sink.tick_s, 1.0) == pytest.approx(len(line) / sink.tick_s)


def test_a_header_with_no_newline_is_read_from_its_first_header_max_bytes() -> None:
    sink = _sink()
    p = _flow(sink)
    digits = HEADER_MAX - len(b"KVBNOISE ")
    _feed(p, b"KVBNOISE " + b"1" + b"0" * (digits + 20))  # no newline, longer than the cap
    assert p._head is None  # no longer reading a header
    assert p.declared == pytest.approx(10.0 ** (digits - 1))  # only the capped digits count
    garbage = _flow(sink)
    _feed(garbage, b"KVBNOISE " + b"1e" * HEADER_MAX)
    assert garbage._head is None and garbage.declared is None


def test_connections_come_and_go_from_the_sink() -> None:
    sink = _sink()
    a, b = _flow(sink), _flow(sink)
    assert sink.flows == {a, b} and len(sink.transports) == 2
    a.connection_lost(None)
    assert sink.flows == {b} and len(sink.transports) == 1


async def test_the_sink_reports_each_change_of_the_offered_rates() -> None:
    seen: list[tuple[float, tuple[float, ...]]] = []
    sink = FabricSink(
        "127.0.0.1", 0, 1.0, lambda total, flows: seen.append((total, flows)), MockMetrics("m"), 0.1, 0.01
    )
    host, port = await sink.start()
    try:
        writers: list[Any] = []
        for rate in (3e9, 5e9):
            _, w = await asyncio.open_connection(host, port)
            w.write(f"KVBNOISE {rate:g}\n".encode() + b"n" * 1000)
            await w.drain()
            writers.append(w)
        for _ in range(300):  # until both flows are seen (at most 3 s)
            if seen and seen[-1][0] == pytest.approx(8e9):
                break
            await asyncio.sleep(0.01)
        assert seen[-1][0] == pytest.approx(8e9)
        assert sorted(seen[-1][1]) == [3e9, 5e9]
        assert sink.real_bytes_total >= 2 * 1000
        for w in writers:
            w.close()
        for _ in range(300):  # silent past the window: the flows are off
            if seen[-1][0] == 0.0:
                break
            await asyncio.sleep(0.01)
        assert seen[-1] == (0.0, ())
    finally:
        await sink.close()
