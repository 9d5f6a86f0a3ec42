"""The tcp noise generator against the in-process sink: rows, rates, and a clean stop every way."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvbench.errors import UsageError
from kvbench.noise import NoiseHandle, noise_generator, tcp_sink
from kvbench.results import JsonlWriter, read_jsonl
from kvbench.scenario import TcpNoise


def child_pids() -> set[int]:
    """Every process whose parent is this one (zombies included: unreaped is stray too)."""
    me = os.getpid()
    pids = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == me:
            pids.add(int(entry))
    return pids


def open_fds() -> tuple[int, int]:
    """(all fds, socket fds) of this process."""
    fds = os.listdir("/proc/self/fd")
    socks = 0
    for fd in fds:
        with contextlib.suppress(OSError):
            socks += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    return len(fds), socks


@pytest.fixture
def no_leaks():
    """Fail a test that leaves a child process, a socket or any fd behind."""
    kids, fds = child_pids(), open_fds()
    yield
    deadline = time.monotonic() + 2  # the loop's child watcher may take a moment to reap
    while child_pids() - kids and time.monotonic() < deadline:
        time.sleep(0.02)
    assert child_pids() - kids == set(), "noise left a child process behind"
    assert open_fds() == fds, "noise left a file descriptor or socket open"


def origin() -> int:
    return time.perf_counter_ns()


async def test_unlimited_senders_record_rows_and_summary(tmp_path: Path, no_leaks: None) -> None:
    path = tmp_path / "noise.jsonl"
    t0 = origin()
    async with tcp_sink() as sink:
        with JsonlWriter(path) as w:
            cfg = TcpNoise(senders=2, chunk_bytes=65536)
            gen = noise_generator(
                cfg, phase="noisy-1", writer=w, origin_ns=t0, default_targets=[sink.address]
            )
            async with gen as h:
                assert h.active and h.started_ns is not None
                await asyncio.sleep(2.3)
                live = h.summary()  # the runner may take it inside the block: the noise so far
                assert live["total_bytes"] > 0 and live["mean_bytes_per_s"] > 0 and live["warning"] is None
            assert not h.active and h.stopped_ns is not None and h.stopped_ns > h.started_ns
        received = sink.bytes_received
    rows = read_jsonl(path)
    totals = [r for r in rows if r["client"] == "total"]
    per = [r for r in rows if r["client"] != "total"]
    assert {r["client"] for r in per} == {"tcp-0", "tcp-1"}
    assert all(r["phase"] == "noisy-1" for r in rows)
    assert len(totals) >= 2
    assert all(r["bytes"] > 0 and r["bytes_per_s"] > 0 for r in totals[:2])
    assert [r["t_ns"] for r in totals] == sorted(r["t_ns"] for r in totals)
    assert totals[0]["t_ns"] == pytest.approx(h.started_ns + 1e9, abs=0.5e9)
    s = h.summary()
    assert s["kind"] == "tcp" and s["config"]["senders"] == 2
    assert s["total_bytes"] == sum(r["bytes"] for r in totals) == sum(r["bytes"] for r in per)
    assert s["total_bytes"] == received  # every byte sent reached the sink (sender counts are exact)
    assert s["mean_bytes_per_s"] > 0 and s["peak_bytes_per_s"] >= s["mean_bytes_per_s"] * 0.9
    assert s["target_bytes_per_s"] is None and s["reached_target"] is None and s["warning"] is None
    assert [c["client"] for c in s["clients"]] == ["tcp-0", "tcp-1"]
    assert s["total_bytes"] >= live["total_bytes"]


async def test_rate_limit_is_roughly_honoured(tmp_path: Path, no_leaks: None) -> None:
    target = 40e6
    async with tcp_sink() as sink:
        cfg = TcpNoise(targets=[sink.address], senders=2, rate_bytes_per_s=target)
        with JsonlWriter(tmp_path / "noise.jsonl") as w:
            async with noise_generator(cfg, phase="p", writer=w, origin_ns=origin()) as h:
                await asyncio.sleep(2.2)
    s = h.summary()
    assert 0.6 * target < s["mean_bytes_per_s"] < 1.3 * target, s
    assert s["target_bytes_per_s"] == target
    totals = [r for r in read_jsonl(tmp_path / "noise.jsonl") if r["client"] == "total"]
    assert all(0.5 * target < r["bytes_per_s"] < 1.5 * target for r in totals[:2]), totals


async def test_stops_when_the_body_raises(no_leaks: None) -> None:
    async with tcp_sink() as sink:
        cfg = TcpNoise(targets=[sink.address], senders=2)
        handle: NoiseHandle | None = None
        with pytest.raises(RuntimeError, match="boom"):
            async with noise_generator(cfg, phase="p", writer=None, origin_ns=origin()) as handle:
                assert len(child_pids()) >= 2  # the senders really are separate processes
                await asyncio.sleep(0.3)
                raise RuntimeError("boom")
        assert handle is not None and not handle.active
        assert handle.summary()["total_bytes"] > 0


async def test_stops_when_the_body_is_cancelled(no_leaks: None) -> None:
    async with tcp_sink() as sink:
        cfg = TcpNoise(targets=[sink.address], senders=2)
        handles: list[NoiseHandle] = []

        async def phase() -> None:
            async with noise_generator(cfg, phase="p", writer=None, origin_ns=origin()) as h:
                handles.append(h)
                await asyncio.sleep(30)

        task = asyncio.create_task(phase())
        while not handles:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not handles[0].active and handles[0].stopped_ns is not None
        before = sink.bytes_received
        await asyncio.sleep(0.3)
        assert sink.bytes_received == before  # nothing is sending any more


async def test_max_duration_is_a_hard_stop(no_leaks: None) -> None:
    async with tcp_sink() as sink:
        cfg = TcpNoise(targets=[sink.address], senders=1, max_duration_s=0.8)
        async with noise_generator(cfg, phase="p", writer=None, origin_ns=origin()) as h:
            await asyncio.sleep(2.2)
            assert not h.active  # the sender stopped by itself; the sampler noticed
            before = sink.bytes_received
            await asyncio.sleep(0.2)
            assert sink.bytes_received == before
    assert h.summary()["total_bytes"] == sink.bytes_received


async def test_refused_target_is_a_usage_error(no_leaks: None) -> None:
    async with tcp_sink() as sink:
        address = sink.address
    cfg = TcpNoise(targets=[address], senders=2)  # nothing listens there any more
    with pytest.raises(
        UsageError, match=rf"noise.targets: cannot stream to the tcp sink {address}: .*refused"
    ):
        async with noise_generator(cfg, phase="p", writer=None, origin_ns=origin()):
            pytest.fail("the body must not run")


async def test_sink_going_away_is_reported(no_leaks: None) -> None:
    async with tcp_sink() as sink:
        cfg = TcpNoise(targets=[sink.address], senders=1)
        async with noise_generator(cfg, phase="p", writer=None, origin_ns=origin()) as h:
            await asyncio.sleep(0.3)
            await sink.close()
            await asyncio.sleep(0.7)
    warning = h.summary()["warning"] or ""
    assert "tcp-0" in warning and "sink closed the connection" in warning


def test_sink_command_prints_port_and_rates() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvbench", "noise", "sink", "--duration", "1.5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        m = re.fullmatch(r"listening on 127\.0\.0\.1:(\d+)\n", first)
        assert m, first
        import socket

        with socket.create_connection(("127.0.0.1", int(m.group(1)))) as s:
            s.sendall(b"x" * 1_000_000)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert re.search(r"t=\s+1\.0s .*connections=", out), out
    assert "received 1,000,000 bytes in 1.5 s" in out, out
