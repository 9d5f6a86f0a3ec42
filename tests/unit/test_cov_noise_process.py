"""The noise kinds' shared machinery: host:port parsing, the stop ladder (ask, SIGTERM, SIGKILL)
that always reaps, bounded draining, the in-process TCP sink's byte count and connection cap, and
the handle's summary arithmetic."""

from __future__ import annotations

import asyncio
import signal
import sys

import pytest

from kvbench.errors import UsageError
from kvbench.noise import sink as sink_mod
from kvbench.noise.handle import NoiseHandle, format_rate
from kvbench.noise.process import cancel_tasks, drain, kill_now, split_host_port, stop_processes, wait_exit
from kvbench.noise.sink import tcp_sink


@pytest.mark.parametrize(
    ("text", "default", "expected"),
    [
        ("host:80", None, ("host", 80)),
        ("host", 5201, ("host", None)),  # port optional: the tool's own default applies
        ("[::1]:9000", None, ("::1", 9000)),
        ("[fe80::1]", 7, ("fe80::1", None)),
        (" 10.0.0.2:1 ", None, ("10.0.0.2", 1)),
    ],
)
def test_split_host_port(text: str, default: int | None, expected: tuple[str, int | None]) -> None:
    assert split_host_port(text, default, "noise.targets") == expected


@pytest.mark.parametrize("text", ["host", "a:b:c", "host:", ":80", "ho st:1", "h:0", "h:70000"])
def test_split_host_port_refuses_naming_the_field(text: str) -> None:
    with pytest.raises(UsageError, match=r"noise\.targets"):
        split_host_port(text, None, "noise.targets")


async def _child(code: str, **kw: object) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(sys.executable, "-c", code, **kw)  # type: ignore[arg-type]


async def test_closing_stdin_is_the_polite_ask() -> None:
    proc = await _child("import sys; sys.stdin.read()", stdin=asyncio.subprocess.PIPE)
    await stop_processes([proc], None, grace=5.0)
    assert proc.returncode == 0  # it ended by itself on EOF, no signal needed


async def test_a_child_that_ignores_every_ask_is_killed_and_reaped() -> None:
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = await _child(code, stdout=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    await proc.stdout.readline()  # its handlers are in place
    await stop_processes([proc], signal.SIGINT, grace=0.1)
    assert proc.returncode == -signal.SIGKILL


async def test_sigterm_is_the_second_step() -> None:
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = await _child(code, stdout=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    await proc.stdout.readline()
    await stop_processes([proc], signal.SIGINT, grace=0.1)
    assert proc.returncode == -signal.SIGTERM


async def test_wait_exit_and_kill_now() -> None:
    proc = await _child("import time; time.sleep(60)")
    assert await wait_exit(proc, 0.05) is False
    kill_now([proc])
    assert await wait_exit(proc, 5.0) is True
    assert proc.returncode == -signal.SIGKILL
    kill_now([proc])  # an ended process is left alone


async def test_drain_keeps_only_the_first_bytes_but_reads_to_the_end() -> None:
    proc = await _child("import sys; sys.stdout.write('a' * 200000 + 'END')", stdout=asyncio.subprocess.PIPE)
    kept = await drain(proc.stdout, limit=10)
    assert kept == b"a" * 10
    assert await wait_exit(proc, 5.0) and proc.returncode == 0  # it was never blocked on a full pipe
    assert await drain(None) == b""


async def test_cancel_tasks_swallows_their_endings() -> None:
    async def forever() -> None:
        await asyncio.sleep(60)

    async def fails() -> None:
        raise RuntimeError("x")

    tasks = [asyncio.create_task(forever()), asyncio.create_task(fails())]
    await asyncio.sleep(0)
    await cancel_tasks(tasks)
    assert tasks[0].cancelled() and tasks[1].done()


async def test_the_sink_counts_every_byte_sent() -> None:
    async with tcp_sink() as s:
        assert s.address == f"127.0.0.1:{s.port}" and s.port > 0
        sizes = [1, 65536, 3 * (1 << 20) + 7]
        for n in sizes:
            _, w = await asyncio.open_connection("127.0.0.1", s.port)
            w.write(b"\0" * n)
            await w.drain()
            w.close()
            await w.wait_closed()
        for _ in range(500):
            if s.bytes_received == sum(sizes):
                break
            await asyncio.sleep(0.01)
        assert s.bytes_received == sum(sizes)
        assert s.connections == len(sizes)


async def test_the_sink_refuses_connections_past_its_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sink_mod, "SINK_MAX_CONNECTIONS", 2)
    async with tcp_sink() as s:
        conns = [await asyncio.open_connection("127.0.0.1", s.port) for _ in range(3)]
        for _ in range(300):
            if s.connections == 2 and len(s.transports) == 2:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        assert s.connections == 2  # the third was aborted, not counted
        reader, _ = conns[2]
        assert await asyncio.wait_for(reader.read(), 5.0) == b""  # closed by the sink
        for _, w in conns:
            w.close()


def test_ipv6_sink_address_is_bracketed() -> None:
    assert sink_mod.TcpSink("::1", 9).address == "[::1]:9"


def _handle(target: float | None = None) -> NoiseHandle:
    return NoiseHandle(kind="tcp", config={}, phase="noisy-1", origin_ns=0, target_bytes_per_s=target)


def test_summary_mean_peak_and_target() -> None:
    h = _handle(target=1000.0)
    h.started_ns, h.stopped_ns = 0, 4_000_000_000
    h.record(1, 1.0, {"a": 3000, "b": 1000})  # a full second at 4000 B/s: the peak
    h.record(2, 0.1, {"a": 1000}, full=False)  # 10 kB/s over a partial interval: not a peak
    h.total_bytes = 8000
    s = h.summary()
    assert s["duration_s"] == 4.0 and s["mean_bytes_per_s"] == 2000.0
    assert s["peak_bytes_per_s"] == 4000.0
    assert s["reached_target"] is True and s["warning"] is None
    h.target_bytes_per_s = 10_000.0
    s = h.summary()
    assert s["reached_target"] is False
    assert "never reached its target rate: 2 kB/s of 10 kB/s" in s["warning"]


def test_summary_warns_when_nothing_was_sent_or_taken_while_running() -> None:
    h = _handle()
    h.started_ns, h.stopped_ns = 0, 1_000_000_000
    assert h.summary()["warning"] == "noise generator sent nothing"
    running = _handle()
    running.started_ns = 0
    assert "reports its totals only when stopped" in running.summary()["warning"]
    running.live_bytes = lambda: 500
    assert running.summary()["total_bytes"] == 500


def test_record_ignores_empty_intervals_and_format_rate() -> None:
    h = _handle()
    h.record(1, 0.0, {"a": 5})
    assert h.intervals == 0
    assert format_rate(2.5e9) == "2.5 GB/s" and format_rate(1.5e6) == "1.5 MB/s"
    assert format_rate(999.0).endswith("B/s") and "k" not in format_rate(999.0)
