"""`--noisy` end to end against the embedded mock: the effect with its interval, where the time
went, and the noise achieved, each checked against the mock's ground truth.

Sizing, so that a loaded 2-core machine cannot turn the result (the point of these tests): the
noise is the shipped one, 4 flows offering the published 200 GB/s; each sender declares its share
to the mock's fabric port and sends ~1 MB/s of real bytes to confirm it, so the modelled noise does
not depend on the host's spare CPU. On the published topology (kvbench.model.topology) that noise
fits beside the cache reads: bandwidth alone predicts no slowdown, and the tests assert that from
the mock's ground truth. The filled reading turns on one contention knob (latency under load,
fabric.contention.loaded_latency_s: +1.3 s per G4 read at the published load) so that a noisy phase
is several times the modelled time of a quiet one, at a time scale (0.06) where CPU jitter of tens
of ms cannot close that gap. The empty-cache variant runs 120k-token prompts whose prefill (~28
modelled s each) dwarfs every read, so the model itself says the noise has nothing to slow; its
min_effect_pct states the resolution of a timed phase on a busy 2-core machine (see there).

The shipped default (`kvbench run throughput --noisy`) is run as shipped too, at its own pace and
noise, with fewer prompts: there the ground truth must show the offered 200 GB/s achieved in full,
within the storage's capacity, and the cache reads left all they had.
"""

from pathlib import Path

import pytest

from kvbench.report.summary import build_summary
from kvbench.results import load_run, read_jsonl, read_manifest
from kvbench.run.runner import RunOptions, run_scenario
from kvbench.scenario import load_scenario

pytestmark = pytest.mark.slow

NOISE = {"noise": {"kind": "tcp", "senders": 4, "rate_bytes_per_s": 2e11}}  # as shipped
SATURATING = {"time_scale": 0.06, "fabric.contention.loaded_latency_s": 2.0}
FILLED = {
    "prompts.count": 4,
    "prompts.lengths": [30000],
    "load.requests": 16,
    "load.concurrency": 4,
    "target.mock_overrides": SATURATING,
    "test.noisy.enabled": True,
    "test.noisy.settle_s": 0.6,
    **NOISE,
}
# the tolerance stated in the report: the model's own components (queue, onboarding, prefill,
# decode) explain at least this share of the client's request time; the rest is named
# (server_other, transport) so that the components always sum to the measured time exactly
MODEL_SHARE_MIN = 0.75


async def run(tmp_path: Path, **overrides):
    scn, _ = load_scenario("throughput", overrides)
    outcome = await run_scenario(scn, RunOptions(output_dir=tmp_path, quiet=True, report=False))
    assert outcome.status == "complete" and outcome.exit_code == 0
    summary, _, _ = build_summary(outcome.run_dir)
    return outcome.run_dir, summary


def check_attribution_against_ground_truth(run_dir: Path, summary, model_share_min=MODEL_SHARE_MIN) -> None:
    """Every phase: components sum to the measured time; the GT splits sum to the GT totals; the
    server's stamps sit causally inside the client's (same monotonic clock)."""
    df = load_run(run_dir)
    origin = read_manifest(run_dir)["clock_origin_ns"]
    gt = {t["request_id"]: t for t in read_jsonl(run_dir / "mock_ground_truth.jsonl")}
    for a in summary.attribution:
        assert a.source == "mock ground truth", a.phase
        ok = df[(df.phase == a.phase) & (df.status == "ok")]
        assert a.requests == len(ok)
        assert a.measured_s == pytest.approx(ok.e2e_ms.sum() / 1e3, rel=1e-9)
        assert sum(a.components_s.values()) == pytest.approx(a.measured_s, rel=1e-9)
        modelled = sum(v for k, v in a.components_s.items() if k not in ("server_other", "transport"))
        assert modelled >= model_share_min * a.measured_s, (a.phase, a.shares)
    for row in df[df.status == "ok"].itertuples():
        t = gt[row.request_id]
        assert sum(t["onboard_ms_by_tier"].values()) == pytest.approx(t["onboard_ms"], abs=1e-6)
        assert sum(t["onboard_ms_by_link"].values()) == pytest.approx(t["onboard_ms"], abs=1e-6)
        # received after the client began to send (a kernel-stamped sent_ns is when the LAST byte
        # left, and the mock stamps a request when its head arrives); first token stamped before
        # the client read it (the server's end is not compared: it stamps after its last write,
        # which the client may read first)
        began = row.sent_user_ns if row.send_clock_source == "kernel_tx" else row.sent_ns
        assert t["received_ns"] >= began + origin
        assert t["first_token_ns"] <= row.first_token_ns + origin


