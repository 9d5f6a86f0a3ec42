"""Host and GPU exporters (kvbench.telemetry): real prometheus-client exporters on port 0, a dead one, a
slow one and one that answers garbage, sampled by the Sampler every 0.1 s; this host's /proc read as
node-exporter series; a bad exporter URL is one line, exit 2."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any, ClassVar

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from kvbench.engines.telemetry import Scraper
from kvbench.errors import UsageError
from kvbench.report.slices.frame import telemetry_columns
from kvbench.results import read_jsonl
from kvbench.scenario import load_scenario
from kvbench.telemetry.exporters import ScrapeFailed, parse_exporter
from kvbench.telemetry.host import parse_diskstats, parse_net_dev
from kvbench.telemetry.sampler import TELEMETRY, Sampler, exporter_source, host_source

NET_DEV = """Inter-|   Receive                            |  Transmit
 face |bytes packets errs drop fifo frame compressed multicast|bytes packets errs drop fifo colls ...
    lo: 9000   10 0 0 0 0 0 0   9000  10 0 0 0 0 0 0
  eth0: 123456 100 0 0 0 0 0 0  654321 200 0 0 0 0 0 0
"""
DISKSTATS = """   8       0 sda 100 0 2048 10 50 0 4096 20 0 30 30 0 0 0 0
   8       1 sda1 90 0 2000 9 40 0 4000 18 0 27 27 0 0 0 0
   7       0 loop0 5 0 80 0 0 0 0 0 0 0 0 0 0 0 0
