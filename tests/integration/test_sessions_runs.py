"""`kvbench run sessions` end to end against the embedded mock, checked against its ground truth."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from kvbench.results import read_jsonl, read_manifest
from kvbench.run.runner import RunOptions, run_scenario
from kvbench.scenario import load_scenario

pytestmark = pytest.mark.slow

LONG_S = 2.0


async def run(tmp_path: Path, **overrides: Any):
    scn, _ = load_scenario("sessions", overrides)
    outcome = await run_scenario(scn, RunOptions(output_dir=tmp_path, quiet=True, report=False))
    turns = read_jsonl(outcome.run_dir / "turns.jsonl")
    return outcome, turns, read_manifest(outcome.run_dir)


def _knobs(**kw: Any) -> dict[str, Any]:
    return {f"test.{k}": v for k, v in kw.items()}


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


async def test_laptop_returning_users_are_served_from_lower_tiers(tmp_path):
    """Later turns reuse the history; a user back after a long pause, while the other users kept the
    fast tiers busy, is served from G3/G4: slower than an immediate follow-up (G1), much faster than
    the no-reuse baseline. Every turn is token-exact; never more users in flight than configured."""
    overrides = {
        "target.mock_profile": "laptop",
        "target.mock_overrides": {"time_scale": 0.1},
        "output.max_tokens": 4,
        **_knobs(
            users=8,
            active_users=8,
            turns=6,
            system_prompt_tokens=500,
            first_message_tokens=6000,  # 8 users x ~7k tokens: more than G1 + G2 (48k) hold
            turn_tokens=200,
            think_time={"distribution": "fixed", "mean_s": 0.3, "long_probability": 0.25, "long_s": LONG_S},
            baseline=True,
        ),
    }
    outcome, turns, manifest = await run(tmp_path, **overrides)
    assert outcome.status == "complete" and outcome.exit_code == 0
    assert manifest["cold_start"]["verified"] is True
    cached = [t for t in turns if t["label"] == "cached"]
    base = [t for t in turns if t["label"] == "baseline"]
    assert len(cached) == len(base) == 48 and all(t["ok"] for t in turns)
    # token-exact: what /tokenize counted is what the server processed; messages hit their sizes
    assert all(t["context_tokens"] == t["prompt_tokens_server"] for t in turns)
    assert all(t["user_tokens"] == (6000 if t["turn"] == 0 else 200) for t in turns)
    assert all(t["tier_source"] == "mock_ground_truth" for t in turns)
    # later turns reuse the history: cached ~ the previous turn's whole prompt (to a 16-token block)
    ctx = {(t["session_id"], t["turn"]): t["context_tokens"] for t in cached}
    for t in cached:
        if t["turn"] > 0:
            prev = ctx[(t["session_id"], t["turn"] - 1)]
            assert prev - 16 < t["cached_tokens"] <= prev, t
            assert t["new_tokens"] == t["context_tokens"] - prev
    # the baseline can reuse nothing
    assert all(t["cached_tokens"] == 0 and t["tier"] == "none" for t in base)
    later = [t for t in cached if t["turn"] > 0]
    returning = [t for t in later if t["think_s"] == LONG_S and t["tier"] in ("G3", "G4")]
    immediate = [t for t in later if t["think_s"] < 1 and t["tier"] == "G1"]
    assert len(returning) >= 2 and len(immediate) >= 2, sorted((t["think_s"], t["tier"]) for t in later)
    assert all(t["since_prev_turn_s"] >= LONG_S * 0.95 for t in returning)
    # The costs below are the mock's modelled ones (prefill + onboarding, from its ground truth), so
    # they hold on a busy machine too: a measured TTFT there also carries the host's scheduling.
    gt = {g["request_id"]: g for g in read_jsonl(outcome.run_dir / "mock_ground_truth.jsonl")}

    def service_ms(t: dict[str, Any]) -> float:
        g = gt[t["request_id"]]
        return float(g["prefill_ms"] + g["onboard_ms"])

    assert _median(service_ms(t) for t in returning) > _median(service_ms(t) for t in immediate)
    # the cost of coming back, free of the other users' contention: reading the history back in
    assert min(gt[t["request_id"]]["onboard_ms"] for t in returning) > max(
        gt[t["request_id"]]["onboard_ms"] for t in immediate
    )
    base_cost = {(t["session_id"], t["turn"]): service_ms(t) for t in base}
    assert _median(base_cost[(t["session_id"], t["turn"])] / service_ms(t) for t in returning) > 2.5
    # never more users in flight than configured (client count and the server's own)
    assert max(t["in_flight"] for t in turns) <= 8
    assert max(g["in_flight_at_receive"] for g in gt.values() if "-probe-" not in g["request_id"]) <= 8
    phases = {p["name"]: p for p in manifest["phases"]}
    assert set(phases) == {"cached", "baseline"} and phases["cached"]["sessions"]["turns"] == 48


async def test_ibm_g4_serves_history_from_g4_and_demotes_past_a_small_g1(tmp_path):
    """As published (G1, G2 caching off) every reused turn comes from G4. With a small G1 turned on,
    a user alone keeps its history in G1 however long it thinks, and with 8 users a returning one
    finds the others have pushed it down to G4: what demotes it is their traffic, not the pause.
    (With 8 users an immediate follow-up hits G1 only when no other user's turn lands in between,
    which depends on how busy the host is, so that arm asserts only the returning users.)"""
    think = {"distribution": "fixed", "mean_s": 0.05, "long_probability": 0.4, "long_s": 1.5}
    shape = {"turns": 3, "system_prompt_tokens": 1000, "first_message_tokens": 4000, "turn_tokens": 500}
    common = {"target.mock_profile": "ibm-g4", "output.max_tokens": 16}
    crowd = {**common, **_knobs(users=8, active_users=8, think_time=think, **shape)}
    outcome, turns, _ = await run(tmp_path, **crowd, **{"target.mock_overrides": {"time_scale": 0.05}})
    assert outcome.exit_code == 0
    later = [t for t in turns if t["turn"] > 0]
    assert later and all(t["tier"] == "G4" for t in later)
    # gpt-oss-120b full-attention KV is 36,864 B/token: 2.5e8 B of G1 is ~6,800 tokens, about one user
    g1 = {"time_scale": 0.05, "tiers.G1.enabled": True, "tiers.G1.capacity_bytes": 2.5e8}
    outcome, turns, _ = await run(tmp_path, **crowd, **{"target.mock_overrides": g1})
    assert outcome.exit_code == 0
    returning = [t for t in turns if t["turn"] > 0 and t["think_s"] == 1.5]
    assert returning and all(t["tier"] == "G4" for t in returning), sorted(
        (t["think_s"], t["tier"]) for t in returning
    )
    # one user alone, with a long pause drawn for some turns: nothing else evicts its history
    think_alone = {**think, "long_probability": 0.5}
    alone = {**common, **_knobs(users=1, active_users=1, think_time=think_alone, **{**shape, "turns": 4})}
    outcome, turns, _ = await run(tmp_path, **alone, **{"target.mock_overrides": g1})
    assert outcome.exit_code == 0
    later = [t for t in turns if t["turn"] > 0]
    assert len(later) == 3 and any(t["think_s"] == 1.5 for t in later)
    assert all(t["tier"] == "G1" for t in later), [(t["think_s"], t["tier"]) for t in later]


async def test_open_loop_caps_users_in_flight_and_context(tmp_path):
    """Users arriving faster than they finish wait for a slot: never more than active_users in flight;
    a user stops before a turn that would pass max_context_tokens."""
    overrides = {
        "output.max_tokens": 16,
        **_knobs(
            users=10,
            active_users=3,
            arrival_rate_per_s=50.0,
            turns=6,
            system_prompt_tokens=200,
            first_message_tokens=800,
            turn_tokens=400,
            think_time={"distribution": "uniform", "min_s": 0.0, "max_s": 0.2},
            max_context_tokens=2200,
        ),
    }
    outcome, turns, manifest = await run(tmp_path, **overrides)
    assert outcome.exit_code == 0
    assert {t["session_id"] for t in turns} == set(range(10))
    assert max(t["in_flight"] for t in turns) <= 3
    gt = read_jsonl(outcome.run_dir / "mock_ground_truth.jsonl")
    assert max(g["in_flight_at_receive"] for g in gt if "-probe-" not in g["request_id"]) <= 3
    assert all(t["context_tokens"] + 16 <= 2200 for t in turns)
    assert max(t["turn"] for t in turns) < 5  # the cap stopped every user early
    entry = manifest["phases"][0]["sessions"]
    assert entry["stopped_at_context_cap"] == 10 and entry["max_in_flight"] <= 3
    assert manifest["load"]["kind"] == "sessions-open" and manifest["load"]["concurrency"] == 3


async def test_report_and_compare_on_two_sessions_runs(tmp_path):
    """The report of a sessions run has its per-turn section and four plots; compare takes two runs."""
    from kvbench.report.compare import compare_runs
    from kvbench.report.render import write_report

    small = _knobs(
        users=3,
        turns=3,
        system_prompt_tokens=100,
        first_message_tokens=400,
        turn_tokens=100,
        think_time={"distribution": "fixed", "mean_s": 0.0},
        baseline=True,
    )
    runs = []
    for seed in (0, 1):
        outcome, _, _ = await run(
            tmp_path / f"r{seed}", **small, **{"test.seed": seed, "output.max_tokens": 8}
        )
        assert outcome.exit_code == 0
        write_report(outcome.run_dir, quiet=True)
        summary = json.loads((outcome.run_dir / "summary.json").read_text())
        assert [t["turn"] for t in summary["sessions"]["per_turn"]] == [0, 1, 2]
        assert summary["throughput"] is None  # pauses pace a sessions phase: no req/s ratio
        md = (outcome.run_dir / "report.md").read_text()
        assert "Sessions: per turn" in md and "served from" in md
        for name in ("ttft_by_turn", "ttft_by_context", "hit_ratio", "tier_shares"):
            assert (outcome.run_dir / f"sessions_{name}.png").stat().st_size > 1000
        runs.append(outcome.run_dir)
    html = compare_runs(runs, tmp_path / "cmp", quiet=True)
    md = (html.parent / "compare.md").read_text()
    assert "Sessions: cached TTFT per turn" in md
    assert (html.parent / "compare_sessions_ttft.png").exists()