async def test_default_noisy_run_is_slower_with_an_interval_and_bound_by_g4_onboarding(tmp_path):
    run_dir, s = await run(tmp_path, **FILLED, **{"test.noisy.pairs": 4})
    assert read_manifest(run_dir)["target"]["mock_time_scale"] == 0.06  # target.mock_overrides wins
    names = [p.phase for p in s.phases if p.label != "probe"]
    assert names == [
        "fill",
        "quiet-1",
        "noisy-1",
        "noisy-2",
        "quiet-2",
        "quiet-3",
        "noisy-3",
        "noisy-4",
        "quiet-4",
    ]
    e = s.noise_effect
    assert e is not None and e.pairs == 4 and e.balanced
    assert e.verdict == "slower" and e.time_change_ci_pct[0] > 100.0, e.sentence  # at least 2x slower
    assert "distinguishable from zero" in e.sentence
    noisy = [a for a in s.attribution if a.label == "noisy"]
    assert all(a.shares["onboard_G4"] > 0.5 for a in noisy), [a.shares for a in noisy]
    x = s.noise_explained
    assert x is not None and x.resource == "fabric" and x.could_matter is True
    assert x.noisy_share > 0.5 and x.noise_link == "storage_read"
    # offered and achieved are two numbers, and no link carries more than its capacity
    assert x.noise_offered_bytes_per_s == pytest.approx(2e11) and x.noise_flows == 4
    assert x.noise_bytes_per_s <= x.capacity_bytes_per_s == 3.15e11
    # the slowdown is the knob's (latency under load), not bandwidth: the reads kept theirs
    assert x.noisy_left_bytes_per_s == x.quiet_left_bytes_per_s == 8e10
    assert x.bandwidth_predicts_drop is False and len(x.other_mechanisms) == 3
    check_attribution_against_ground_truth(run_dir, s)
    from kvbench.report.noisy.section import console_lines

    lines = console_lines(s)
    assert len(lines) == 3 and "distinguishable from zero" in lines[0]
    assert lines[1].startswith("bottleneck: onboarding from G4") and "GB/s" in lines[2]


async def test_empty_cache_variant_is_prefill_bound_with_no_distinguishable_effect(tmp_path):
    run_dir, s = await run(
        tmp_path,
        **{
            "prompts.count": 12,
            "prompts.lengths": [120000],
            "load.requests": 24,
            "load.concurrency": 4,
            "target.mock_overrides": {"time_scale": 0.01},
            "test.noisy.enabled": True,
            "test.noisy.cache_start": "cold",
            "test.noisy.settle_s": 0.6,
            # the resolution of a few-second timed phase on a busy 2-core machine: phases of the
            # same work differ by up to ~10% (measured 2.2-2.7 s); smaller changes are not findings
            "test.noisy.min_effect_pct": 10.0,
            **NOISE,
        },
    )
    assert [p.phase for p in s.phases if p.label != "probe"] == [
        "quiet-1",
        "noisy-1",
        "noisy-2",
        "quiet-2",
    ]  # 2 pairs by default
    measured = [a for a in s.attribution if a.label in ("quiet", "noisy")]
    assert all(a.shares["prefill"] > 0.5 for a in measured), [a.shares for a in measured]
    e = s.noise_effect
    assert e is not None and e.verdict in ("none", "negligible"), e.sentence
    x = s.noise_explained
    assert x is not None and x.quiet_share < 0.10 and x.could_matter is False
    assert "could not have mattered much" in x.sentence
    check_attribution_against_ground_truth(run_dir, s)


async def test_shipped_default_noisy_scenario_offers_the_published_noise_and_says_bandwidth_cannot_cost(
    tmp_path,
):
    """`kvbench run throughput --noisy` as shipped: its pace (test.noisy.mock_overrides, time scale
    0.02), prompt sizes, 28 connections, each prompt replayed twice per phase, 6 ABBA pairs and the
    published noise (4 flows offering 200 GB/s); only fewer prompts and requests (28 and 56, not 100
    and 200) for CI time. Asserted on the model's ground truth, not on wall clocks: every noisy
    request saw 200 GB/s offered and achieved, within the storage's 315 GB/s, and the cache reads
    left their 80 GB/s, so the report says bandwidth alone predicts no slowdown and names the rest."""
    run_dir, s = await run(tmp_path, **{"test.noisy.enabled": True, "prompts.count": 28, "load.requests": 56})
    assert read_manifest(run_dir)["target"]["mock_time_scale"] == 0.02  # the scenario's noisy pace
    e = s.noise_effect
    assert e is not None and e.pairs == 6 and e.balanced
    gt = read_jsonl(run_dir / "mock_ground_truth.jsonl")
    noisy = [t for t in gt if "-noisy-" in t["request_id"]]
    quiet = [t for t in gt if "-quiet-" in t["request_id"]]
    assert len(noisy) == len(quiet) == 6 * 56
    for t in noisy:
        assert t["noise_flows"] == 4 and t["noise_offered_bytes_per_s"] == pytest.approx(2e11)
        assert t["fabric_noise_bytes_per_s"] == pytest.approx(2e11)
        assert t["fabric_noise_bytes_per_s"] <= t["fabric_capacity_bytes_per_s"] == 3.15e11
        assert t["noise_link"] == "storage_read" and t["g4_link_bytes_per_s"] == pytest.approx(8e10)
    assert all(t["noise_flows"] == 0 and t["g4_link_bytes_per_s"] == pytest.approx(8e10) for t in quiet)
    x = s.noise_explained
    assert x is not None and x.resource == "fabric" and x.bandwidth_predicts_drop is False
    assert "bandwidth alone predicts no slowdown" in x.sentence
    from kvbench.report.noisy.section import console_lines

    lines = console_lines(s)
    assert "200 GB/s of 200 GB/s offered by 4 flows on the storage_read" in lines[2], lines[2]
    assert "63% of its 315 GB/s capacity" in lines[2] and "bandwidth alone predicts no slowdown" in lines[2]
    # a 56-request quiet phase lasts ~0.15 s: one stall of the busy 2-core machine (measured: ~0.1 s
    # while the whole suite ran beside other work) is a large share of it, so the model's share of
    # the time is checked at 0.5 here (the shipped 200-request phases measured 0.91-0.96)
    check_attribution_against_ground_truth(run_dir, s, model_share_min=0.5)
