"""Noisy-neighbour explanation, pure parts: the onboarding split, time attribution, the paired
effect with its interval, the noisy plan (ABBA, fills) and the console lines."""

import math

import pandas as pd
import pytest

from kvbench.mock.costs.onboarding import split_onboarding
from kvbench.report.noisy import attribution, effect
from kvbench.report.noisy import explain as noise_explain
from kvbench.run.throughput import throughput_plan
from kvbench.scenario import load_scenario

# --------------------------------------------------------------------------- onboarding split


def test_onboarding_split_follows_the_critical_stage():
    moved = {"G2": 0.0, "G3": 0.0, "G4": 4e9}
    # the G4 read ends last: the whole time is G4's, and the fabric bounded it
    tiers, links = split_onboarding(100.0, {"G4": 9.0, "G2": 7.0}, moved)
    assert tiers == {"G2": 0.0, "G3": 0.0, "G4": 100.0}
    assert links == {"fabric": 100.0, "disk": 0.0, "pcie": 0.0}
    # the host->GPU copy ends last: still G4's bytes, but PCIe bounded it
    tiers, links = split_onboarding(100.0, {"G4": 5.0, "G2": 7.0}, moved)
    assert tiers["G4"] == 100.0 and links["pcie"] == 100.0 and links["fabric"] == 0.0


def test_onboarding_split_by_bytes_when_the_copy_bounds_mixed_tiers():
    tiers, links = split_onboarding(60.0, {"G3": 1.0, "G2": 2.0}, {"G2": 1e9, "G3": 2e9, "G4": 0.0})
    assert tiers == pytest.approx({"G2": 20.0, "G3": 40.0, "G4": 0.0})
    assert sum(tiers.values()) == pytest.approx(60.0) and sum(links.values()) == pytest.approx(60.0)
    assert split_onboarding(0.0, {}, {}) == (
        dict.fromkeys(("G2", "G3", "G4"), 0.0),
        dict.fromkeys(attribution.LINKS, 0.0),
    )


# --------------------------------------------------------------------------- attribution


def _requests(rows):
    return pd.DataFrame(rows).assign(status="ok")


def _gt(rid, queue, g4, prefill, ttft, decode, other=0.0, noise=0.0, fabric=None):
    t0 = 1_000_000_000
    first = t0 + int((queue + g4 + prefill + other) * 1e6)
    assert ttft == pytest.approx(queue + g4 + prefill + other)
    return {
        "request_id": rid,
        "received_ns": t0,
        "first_token_ns": first,
        "end_ns": first + int(decode * 1e6),
        "queue_ms": queue,
        "onboard_ms": g4,
        "prefill_ms": prefill,
        "onboard_ms_by_tier": {"G2": 0.0, "G3": 0.0, "G4": g4},
        "onboard_ms_by_link": {"fabric": g4, "disk": 0.0, "pcie": 0.0},
        "tokens_from_tier": {"G4": 1000},
        "fabric_noise_bytes_per_s": noise,
        "fabric_capacity_bytes_per_s": fabric,
        "g4_link_bytes_per_s": 8e10 - noise,
    }


def test_ground_truth_attribution_sums_to_the_client_time_exactly():
    req = _requests(
        [
            {"request_id": "a", "phase": "quiet-1", "label": "quiet", "e2e_ms": 105.0, "ttft_ms": 60.0},
            {"request_id": "b", "phase": "quiet-1", "label": "quiet", "e2e_ms": 110.0, "ttft_ms": 60.0},
        ]
    )
    gt = [_gt("a", 1.0, 50.0, 4.0, 58.0, 40.0, other=3.0), _gt("b", 0.0, 55.0, 5.0, 60.0, 45.0)]
    (phase,) = attribution.attribute_run(req, gt)
    assert phase.source == "mock ground truth" and phase.requests == 2
    assert sum(phase.components_s.values()) == pytest.approx(phase.measured_s, abs=1e-9)
    assert phase.measured_s == pytest.approx(0.215)
    c = phase.components_s
    assert c["onboard_G4"] == pytest.approx(0.105) and c["decode"] == pytest.approx(0.085)
    assert c["server_other"] == pytest.approx(0.003)
    assert c["transport"] == pytest.approx(0.215 - (0.098 + 0.105))
    assert phase.links_s["fabric"] == pytest.approx(0.105)