"""


def test_proc_files_read_as_node_exporter_series():
    net = parse_net_dev(NET_DEV)
    assert net == {
        ("node_network_receive_bytes_total", (("device", "eth0"),)): 123456.0,
        ("node_network_transmit_bytes_total", (("device", "eth0"),)): 654321.0,
    }  # lo is not the wire
    disk = parse_diskstats(DISKSTATS, whole_disks={"sda", "loop0"})
    assert disk == {
        ("node_disk_read_bytes_total", (("device", "sda"),)): 2048 * 512.0,
        ("node_disk_written_bytes_total", (("device", "sda"),)): 4096 * 512.0,
    }  # sda1's sectors are sda's again; loop devices are not disks


def test_an_exporter_kind_keeps_its_own_series_and_garbage_is_one_line():
    text = (
        "# TYPE node_network_receive_bytes_total counter\n"
        'node_network_receive_bytes_total{device="eth0"} 10\n'
        "# TYPE node_boot_time_seconds gauge\nnode_boot_time_seconds 1.7e9\n"
        'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 55\n'
    )
    assert set(parse_exporter("node", text)) == {("node_network_receive_bytes_total", (("device", "eth0"),))}
    assert set(parse_exporter("dcgm", text)) == {("DCGM_FI_DEV_GPU_UTIL", (("gpu", "0"),))}
    assert len(parse_exporter("prometheus", text)) == 3
    with pytest.raises(ScrapeFailed, match="no dcgm series"):
        parse_exporter("dcgm", "# nothing here\n")
    with pytest.raises(ScrapeFailed, match="not Prometheus text"):
        parse_exporter("prometheus", "<html>{{{ not metrics\n")


def test_a_bad_exporter_url_is_one_line_exit_2():
    with pytest.raises(UsageError) as err:
        load_scenario("throughput", {"telemetry.exporters": [{"url": "ftp://gpu:9400", "kind": "dcgm"}]})
    assert err.value.exit_code == 2 and "\n" not in str(err.value)
    assert str(err.value).startswith("telemetry.exporters.0.url:")
    with pytest.raises(UsageError, match=r"telemetry\.exporters\.0\.kind"):
        load_scenario("throughput", {"telemetry.exporters": [{"url": "http://gpu:9400", "kind": "gpu"}]})
    with pytest.raises(UsageError, match=r"telemetry\.interval_s"):
        load_scenario("throughput", {"telemetry.interval_s": 0.05})
    scn, _ = load_scenario(
        "throughput", {"telemetry.exporters": [{"url": "http://gpu:9400", "kind": "dcgm"}]}
    )
    assert scn.telemetry.exporters[0].url == "http://gpu:9400/metrics"  # the usual path when none is named


def exporters() -> tuple[Any, Any, Counter, Gauge]:
    """A node-exporter-like and a DCGM-like exporter, each prometheus-client on its own registry."""
    node_reg, dcgm_reg = CollectorRegistry(), CollectorRegistry()
    rx = Counter("node_network_receive_bytes", "bytes received", ["device"], registry=node_reg)
    Counter("node_disk_read_bytes", "bytes read", ["device"], registry=node_reg).labels("nvme0n1").inc(4096)
    Gauge("node_boot_time_seconds", "not kept", registry=node_reg).set(1.7e9)
    util = Gauge("DCGM_FI_DEV_GPU_UTIL", "GPU utilisation (%)", ["gpu", "UUID"], registry=dcgm_reg)
    mem = Gauge("DCGM_FI_DEV_FB_USED", "framebuffer used (MiB)", ["gpu", "UUID"], registry=dcgm_reg)
    for gpu in ("0", "1"):
        mem.labels(gpu, f"GPU-{gpu}").set(40960)
    node, _ = start_http_server(0, addr="127.0.0.1", registry=node_reg)
    dcgm, _ = start_http_server(0, addr="127.0.0.1", registry=dcgm_reg)
    return node, dcgm, rx, util


async def misbehaving() -> tuple[web.AppRunner, int]:
    """One route that answers garbage, one that answers too late."""

    async def garbage(request: web.Request) -> web.Response:
        return web.Response(text="<html>{{ certainly not metrics\n")

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(1.5)
        return web.Response(text="")

    app = web.Application()
    app.router.add_get("/garbage", garbage)
    app.router.add_get("/slow", slow)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class NoEngine:
    base_url = "http://unused"
    headers: ClassVar[dict[str, str]] = {}


async def test_sampler_scrapes_node_and_dcgm_exporters_and_a_failing_one_is_rows_and_one_warning(
    tmp_path: Path,
):
    node, dcgm, rx, util = exporters()
    runner, port = await misbehaving()
    dead = f"http://127.0.0.1:{closed_port()}/metrics"
    warnings: list[str] = []
    sources = [
        exporter_source(f"http://127.0.0.1:{node.server_port}/metrics", "node", 1.0),
        exporter_source(f"http://127.0.0.1:{dcgm.server_port}/metrics", "dcgm", 1.0),
        exporter_source(dead, "node", 1.0),
        exporter_source(f"http://127.0.0.1:{port}/garbage", "prometheus", 1.0),
        exporter_source(f"http://127.0.0.1:{port}/slow", "dcgm", 0.3),
        host_source(),
    ]
    engine: Any = Scraper(NoEngine(), None, origin_ns=0, enabled=False)
    sampler = Sampler(engine, sources, tmp_path, warn=warnings.append)
    try:
        async with sampler.during("cached", 0.1):
            for step in range(8):
                rx.labels("eth0").inc(250_000_000)
                util.labels("0", "GPU-0").set(10 * step)
                util.labels("1", "GPU-1").set(90)
                await asyncio.sleep(0.1)
    finally:
        node.shutdown()
        dcgm.shutdown()
        await runner.cleanup()
    rows = read_jsonl(tmp_path / TELEMETRY)
    by_source: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_source.setdefault(r["source"], []).append(r)
    node_rows = by_source[sources[0].name]
    assert {r["name"] for r in node_rows} == {
        "node_network_receive_bytes_total",
        "node_disk_read_bytes_total",
    }
    assert len({r["t_ns"] for r in node_rows}) >= 3  # sampled again and again, not once
    dcgm_rows = by_source[sources[1].name]
    assert {r["name"] for r in dcgm_rows} == {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"}
    assert {r["labels"]["gpu"] for r in dcgm_rows} == {"0", "1"}
    for name, why in (
        (dead, "cannot reach it"),
        (sources[3].name, "not Prometheus text"),
        (sources[4].name, "no answer within 0.3 s"),
    ):
        failed = by_source[name]
        assert failed and all(why in r["error"] and "value" not in r for r in failed)
    assert len(warnings) == 3 and all("the run goes on" in w for w in warnings)  # one per failing source
    assert any(r["kind"] == "host" for r in rows)

    # the report's view of the same rows: GB/s from the counter's rise, GPU % and memory per slice
    import numpy as np

    ts = [r["t_ns"] for r in rows]
    edges = np.array([min(ts) - 1, max(ts) + 1], dtype=float)
    cols = telemetry_columns(rows, edges)
    rx_rows = sorted(
        (r["t_ns"], r["value"]) for r in node_rows if r["name"] == "node_network_receive_bytes_total"
    )
    seconds = (edges[1] - edges[0]) / 1e9
    assert cols["node_net_rx_gb_s"][0] * seconds == pytest.approx((rx_rows[-1][1] - rx_rows[0][1]) / 1e9)
    assert cols["gpu_mem_used_gb"][0] == pytest.approx(2 * 40960 * 2**20 / 1e9)
    assert 45 <= cols["gpu_util_pct"][0] <= 90  # GPU 1 at 90, GPU 0 climbing from 0 to 70
    assert cols["scrape_errors"][0] == sum(1 for r in rows if "error" in r)
