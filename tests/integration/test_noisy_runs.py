"""`--noisy` end to end against the embedded mock: the effect with its interval, where the time
went, and the noise achieved, each checked against the mock's ground truth.

Sizing, so that a loaded 2-core machine cannot turn the result (the point of these tests): the
mock counts every real byte on its fabric port as 1e5 modelled bytes (fabric.noise_scale), so a
throttled single sender (20 MB/s, little CPU) always saturates the modelled 80 GB/s fabric; the
fabric then leaves G4 reads its floor (fabric.floor_fraction 0.01: 0.8 GB/s instead of 80). In the
filled reading that makes a noisy phase about 20x the modelled time of a quiet one, at a time scale
(0.06) where a noisy phase lasts ~1.3 s: CPU jitter of tens of ms cannot close that gap. The
empty-cache variant runs 120k-token prompts whose prefill (~28 modelled s each) dwarfs every read,
at the profile's own floor (0.1), so the model itself says the noise has nothing to slow; its
min_effect_pct states the resolution of a timed phase on a busy 2-core machine (see there).

The shipped default (`kvbench run throughput --noisy`) is run as shipped too, at its own pace and
noise, with fewer prompts: there the model's ~4x and the mock's CPU to spare are what hold.
"""

from pathlib import Path

import pytest

from kvbench.report.summary import build_summary
from kvbench.results import load_run, read_jsonl, read_manifest
from kvbench.run.runner import RunOptions, run_scenario
from kvbench.scenario import load_scenario

pytestmark = pytest.mark.slow

NOISE = {"noise": {"kind": "tcp", "senders": 1, "rate_bytes_per_s": 2e7}}
SATURATING = {"time_scale": 0.06, "fabric.noise_scale": 1e5, "fabric.floor_fraction": 0.01}
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
        # received after the client sent; first token stamped before the client read it (the
        # server's end is not compared: it stamps after its last write, which the client may read first)
        assert t["received_ns"] >= row.sent_ns + origin
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
    assert x.noisy_share > 0.5 and x.noise_bytes_per_s > x.capacity_bytes_per_s == 8e10
    assert x.noisy_left_bytes_per_s < 0.2 * x.quiet_left_bytes_per_s  # G4 reads got the floor
    check_attribution_against_ground_truth(run_dir, s)
    from kvbench.report.noise_report import console_lines

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
            "target.mock_overrides": {"time_scale": 0.01, "fabric.noise_scale": 1e5},
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


async def test_shipped_default_noisy_scenario_shows_the_effect_bound_by_g4_onboarding(tmp_path):
    """`kvbench run throughput --noisy` as shipped: its pace (test.noisy.mock_overrides, time scale
    0.02), prompt sizes, 28 connections, each prompt replayed twice per phase, 6 ABBA pairs and the
    unthrottled 4-sender noise; only fewer prompts and requests (28 and 56, not 100 and 200) for CI
    time. The model predicts a noisy phase ~4x a quiet one (G4 reads left 8 of 80 GB/s); the mock's
    CPU must not be what bounds the phases, so the interval excludes zero by a wide margin."""
    run_dir, s = await run(tmp_path, **{"test.noisy.enabled": True, "prompts.count": 28, "load.requests": 56})
    assert read_manifest(run_dir)["target"]["mock_time_scale"] == 0.02  # the scenario's noisy pace
    e = s.noise_effect
    assert e is not None and e.pairs == 6 and e.balanced
    assert e.verdict == "slower" and e.time_change_ci_pct[0] > 50.0, e.sentence
    assert "distinguishable from zero" in e.sentence
    for a in s.attribution:
        if a.label == "noisy":  # G4 onboarding is the largest share of a noisy phase's time
            assert max(a.shares, key=a.shares.get) == "onboard_G4" and a.shares["onboard_G4"] > 0.5, a.shares
    x = s.noise_explained
    assert x is not None and x.resource == "fabric" and x.could_matter is True
    assert x.noisy_share > 0.5
    # a 56-request quiet phase lasts ~0.15 s: one stall of the busy 2-core machine (measured: ~0.1 s
    # while the whole suite ran beside other work) is a large share of it, so the model's share of
    # the time is checked at 0.5 here (the shipped 200-request phases measured 0.91-0.96)
    check_attribution_against_ground_truth(run_dir, s, model_share_min=0.5)
