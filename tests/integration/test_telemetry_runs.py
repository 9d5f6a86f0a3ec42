"""A small throughput run on the embedded mock, sampled every 0.1 s with a node- and a DCGM-style
exporter beside it and a dead one: the report's slices carry hit ratio, tier GB/s and TTFT, the
exporters' rows are there, the dead one is rows with errors and the run completes."""

from __future__ import annotations

import socket
from pathlib import Path

import pandas as pd
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from kvbench.report.render import write_report
from kvbench.results import read_jsonl, read_manifest
from kvbench.run.runner import RunOptions, run_scenario
from kvbench.scenario import load_scenario
from kvbench.telemetry.sampler import TELEMETRY

pytestmark = pytest.mark.slow


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_throughput_run_in_slices_with_exporters(tmp_path: Path):
    node_reg, dcgm_reg = CollectorRegistry(), CollectorRegistry()
    Counter("node_network_receive_bytes", "received", ["device"], registry=node_reg).labels("eth0").inc(1e6)
    Gauge("DCGM_FI_DEV_GPU_UTIL", "utilisation %", ["gpu"], registry=dcgm_reg).labels("0").set(73)
    Gauge("DCGM_FI_DEV_FB_USED", "MiB used", ["gpu"], registry=dcgm_reg).labels("0").set(1024)
    node, _ = start_http_server(0, addr="127.0.0.1", registry=node_reg)
    dcgm, _ = start_http_server(0, addr="127.0.0.1", registry=dcgm_reg)
    dead = f"http://127.0.0.1:{closed_port()}/metrics"
    overrides = {
        "prompts.count": 6,
        "prompts.lengths": {"min": 20000, "max": 40000},
        "load.requests": 18,
        "load.concurrency": 3,
        "target.mock_overrides": {"time_scale": 0.05},
        "telemetry.interval_s": 0.1,
        "telemetry.exporters": [
            {"url": f"http://127.0.0.1:{node.server_port}", "kind": "node"},
            {"url": f"http://127.0.0.1:{dcgm.server_port}/metrics", "kind": "dcgm"},
            {"url": dead, "kind": "node"},
        ],
    }
    scn, _ = load_scenario("throughput", overrides)
    try:
        outcome = await run_scenario(scn, RunOptions(output_dir=tmp_path, quiet=True, report=False))
    finally:
        node.shutdown()
        dcgm.shutdown()
    assert outcome.status == "complete" and outcome.exit_code == 0  # a dead exporter never fails a run
    run_dir = outcome.run_dir

    phase = next(p for p in read_manifest(run_dir)["phases"] if p["name"] == "cached")
    during = [m for m in read_jsonl(run_dir / "metrics.jsonl") if m["phase"] == "cached"]
    stamps = {m["t_ns"] for m in during}
    assert len(stamps) >= 0.4 * phase["duration_s"] / 0.1  # every 0.1 s on the run's clock (load: lenient)
    assert all(phase["started_ns"] - 1e9 <= t <= phase["ended_ns"] + 1e9 for t in stamps)

    rows = read_jsonl(run_dir / TELEMETRY)
    kinds = {(r["kind"], r.get("name")) for r in rows if "error" not in r}
    assert ("node", "node_network_receive_bytes_total") in kinds
    assert ("dcgm", "DCGM_FI_DEV_GPU_UTIL") in kinds and ("host", "node_network_receive_bytes_total") in kinds
    failed = [r for r in rows if r["source"] == dead]
    assert failed and all("cannot reach it" in r["error"] for r in failed)

    write_report(run_dir, quiet=True)
    sl = pd.read_csv(run_dir / "slices.csv")
    cached = sl[sl["phase"] == "cached"]
    # a slice is named for the phase at its middle, so the phase's last answers (it ends when they do)
    # can sit in a slice named for what follows: the 18 answers are in the slices that overlap it
    first = min(p["started_ns"] for p in read_manifest(run_dir)["phases"])
    start_s, end_s = (phase["started_ns"] - first) / 1e9, (phase["ended_ns"] - first) / 1e9
    width = float(sl["slice_s"].iloc[0])
    overlapping = sl[(sl["t_s"] < end_s) & (sl["t_s"] + width > start_s)]
    assert round(overlapping["requests_per_s"].sum() * width) >= 18
    assert cached["ttft_p50_ms"].notna().any() and cached["hit_ratio"].notna().any()
    assert cached["hit_ratio"].max() > 0.3  # the prompts' second uses hit
    # the engine's per-tier bytes and the mock's ground truth count the same reads
    engine_gb = (sl["onboard_G4_gb_s"] * sl["slice_s"]).sum()
    truth_gb = (sl["gt_onboard_G4_gb_s"] * sl["slice_s"]).sum()
    assert engine_gb > 0 and engine_gb == pytest.approx(truth_gb, rel=0.05)
    assert sl["gpu_util_pct"].dropna().eq(73).all() and sl["scrape_errors"].sum() == len(failed)
    md = (run_dir / "report.md").read_text()
    assert "## Over time" in md and "onboard G4 GB/s" in md and "(over_time.png)" in md
    assert (run_dir / "over_time.png").stat().st_size > 10_000
    assert (run_dir / "onboard_vs_ttft.png").exists()