def test_without_ground_truth_engine_counters_then_client_timings():
    from kvbench.engines.adapters import get_adapter

    req = _requests(
        [
            {"request_id": "a", "phase": "quiet-1", "label": "quiet", "e2e_ms": 1000.0, "ttft_ms": 600.0},
            {"request_id": "b", "phase": "noisy-1", "label": "noisy", "e2e_ms": 2000.0, "ttft_ms": 1500.0},
        ]
    )
    deltas = {
        "quiet-1": {"llamacpp:prompt_seconds_total": 0.55, "llamacpp:tokens_predicted_seconds_total": 0.38}
    }
    quiet, noisy = attribution.attribute_run(req, None, deltas, get_adapter("llamacpp"))
    assert quiet.source == "engine counters (llamacpp)"
    assert quiet.components_s == pytest.approx({"prefill": 0.55, "decode": 0.38, "other": 0.07})
    assert noisy.source == "client timings" and noisy.components_s == pytest.approx(
        {"ttft": 1.5, "decode": 0.5}
    )
    # vLLM's request histograms
    split = get_adapter("vllm").time_split(
        {
            "vllm:request_queue_time_seconds_sum": 1.0,
            "vllm:request_prefill_time_seconds_sum": 2.0,
            "vllm:request_decode_time_seconds_sum": 3.0,
        }
    )
    assert split == {"queue": 1.0, "prefill": 2.0, "decode": 3.0}


def _phase(label, name, comps, links=None, noise=None, cap=None):
    total = sum(comps.values())
    return attribution.PhaseAttribution(
        phase=name,
        label=label,
        source="mock ground truth",
        requests=10,
        measured_s=total,
        components_s=comps,
        shares={k: v / total for k, v in comps.items()},
        links_s=links or {},
        noise_bytes_per_s=noise,
        capacity_bytes_per_s=cap,
    )


def test_a_small_share_on_the_noised_resource_says_noise_could_not_matter():
    phases = [
        _phase("quiet", "quiet-1", {"prefill": 95.0, "onboard_G4": 2.0, "decode": 3.0}, cap=8e10),
        _phase("noisy", "noisy-1", {"prefill": 95.0, "onboard_G4": 2.5, "decode": 3.0}, noise=2e11, cap=8e10),
    ]
    x = noise_explain.explain_noise(phases, "tcp")
    assert x is not None and x.resource == "fabric" and x.tiers == ["G4"]
    assert x.quiet_share == pytest.approx(0.02) and x.could_matter is False
    assert "could not have mattered much" in x.sentence and "2%" in x.sentence
    assert x.utilisation == pytest.approx(2.5)
    big = noise_explain.explain_noise(
        [
            _phase("quiet", "q", {"onboard_G4": 80.0, "decode": 20.0}),
            _phase("noisy", "n", {"onboard_G4": 95.0}),
        ],
        "tcp",
        sender_bytes_per_s=1e9,
    )
    assert (
        big is not None and big.could_matter is True and big.noise_where == "as sent by the noise generator"
    )
    assert "capacity unknown" in big.sentence


def test_offered_and_achieved_are_two_numbers_and_a_full_share_left_says_bandwidth_cannot_cost():
    from kvbench.report.noisy.section import noise_line

    comps = {"onboard_G4": 30.0, "decode": 70.0}
    extra = {"noise_link": "storage_read", "noise_flows": 4, "left_bytes_per_s": 8e10}
    quiet = _phase("quiet", "quiet-1", comps, cap=3.15e11).model_copy(update=extra)
    noisy = _phase("noisy", "noisy-1", comps, noise=2e11, cap=3.15e11).model_copy(
        update={**extra, "noise_offered_bytes_per_s": 2e11}
    )
    x = noise_explain.explain_noise([quiet, noisy], "tcp")
    assert x is not None and x.noise_offered_bytes_per_s == 2e11 and x.noise_bytes_per_s == 2e11
    assert x.utilisation == pytest.approx(200 / 315) and x.bandwidth_predicts_drop is False
    assert [m.split(" (")[0] for m in x.other_mechanisms] == [
        "latency under load",
        "storage CPU",
        "incast at the switch",
    ]
    assert (
        "bandwidth alone predicts no slowdown" in x.sentence and "fabric.contention.incast_loss" in x.sentence
    )
    line = noise_line(x)
    assert line.startswith("noise achieved: 200 GB/s of 200 GB/s offered by 4 flows on the storage_read")
    assert "63% of its 315 GB/s capacity" in line and "bandwidth alone predicts no slowdown" in line
    # the noise took the reads' share: bandwidth does predict a drop, and nothing else is listed
    cut = noisy.model_copy(update={"left_bytes_per_s": 4e10})
    y = noise_explain.explain_noise([quiet, cut], "tcp")
    assert y is not None and y.bandwidth_predicts_drop is True and not y.other_mechanisms
    assert "bandwidth alone" not in noise_line(y)


# --------------------------------------------------------------------------- paired effect


def test_t_quantiles_match_the_tables():
    for df, q in [(1, 12.706), (2, 4.303), (3, 3.182), (5, 2.571), (30, 2.042)]:
        assert effect.t_quantile(0.975, df) == pytest.approx(q, abs=1e-3)


