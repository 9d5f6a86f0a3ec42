"""The iperf3 and fio adapters against the real programs (skipped, with the reason, when absent)."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvbench.errors import UsageError
from kvbench.noise import noise_generator
from kvbench.results import JsonlWriter, read_jsonl
from kvbench.scenario import FioNoise, Iperf3Noise


def child_pids() -> set[int]:
    me = os.getpid()
    pids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                pids.add(int(entry))
    return pids


def assert_no_new_children(before: set[int]) -> None:
    deadline = time.monotonic() + 2
    while child_pids() - before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert child_pids() - before == set(), "noise left a child process behind"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


needs_iperf3 = pytest.mark.skipif(
    shutil.which("iperf3") is None, reason="iperf3 not installed: apt-get install iperf3"
)
needs_fio = pytest.mark.skipif(shutil.which("fio") is None, reason="fio not installed: apt-get install fio")


@pytest.fixture
def iperf3_servers() -> Iterator[list[str]]:
    """Two one-shot iperf3 servers on 127.0.0.1, each serving one test."""
    procs, addresses = [], []
    try:
        for _ in range(2):
            port = free_port()
            p = subprocess.Popen(
                ["iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", str(port), "--forceflush"],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            procs.append(p)
            assert p.stdout is not None
            for _ in range(5):  # wait for "Server listening on PORT" without connecting to it
                if "listening" in p.stdout.readline():
                    break
            addresses.append(f"127.0.0.1:{port}")
        yield addresses
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout is not None:
                p.stdout.close()


@needs_iperf3
async def test_iperf3_two_servers_rows_and_summary(tmp_path: Path, iperf3_servers: list[str]) -> None:
    before = child_pids()
    cfg = Iperf3Noise(servers=iperf3_servers, parallel=2, bitrate="200M", max_duration_s=30)
    target = 200e6 / 8 * 2 * 2  # -b is per stream: 2 streams x 2 servers = 100 MB/s
    with JsonlWriter(tmp_path / "noise.jsonl") as w:
        async with noise_generator(cfg, phase="noisy-1", writer=w, origin_ns=time.perf_counter_ns()) as h:
            assert h.active
            await asyncio.sleep(2.2)
            assert "only when stopped" in (h.summary()["warning"] or "")  # -J prints at the end
    assert_no_new_children(before)
    rows = read_jsonl(tmp_path / "noise.jsonl")
    assert {r["client"] for r in rows} == {"iperf3-0", "iperf3-1", "total"}
    totals = [r for r in rows if r["client"] == "total"]
    assert len(totals) >= 2 and all(r["bytes"] > 0 for r in totals)
    assert all(0.5 * target < r["bytes_per_s"] < 1.5 * target for r in totals[:2]), totals
    s = h.summary()
    assert s["kind"] == "iperf3" and s["target_bytes_per_s"] == pytest.approx(target)
    assert 0.6 * target < s["mean_bytes_per_s"] < 1.3 * target, s
    assert s["total_bytes"] == sum(c["bytes"] for c in s["clients"]) > 0
    assert [c["server"] for c in s["clients"]] == iperf3_servers
    assert all(c["error"] is None for c in s["clients"]), s  # SIGINT is the normal end, not an error
    assert s["warning"] is None and s["reached_target"] is True


@needs_iperf3
async def test_iperf3_refused_server_is_a_usage_error() -> None:
    before = child_pids()
    cfg = Iperf3Noise(servers=[f"127.0.0.1:{free_port()}"], parallel=1, max_duration_s=5)
    with pytest.raises(UsageError, match=r"noise.servers: iperf3 -c 127.0.0.1:\d+ failed: .*connect"):
        async with noise_generator(cfg, phase="p", writer=None, origin_ns=time.perf_counter_ns()):
            pytest.fail("the body must not run")
    assert_no_new_children(before)


@needs_fio
async def test_fio_rows_summary_and_cleanup(tmp_path: Path) -> None:
    work = tmp_path / "fio"
    work.mkdir()
    before = child_pids()
    cfg = FioNoise(path=str(work), rw="write", block_size="256k", jobs=2, size="8M", max_duration_s=30)
    with JsonlWriter(tmp_path / "noise.jsonl") as w:
        async with noise_generator(cfg, phase="noisy-1", writer=w, origin_ns=time.perf_counter_ns()) as h:
            assert h.active
            await asyncio.sleep(2.3)
            live = h.summary()
            assert live["total_bytes"] > 0 and live["warning"] is None  # fio reports every second
    assert not h.active
    assert_no_new_children(before)
    rows = read_jsonl(tmp_path / "noise.jsonl")
    assert {r["client"] for r in rows} == {f"fio:{work}", "total"}
    totals = [r for r in rows if r["client"] == "total"]
    assert len(totals) >= 2 and totals[0]["bytes"] > 0
    s = h.summary()
    assert s["kind"] == "fio" and s["total_bytes"] == sum(r["bytes"] for r in totals) > 0
    assert s["clients"][0]["write_bw_bytes"] > 0 and s["warning"] is None
    assert s["duration_s"] < 5  # stopped at the end of the body, not at max_duration_s
    assert list(work.iterdir()) == []  # --unlink=1: fio removed its files


@needs_fio
async def test_fio_bad_option_is_a_usage_error(tmp_path: Path) -> None:
    cfg = FioNoise(path=str(tmp_path), block_size="lots", max_duration_s=5)
    with pytest.raises(UsageError, match="noise: fio exited"):
        async with noise_generator(cfg, phase="p", writer=None, origin_ns=time.perf_counter_ns()):
            pytest.fail("the body must not run")
