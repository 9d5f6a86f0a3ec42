"""Noise on a real Ray cluster (head + 2 nodes on this machine): clients spread over the nodes,
per-node rows that add up, the mock's fabric sees the bytes, failures are recorded, and nothing
runs afterwards, not even after an interrupt."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import aiohttp
import pytest
from raycluster import (
    actor_states,
    alive_actors,
    children,
    cmdlines,
    kvbench_cli,
    ray_test_cluster,
    read_jsonl,
)

from kvbench.cluster import ray_available
from kvbench.cluster.session import ClusterLimits, connect
from kvbench.errors import UsageError
from kvbench.mock.api.server import MockServer
from kvbench.noise import noise_generator
from kvbench.noise.ray_backend import RayNoiseBackend
from kvbench.noise.ray_plan import RayNoiseOptions
from kvbench.noise.sink import tcp_sink
from kvbench.scenario import FioNoise, Iperf3Noise, TcpNoise

pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.skipif(not ray_available(), reason="Ray is not installed: pip install 'kvbench[ray]'"),
]
ROOT = Path(__file__).resolve().parents[2]
LIMITS = ClusterLimits(cpus_per_noise_client=0.5, start_timeout_s=60.0)


@pytest.fixture(scope="module")
def cluster():
    with ray_test_cluster() as (c, ray):
        connect(limits=LIMITS)  # the test's own connection, with small per-actor reservations
        yield c, ray


class Rows(list):
    def write(self, row):
        self.append(row)


def _ctx_backend(cfg, rows, clients, placement="spread", default_targets=()):
    from kvbench.noise.backend import NoiseContext

    ctx = NoiseContext(
        phase="noisy-1", writer=rows, origin_ns=time.perf_counter_ns(), default_targets=default_targets
    )
    return RayNoiseBackend(cfg, ctx, RayNoiseOptions(clients=clients, placement=placement))


async def _fabric_real_bytes(srv) -> float:
    async with aiohttp.ClientSession() as s, s.get(srv.base_url + "/metrics") as r:
        text = await r.text()
    line = next(ln for ln in text.splitlines() if ln.startswith("kvbench_mock_fabric_noise_real_bytes_total"))
    return float(line.split()[-1])


async def test_four_clients_spread_over_the_nodes_feed_the_mock_fabric(cluster):
    _, ray = cluster
    rows = Rows()
    cfg = TcpNoise(senders=1, rate_bytes_per_s=40e6, chunk_bytes=65536, max_duration_s=60)
    async with MockServer("ci", fabric_port=0) as srv:
        host, port = srv.fabric_address
        backend = _ctx_backend(cfg, rows, clients=4, default_targets=(f"{host}:{port}",))
        async with backend as handle:
            await asyncio.sleep(3.2)
            assert len(cmdlines(f"kvbench.noise.sender {host} {port}")) == 4  # one sender per client
        summary = handle.summary()
        await asyncio.sleep(0.3)  # the sink reads what was in flight
        fabric = await _fabric_real_bytes(srv)
    clients = [r for r in rows if r["client"] != "total"]
    totals = [r for r in rows if r["client"] == "total"]
    # placement: spread = one per node while nodes last, the driver's (head) node last
    cl = summary["cluster"]
    assert cl["placement"] == "spread" and cl["clients_running"] == 4
    assert len({r["node_id"] for r in clients}) >= 2 and len(cl["nodes"]) == 3
    assert sorted(len(n["clients"]) for n in cl["nodes"]) == [1, 1, 2]
    assert all(r["hostname"] for r in clients)
    # every total row is the sum of its client rows; the rows add up to the manifest's totals
    by_t = defaultdict(int)
    for r in clients:
        by_t[r["t_ns"]] += r["bytes"]
    assert {r["t_ns"]: r["bytes"] for r in totals} == dict(by_t)
    assert sum(r["bytes"] for r in totals) == summary["total_bytes"] > 0
    assert summary["total_bytes"] == sum(c["bytes"] for c in summary["clients"])
    assert summary["total_bytes"] == sum(n["bytes"] for n in cl["nodes"])
    for c in summary["clients"]:
        assert c["state"] == "stopped" and c["error"] is None and c["gb_per_s"] >= 0
        assert c["node_id"] and c["hostname"] and "clock_offset_ns" in c
    assert summary["warning"] is None and summary["reached_target"] is True
    print(json.dumps(cl["nodes"]))  # the per-node summary, for `pytest -s`
    assert len(totals) >= 3 and summary["gb_per_s"] == round(summary["mean_bytes_per_s"] / 1e9, 3)
    # the mock's fabric counter saw the bytes (all but what was still in a socket buffer at close)
    assert 0.9 * summary["total_bytes"] <= fabric <= summary["total_bytes"]
    # nothing left running: no sender on any node, every actor dead
    assert cmdlines(f"kvbench.noise.sender {host} {port}") == []
    assert set(actor_states(ray, [c.actor for c in backend.clients])) == {"DEAD"}


async def test_a_dead_or_slow_client_is_recorded_and_the_noise_goes_on(cluster):
    _, ray = cluster
    rows = Rows()
    # 3 clients asked for 30 GB/s each: none reaches it on this box; one is killed midway
    cfg = TcpNoise(senders=1, rate_bytes_per_s=90e9, chunk_bytes=65536, max_duration_s=60)
    async with tcp_sink() as sink:
        backend = _ctx_backend(cfg, rows, clients=3, default_targets=(sink.address,))
        async with backend as handle:
            await asyncio.sleep(1.5)
            ray.kill(backend.clients[1].actor, no_restart=True)
            await asyncio.sleep(2.5)
            assert handle.active
        summary = handle.summary()
    states = {c["client"]: c["state"] for c in summary["clients"]}
    assert states == {"ray-0": "stopped", "ray-1": "lost", "ray-2": "stopped"}
    lost = summary["clients"][1]
    assert lost["error"].startswith("lost") and lost["bytes"] > 0
    assert summary["cluster"]["clients_lost"] == ["ray-1"]
    assert "ray-1 on" in summary["warning"] and "of its 30 GB/s share" in summary["warning"]
    assert summary["reached_target"] is False
    # rows go on without the lost client: the last rows name only the other two
    last_t = max(r["t_ns"] for r in rows)
    assert {r["client"] for r in rows if r["t_ns"] == last_t} == {"ray-0", "ray-2", "total"}
    assert cmdlines(f"kvbench.noise.sender 127.0.0.1 {sink.port}") == []


async def test_no_client_that_can_start_is_a_one_line_error(cluster):
    _, ray = cluster
    async with tcp_sink() as sink:
        dead = sink.port  # nothing listens there once the sink is closed
    cfg = TcpNoise(targets=[f"127.0.0.1:{dead}"], senders=1, max_duration_s=30)
    backend = noise_generator(cfg, phase="noisy-1", writer=None, origin_ns=0, cluster="ray")
    with pytest.raises(UsageError) as exc:
        async with backend:
            pass
    assert exc.value.message.startswith("noise: no noise client started on the Ray cluster: ")
    assert "\n" not in exc.value.message
    assert set(actor_states(ray, [c.actor for c in backend.clients])) == {"DEAD"}


@pytest.mark.skipif(shutil.which("iperf3") is None, reason="iperf3 not installed")
async def test_iperf3_on_two_nodes_rows_placed_by_clock_offset(cluster, tmp_path):
    """iperf3 reports at the end: its rows come back at the stop, placed through the clock offset."""
    procs, servers = [], []
    try:
        for _ in range(2):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            p = subprocess.Popen(
                ["iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", str(port), "--forceflush"],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            procs.append(p)
            while "listening" not in p.stdout.readline():
                pass
            servers.append(f"127.0.0.1:{port}")
        rows = Rows()
        cfg = Iperf3Noise(servers=servers, parallel=1, bitrate="80M", max_duration_s=30)
        backend = _ctx_backend(cfg, rows, clients=2)
        started = time.perf_counter_ns() - backend.handle.origin_ns
        async with backend as handle:
            assert handle.summary()["warning"].startswith("iperf3 reports its totals only when stopped")
            await asyncio.sleep(2.5)
        ended = time.perf_counter_ns() - backend.handle.origin_ns
        summary = handle.summary()
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert {c["state"] for c in summary["clients"]} == {"stopped"}
    assert [c["config"]["servers"] for c in summary["clients"]] == [[servers[0]], [servers[1]]]
    assert len({c["node_id"] for c in summary["clients"]}) == 2
    totals = [r for r in rows if r["client"] == "total"]
    assert len(totals) >= 2 and all(started < r["t_ns"] <= ended for r in rows)
    assert summary["total_bytes"] == sum(c["bytes"] for c in summary["clients"]) > 0


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio not installed")
async def test_fio_clients_on_a_shared_directory_keep_apart(cluster, tmp_path):
    rows = Rows()
    cfg = FioNoise(path=str(tmp_path), rw="write", block_size="256k", jobs=1, size="4M", max_duration_s=30)
    backend = _ctx_backend(cfg, rows, clients=2)
    async with backend as handle:
        await asyncio.sleep(2.3)
        assert len(list(tmp_path.iterdir())) == 2  # one subdirectory per client
    summary = handle.summary()
    assert {c["state"] for c in summary["clients"]} == {"stopped"} and summary["total_bytes"] > 0
    assert {r["client"] for r in rows} == {"ray-0", "ray-1", "total"}
    assert list(tmp_path.iterdir()) == []  # fio unlinked its files, the client its subdirectory


def test_sigint_during_a_ray_noisy_phase_stops_every_remote_generator(cluster, tmp_path):
    c, _ = cluster
    p = kvbench_cli(
        *("run", "throughput", "--noisy", "--pairs", "1", "--cluster", "ray", "--quiet", "--no-report"),
        *("--prompts", "4", "--set", "prompts.lengths=[2000]", "--requests", "4000", "--concurrency", "2"),
        *("--set", "noise.clients=3", "--set", "noise.senders=2", "--set", "noise.rate_bytes_per_s=30000000"),
        *("--set", "cluster.cpus_per_noise_client=0.5", "--output-dir", str(tmp_path)),
        address=c.address,
        wait=False,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(alive_actors("NoiseClient")) < 3:
            time.sleep(0.2)
        time.sleep(2.0)  # the senders run on the nodes, children of the noise actors
        (run_dir,) = list(tmp_path.iterdir())
        actors = alive_actors("NoiseClient")
        senders = children({a["Pid"] for a in actors})
        assert len(actors) == 3 and len(senders) == 6  # 3 clients x 2 senders
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    assert {r["phase"] for r in read_jsonl(run_dir / "noise.jsonl")} == {"noisy-1"}
    rows = [r for r in read_jsonl(run_dir / "noise.jsonl") if r["client"] != "total"]
    assert rows and all(r["node_id"] for r in rows)  # per-node rows came before the interrupt
    time.sleep(0.5)
    assert alive_actors("NoiseClient") == []
    assert not any(os.path.exists(f"/proc/{pid}") for pid in senders)  # no generator left on any node


def test_kvbench_run_throughput_noisy_cluster_ray_writes_per_node_noise_rows(cluster, tmp_path):
    """`kvbench run throughput --noisy --cluster ray`: 4 noise clients spread over the nodes."""
    c, _ = cluster
    p = kvbench_cli(
        *("run", "throughput", "--noisy", "--pairs", "1", "--cluster", "ray", "--quiet", "--no-report"),
        *("--prompts", "4", "--set", "prompts.lengths=[2000]", "--requests", "300", "--concurrency", "2"),
        *("--max-tokens", "64"),  # a noisy phase of a few seconds: full per-second rows
        *("--set", "noise.clients=4", "--set", "noise.senders=1", "--set", "noise.rate_bytes_per_s=40000000"),
        *("--set", "cluster.cpus_per_noise_client=0.5", "--output-dir", str(tmp_path)),
        address=c.address,
    )
    assert p.returncode == 0, p.stderr
    (run_dir,) = list(tmp_path.iterdir())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert (
        manifest["cluster"]["session"]["mode"] == "connected"
        and manifest["cluster"]["session"]["shipped_code"]
    )
    noisy = next(ph for ph in manifest["phases"] if ph["label"] == "noisy")
    noise = noisy["noise"]
    assert noise["cluster"]["clients_running"] == 4 and len(noise["cluster"]["nodes"]) == 3
    assert noise["total_bytes"] == sum(c["bytes"] for c in noise["clients"]) > 0
    rows = read_jsonl(run_dir / "noise.jsonl")
    clients = [r for r in rows if r["client"] != "total"]
    assert len({r["node_id"] for r in clients}) >= 2
    totals = [r for r in rows if r["client"] == "total" and r["phase"] == noisy["name"]]
    assert sum(r["bytes"] for r in totals) == noise["total_bytes"] and len(totals) >= 2
    print("per node:", [(n["node_id"][:8], n["clients"], n["gb_per_s"]) for n in noise["cluster"]["nodes"]])
    # nothing left running: no sender towards the run's sink, no noise actor
    (target,) = {t for cl in noise["clients"] for t in cl["config"]["targets"]}
    assert cmdlines(f"kvbench.noise.sender {target.replace(':', ' ')}") == []
    assert alive_actors("NoiseClient") == []
    rep = subprocess.run(
        [sys.executable, "-m", "kvbench", "report", str(run_dir)], capture_output=True, text=True
    )
    assert rep.returncode == 0, rep.stderr  # the report reads a Ray run like any other
