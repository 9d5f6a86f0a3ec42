"""Report statistics: agree with numpy, seeded bootstrap, speedups and both readings of a slowdown."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvbench.model.kv_geometry import GPT_OSS_120B
from kvbench.report.core import fits, stats, timeline
from kvbench.report.core.manifest import RunManifest
from kvbench.results import load_run, read_manifest

RUNS = Path(__file__).resolve().parents[1] / "data" / "fixture_runs"
TTFT = RUNS / "20261130T140312Z-ttft-3f9a1c"
THROUGHPUT = RUNS / "20261130T141500Z-throughput-7b2e90"
NOISY = RUNS / "20261130T142000Z-noisy-neighbour-c41d07"


def test_describe_agrees_with_numpy():
    rng = np.random.default_rng(1)
    x = rng.lognormal(3, 0.5, 501)
    d = stats.describe(np.append(x, np.nan))
    assert d["count"] == 501
    assert d["mean"] == pytest.approx(x.mean())
    assert d["p50"] == pytest.approx(np.median(x))
    assert d["p90"] == pytest.approx(np.percentile(x, 90))
    assert d["p99"] == pytest.approx(np.percentile(x, 99))
    assert (d["min"], d["max"]) == (x.min(), x.max())
    assert stats.describe([])["p50"] is None


def test_bootstrap_is_seeded_and_brackets_the_median():
    x = np.random.default_rng(2).normal(100, 10, 200)
    a = stats.bootstrap_ci(x, seed=5)
    assert a == stats.bootstrap_ci(x, seed=5)
    assert a[0] < np.median(x) < a[1]
    r = stats.bootstrap_ratio_ci(x * 10, x, seed=5)
    assert r[0] < 10.0 < r[1] or r == pytest.approx((10.0, 10.0), rel=0.05)
    assert stats.bootstrap_ci([1.0]) is None


def test_phase_stats_on_fixture_agree_with_numpy():
    df = load_run(THROUGHPUT)
    ps = stats.phase_stats(df, read_manifest(THROUGHPUT))
    assert [(p.phase, p.label) for p in ps] == [("baseline", "baseline"), ("cached", "cached")]
    cached = ps[1]
    ok = df[(df["phase"] == "cached") & (df["status"] == "ok")]
    assert (cached.requests, cached.ok, cached.errors) == (40, 39, 1)
    assert cached.error_types == {"http_503": 1}
    assert cached.ttft_ms["p50"] == pytest.approx(np.median(ok["ttft_ms"]))
    assert cached.e2e_ms["p99"] == pytest.approx(np.percentile(ok["e2e_ms"], 99))
    dur = read_manifest(THROUGHPUT)["phases"][1]["duration_s"]
    assert cached.duration_source == "manifest phase duration"
    assert cached.requests_per_s == pytest.approx(39 / dur)
    assert cached.output_tokens_per_s == pytest.approx(ok["output_tokens"].sum() / dur)
    assert cached.dispatch_delay_ms["p50"] == pytest.approx(0.5)


def test_duration_falls_back_to_request_span():
    df = pd.DataFrame(
        {
            "phase": ["p", "p"],
            "label": ["cached", "cached"],
            "status": ["ok", "ok"],
            "sent_ns": [0, 1_000_000_000],
            "end_ns": [2_000_000_000, 4_000_000_000],
            "ttft_ms": [10.0, 20.0],
        }
    )
    manifest = read_manifest(THROUGHPUT)
    manifest["phases"] = [manifest["phases"][0] | {"name": "p", "duration_s": None, "ended_ns": None}]
    (p,) = stats.phase_stats(df, manifest)
    assert p.duration_s == pytest.approx(4.0)
    assert p.requests_per_s == pytest.approx(0.5)
    assert "span" in p.duration_source


def test_ttft_speedups_per_length():
    df = load_run(TTFT)
    sp = stats.ttft_speedups(df)
    assert [s["tokens"] for s in sp] == [30_000, 60_000, 100_000, 130_000]
    s130 = sp[-1]
    cold = df[(df["label"] == "cold") & (df["prompt_tokens_requested"] == 130_000)]["ttft_ms"]
    warm = df[(df["label"] == "warm") & (df["prompt_tokens_requested"] == 130_000)]["ttft_ms"]
    assert s130["speedup"] == pytest.approx(np.median(cold) / np.median(warm))
    assert s130["baseline"] == "cold"
    lo, hi = s130["speedup_ci"]
    assert lo <= s130["speedup"] <= hi


def test_throughput_and_noise_show_both_readings():
    ps = stats.phase_stats(load_run(THROUGHPUT), read_manifest(THROUGHPUT))
    t = stats.throughput_comparison(ps)
    assert t["rate_ratio"] == pytest.approx(t["cached_requests_per_s"] / t["baseline_requests_per_s"])
    assert t["time_ratio"] == pytest.approx(t["baseline_total_s"] / t["cached_total_s"])
    assert "baseline" in t["baseline"]
    ps = stats.phase_stats(load_run(NOISY), read_manifest(NOISY))
    n = stats.noise_impact(ps)
    rq, rn = n["quiet_requests_per_s"], n["noisy_requests_per_s"]
    assert n["rate_drop_pct"] == pytest.approx((1 - rn / rq) * 100)
    assert n["time_increase_pct"] == pytest.approx((n["noisy_total_s"] / n["quiet_total_s"] - 1) * 100)
    assert "relative to the quiet rate" in n["rate_drop_what"]
    assert "relative to the quiet time" in n["time_increase_what"]
    assert n["noise_mean_bytes_per_s"] > 1e9


def test_timeline_counts_every_completion():
    df = load_run(THROUGHPUT)
    tl = timeline.timeline(df, bin_s=1.0)
    assert tl["completions_per_s"].sum() == (df["status"] == "ok").sum()
    assert tl["errors_per_s"].sum() == 1
    assert tl["in_flight"].max() <= 8.0 + 1e-9
    assert timeline.timeline(df.iloc[0:0]).empty


def test_fits_recover_known_parameters():
    rows = []
    for n in (10_000, 30_000, 60_000, 100_000, 130_000):
        warm_ms = 100.0 + GPT_OSS_120B.kv_bytes(n) / 10e9 * 1000
        cold_ms = 50.0 + 0.03 * n + 1.5e-6 * n * n
        rows += [
            {"label": "warm", "prompt_tokens_requested": n, "ttft_ms": warm_ms, "status": "ok"},
            {"label": "cold", "prompt_tokens_requested": n, "ttft_ms": cold_ms, "status": "ok"},
        ]
    df = pd.DataFrame(rows)
    w = fits.fit_warm(df, GPT_OSS_120B, lengths=(200_000,))
    assert w.params["fixed_latency_ms"] == pytest.approx(100.0)
    assert w.params["bandwidth_GBps"] == pytest.approx(10.0)
    assert w.predictions[0]["extrapolated"] is True
    c = fits.fit_cold(df, lengths=(50_000,))
    assert c.params["ms_per_token2"] == pytest.approx(1.5e-6)
    assert c.params["ms_per_token"] == pytest.approx(0.03)
    assert c.predictions[0]["extrapolated"] is False
    assert max(abs(p["residual_ms"]) for p in c.points) < 1e-6


def _with_target(**target: object) -> RunManifest:
    manifest = read_manifest(TTFT)
    return RunManifest(manifest | {"target": manifest["target"] | target}, TTFT)


def test_geometry_sources():
    geo, src = fits.geometry_for_run(_with_target(mock_profile="ibm-g4"))  # a shipped profile: its geometry
    assert geo.name == "gpt-oss-120b" and src.startswith("mock profile ibm-g4")
    geo, src = fits.geometry_for_run(
        _with_target(kind="server", mock_profile=None, model="openai/gpt-oss-120b")
    )
    assert geo.name == "gpt-oss-120b" and src.startswith("preset matching target.model")
    geo, src = fits.geometry_for_run(_with_target(mock_profile=None, model="mystery"))
    assert geo is None and "tokens" in src
