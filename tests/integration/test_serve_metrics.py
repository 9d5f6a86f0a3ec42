"""`--serve-metrics`: a throughput run on the embedded mock, scraped over HTTP while it runs and
once more after: mid-run counts are part of the rows, and the final counters equal the rows
requests.jsonl holds, phase by phase and status by status; TTFT's histogram counts the ok rows."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from kvbench.results import read_jsonl
from kvbench.run.runner import RunOptions, run_scenario
from kvbench.scenario import load_scenario
from kvbench.telemetry.serve_metrics import RunMetrics

pytestmark = pytest.mark.slow

OVERRIDES = {
    "prompts.count": 8,
    "prompts.lengths": {"min": 2000, "max": 4000},
    "load.requests": 40,
    "load.concurrency": 4,
    "test.baseline": True,
}


def samples(url: str) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def requests_total(got: dict[tuple[str, tuple], float]) -> dict[tuple[str, str], float]:
    return {
        (dict(labels)["phase"], dict(labels)["status"]): v
        for (name, labels), v in got.items()
        if name == "kvbench_requests_total"
    }


async def test_served_counters_follow_the_rows(tmp_path: Path) -> None:
    scn, _ = load_scenario("throughput", OVERRIDES)
    metrics = RunMetrics()
    mid: list[dict[tuple[str, str], float]] = []
    running = threading.Event()
    with metrics.serve("127.0.0.1", 0) as url:
        assert url.startswith("http://127.0.0.1:") and not url.endswith(":0/metrics")

        def scrape_while_running() -> None:
            while running.is_set():
                counts = requests_total(samples(url))
                if counts:
                    mid.append(counts)
                time.sleep(0.02)

        running.set()
        scraper = threading.Thread(target=scrape_while_running, daemon=True)
        scraper.start()
        try:
            opts = RunOptions(output_dir=tmp_path, quiet=True, report=False, metrics=metrics)
            outcome = await run_scenario(scn, opts)
        finally:
            running.clear()
            await asyncio.to_thread(scraper.join, 10)
        final = samples(url)
    assert outcome.exit_code == 0
    rows = read_jsonl(outcome.run_dir / "requests.jsonl")
    want = Counter((r["phase"], r["status"]) for r in rows)
    assert want[("baseline", "ok")] == 40 and want[("cached", "ok")] == 40
    assert requests_total(final) == dict(want)
    # scraped while the phases ran: partial counts, never more than were written in the end
    total = sum(want.values())
    partial = [m for m in mid if 0 < sum(m.values()) < total]
    assert partial, f"no scrape caught the run part-way ({len(mid)} scrapes)"
    for m in mid:
        assert all(v <= want[k] for k, v in m.items())
    for phase in ("baseline", "cached"):
        ok = [r for r in rows if r["phase"] == phase and r["status"] == "ok"]
        assert final[("kvbench_ttft_seconds_count", (("phase", phase),))] == len(ok)
        ttft_s = sum(r["ttft_ms"] for r in ok) / 1e3
        assert final[("kvbench_ttft_seconds_sum", (("phase", phase),))] == pytest.approx(ttft_s, rel=1e-6)
        cached = sum(r["cached_tokens"] for r in ok)
        assert final[("kvbench_cached_tokens_total", (("phase", phase),))] == cached
    assert final[("kvbench_requests_in_flight", ())] == 0


def test_the_cli_prints_where_it_serves(tmp_path: Path) -> None:
    from kvbench.cli import _register_subcommands, app

    _register_subcommands()
    args = ["run", "throughput", "--requests", "4", "--concurrency", "2", "--prompts", "2"]
    args += ["--lengths", "1000", "--no-report", "--quiet", "--output-dir", str(tmp_path)]
    result = CliRunner().invoke(app, [*args, "--serve-metrics", "0"])
    assert result.exit_code == 0, result.output
    assert "kvbench: metrics at http://127.0.0.1:" in result.output
    bad = CliRunner().invoke(app, [*args, "--serve-metrics", "70000"])
    assert bad.exit_code == 2


async def test_noise_bytes_served_equal_the_manifests(tmp_path: Path) -> None:
    overrides = {
        "prompts.count": 4,
        "prompts.lengths": [4000],
        "load.requests": 8,
        "load.concurrency": 4,
        "test.noisy.enabled": True,
        "test.noisy.pairs": 1,
        "test.noisy.settle_s": 0.2,
        "target.mock_overrides": {"time_scale": 0.05},
        "noise": {"kind": "tcp", "senders": 1, "rate_bytes_per_s": 2e8},
    }
    scn, _ = load_scenario("throughput", overrides)
    metrics = RunMetrics()
    with metrics.serve("127.0.0.1", 0) as url:
        opts = RunOptions(output_dir=tmp_path, quiet=True, report=False, metrics=metrics)
        outcome = await run_scenario(scn, opts)
        final = samples(url)
    assert outcome.exit_code == 0
    manifest = json.loads((outcome.run_dir / "manifest.json").read_text())
    noisy = {p["name"]: p["noise"]["total_bytes"] for p in manifest["phases"] if p.get("noise")}
    assert noisy and all(v > 0 for v in noisy.values())
    served = {dict(k[1])["phase"]: v for k, v in final.items() if k[0] == "kvbench_noise_bytes_total"}
    assert served == noisy