def _pairs(quiet, noisy, order="alternate"):
    phases = []
    for k, (q, n) in enumerate(zip(quiet, noisy, strict=True), start=1):
        pq = {"name": f"quiet-{k}", "label": "quiet", "duration_s": q, "ok": 100}
        pn = {"name": f"noisy-{k}", "label": "noisy", "duration_s": n, "ok": 100}
        phases += [pq, pn] if (k % 2 == 1 or order != "alternate") else [pn, pq]
    return phases


def test_a_clear_slowdown_is_distinguishable_with_its_interval():
    e = effect.noise_effect(_pairs([1.0, 1.1, 0.9, 1.0], [2.0, 2.3, 1.9, 2.1]))
    assert e is not None and e.pairs == 4 and e.balanced
    assert e.verdict == "slower" and "distinguishable from zero" in e.sentence
    lo, hi = e.time_change_ci_pct
    assert 0 < lo < e.time_change_pct < hi
    assert e.rate_change_pct == pytest.approx((1 / (1 + e.time_change_pct / 100) - 1) * 100)
    assert [p.order for p in e.per_pair] == ["quiet_first", "noisy_first", "quiet_first", "noisy_first"]


def test_jitter_around_zero_is_no_distinguishable_effect():
    e = effect.noise_effect(_pairs([1.0, 1.02, 0.99, 1.01], [1.01, 1.0, 1.0, 1.02]))
    assert e is not None and e.verdict == "none" and e.sentence.startswith("no distinguishable effect")
    tiny = effect.noise_effect(_pairs([1.0, 1.0, 1.0, 1.0], [1.002, 1.003, 1.002, 1.003]))
    assert tiny is not None and tiny.verdict == "negligible"  # excludes zero, within 1%
    one = effect.noise_effect(_pairs([1.0], [1.5]))
    assert one is not None and one.verdict == "unknown" and one.time_change_ci_pct is None


def test_mean_interval_is_the_textbook_t_interval():
    values = [0.1, 0.3, 0.2, 0.4]
    mean, (_lo, hi) = effect.mean_interval(values)
    sd = math.sqrt(sum((v - 0.25) ** 2 for v in values) / 3)
    assert mean == pytest.approx(0.25)
    assert hi - mean == pytest.approx(3.1824 * sd / 2, rel=1e-4)


# --------------------------------------------------------------------------- the plan


def _plan(**overrides):
    keys = {f"test.{k}": v for k, v in overrides.items()}
    scn, _ = load_scenario("throughput", {"test.noisy.enabled": True, **keys})
    return [(p.name, p.label, p.salt_mode, p.noisy) for p in throughput_plan(scn, restart=False)]


def test_noisy_defaults_to_one_fill_then_abba_pairs_on_the_same_cache():
    plan = _plan()
    assert len(plan) == 1 + 2 * 6  # six pairs by default from a filled cache
    assert [n for n, *_ in plan][:9] == [
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
    assert plan[0][2] == "run"  # the fill starts from an empty cache
    assert all(mode == "same" for _, _, mode, _ in plan[1:])  # then no reset: the same filled cache


def test_empty_cache_variant_and_refill_are_one_field_away():
    cold = _plan(**{"noisy.cache_start": "cold"})
    assert [n for n, *_ in cold] == ["quiet-1", "noisy-1", "noisy-2", "quiet-2"]
    assert all(mode == "run" for _, _, mode, _ in cold)
    refill = _plan(**{"noisy.refill": True, "noisy.pairs": 1, "noisy.order": "quiet_first"})
    assert [n for n, *_ in refill] == ["fill-quiet-1", "quiet-1", "fill-noisy-1", "noisy-1"]


def test_cli_flags_map_to_the_noisy_fields():
    from kvbench.run.commands import build_overrides

    assert build_overrides(noisy=True, empty_cache=True, pairs=3) == {
        "test.noisy.enabled": True,
        "test.noisy.cache_start": "cold",
        "test.noisy.pairs": 3,
    }


def test_counters_without_onboarding_cannot_tell_the_share_on_storage():
    from kvbench.engines.adapters import get_adapter

    req = _requests(
        [
            {"request_id": "a", "phase": "quiet-1", "label": "quiet", "e2e_ms": 1000.0, "ttft_ms": 600.0},
            {"request_id": "b", "phase": "noisy-1", "label": "noisy", "e2e_ms": 1100.0, "ttft_ms": 700.0},
        ]
    )
    d = {"llamacpp:prompt_seconds_total": 0.55, "llamacpp:tokens_predicted_seconds_total": 0.38}
    phases = attribution.attribute_run(req, None, {"quiet-1": d, "noisy-1": d}, get_adapter("llamacpp"))
    x = noise_explain.explain_noise(phases, "fio", sender_bytes_per_s=3e8, capacity_bytes_per_s=1e9)
    assert x is not None and x.resource == "storage" and x.quiet_share is None and x.could_matter is None
    assert "cannot tell" in x.sentence and x.utilisation == pytest.approx(0.3)
