"""The Sampler's own rules (kvbench.telemetry.sampler): its own connection, the run's clock, a slow
scrape skips ticks instead of queueing them, a server without /metrics is asked once."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from kvbench.client.control import ControlClient
from kvbench.engines.telemetry import Scraper
from kvbench.results import JsonlWriter, read_jsonl
from kvbench.telemetry.exporters import ScrapeFailed
from kvbench.telemetry.sampler import Sampler, Source

METRICS = "# TYPE vllm:prefix_cache_hits counter\nvllm:prefix_cache_hits_total 5\n"


async def metrics_server(status: int = 200) -> tuple[web.AppRunner, str, list[int]]:
    """A /metrics that records the client port of every request (which connection asked)."""
    ports: list[int] = []

    async def handle(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        ports.append(peer[1] if peer else -1)
        return web.Response(text=METRICS, status=status)

    app = web.Application()
    app.router.add_get("/metrics", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}", ports


async def test_scrapes_during_a_phase_use_a_connection_of_their_own_on_the_run_clock(tmp_path: Path):
    runner, url, ports = await metrics_server()
    origin = time.perf_counter_ns()
    async with aiohttp.ClientSession() as run_session:
        run_http = ControlClient(run_session, url, {})
        writer = JsonlWriter(tmp_path / "metrics.jsonl")
        sampler = Sampler(Scraper(run_http, writer, origin), [], tmp_path)
        await sampler.scrape("boundary")  # a phase boundary: the run's own session
        run_ports = set(ports)
        async with sampler.during("cached", 0.1):
            await asyncio.sleep(0.55)
        writer.close()
    await runner.cleanup()
    during = ports[len(run_ports) :]
    assert len(during) >= 2 and not set(during) & run_ports  # never the run's connection
    rows = read_jsonl(tmp_path / "metrics.jsonl")
    stamps = sorted({r["t_ns"] for r in rows if r["phase"] == "cached"})
    assert stamps and all(
        0 < t < time.perf_counter_ns() - origin for t in stamps
    )  # ns since the run's origin


async def test_a_slow_source_skips_ticks_and_is_never_asked_twice_at_once(tmp_path: Path):
    state = {"in_flight": 0, "most": 0, "calls": 0}

    async def slow(session: Any) -> dict[Any, float]:
        state["in_flight"] += 1
        state["most"] = max(state["most"], state["in_flight"])
        state["calls"] += 1
        await asyncio.sleep(0.25)
        state["in_flight"] -= 1
        raise ScrapeFailed("no answer within 0.25 s")

    engine: Any = Scraper(None, None, origin_ns=0, enabled=False)  # type: ignore[arg-type]
    warnings: list[str] = []
    sampler = Sampler(engine, [Source("slow", "prometheus", slow)], tmp_path, warn=warnings.append)
    async with sampler.during("cached", 0.1):
        await asyncio.sleep(0.9)
    assert state["most"] == 1  # one at a time
    # about 0.9 / (0.1 + 0.25) ticks, the first at once, plus the closing read: not 9 queued ticks
    assert 3 <= state["calls"] <= 6
    assert len(warnings) == 1 and sampler.errors == len(read_jsonl(tmp_path / "telemetry.jsonl"))


async def test_a_server_without_metrics_is_asked_once(tmp_path: Path):
    runner, url, ports = await metrics_server(status=404)
    async with aiohttp.ClientSession() as session:
        sampler = Sampler(Scraper(ControlClient(session, url, {}), None, 0), [], tmp_path)
        async with sampler.during("cached", 0.1):
            await asyncio.sleep(0.45)
        assert await sampler.scrape("after") is None
    await runner.cleanup()
    assert len(ports) == 1 and not sampler.enabled


async def test_rows_go_to_disk_and_memory_stays_flat(tmp_path: Path):
    """An hour at 0.1 s is 36,000 scrapes: the sampler must keep none of them."""
    import tracemalloc

    from kvbench.results import JsonlWriter as Writer

    samples = {
        (f"node_network_receive_bytes_total_{i}", (("device", f"eth{i}"),)): float(i) for i in range(50)
    }

    async def read(session: Any) -> dict[Any, float]:
        return samples

    engine: Any = Scraper(None, None, origin_ns=0, enabled=False)  # type: ignore[arg-type]
    sampler = Sampler(engine, [], tmp_path)
    src = Source("fake", "node", read)
    writer = Writer(tmp_path / "telemetry.jsonl")
    for _ in range(200):  # warm up: caches, interned strings
        await sampler.sample(src, None, writer, "cached")
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(1000):
        await sampler.sample(src, None, writer, "cached")
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    writer.close()
    assert sampler.rows_written == 1200 * 50
    assert grown < 64 * 1024, grown  # 50,000 rows written, next to nothing held


def test_an_exporter_url_with_credentials_is_named_without_them():
    from kvbench.telemetry.sampler import exporter_source

    src = exporter_source("http://user:secret@gpu:9400/metrics", "dcgm", 1.0)
    assert "secret" not in src.name and src.name == "http://gpu:9400/metrics"
