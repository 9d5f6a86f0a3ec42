"""Turn rows, the serving tier and the per-turn table (pure)."""

from __future__ import annotations

from kvbench.results.turns import TurnRow, per_turn, serving_tier, turn_table_lines


def test_serving_tier():
    assert serving_tier({"G1": 100, "G3": 300}, 400) == "G3"
    assert serving_tier({"G1": 200, "G3": 200}, 400) == "G3"  # a tie goes to the slower tier
    assert serving_tier({}, 0) == "none"
    assert serving_tier({}, None) is None
    assert serving_tier({"local_compute": 900, "local_cache_hit": 100}, 100) == "local_cache_hit"


def _row(label, s, t, ttft, ctx, cached, tier=None, ok=True):
    return {
        "label": label,
        "session_id": s,
        "turn": t,
        "ttft_ms": ttft,
        "context_tokens": ctx,
        "cached_tokens": cached,
        "tier": tier,
        "ok": ok,
    }


def test_per_turn_pairs_cached_with_baseline():
    rows = [
        _row("cached", 0, 0, 100.0, 1000, 0, "none"),
        _row("cached", 1, 0, 120.0, 1000, 992, "G1"),
        _row("cached", 0, 1, 20.0, 2000, 992, "G1"),
        _row("cached", 1, 1, 40.0, 2000, 992, "G3"),
        _row("cached", 2, 1, 999.0, 2000, 0, "G3", ok=False),  # failed rows do not count
        _row("baseline", 0, 1, 200.0, 2000, 0, "none"),
        _row("baseline", 1, 1, 200.0, 2000, 0, "none"),
        _row("baseline", 0, 0, 100.0, 1000, 0, "none"),
    ]
    t = {x["turn"]: x for x in per_turn(rows)}
    assert t[1]["users"] == 2
    assert t[1]["ttft_cached_ms"] == 30.0 and t[1]["ttft_baseline_ms"] == 200.0
    assert t[1]["speedup"] == (10.0 + 5.0) / 2  # paired per user, then the median
    assert t[1]["hit_ratio"] == 1984 / 4000
    assert t[1]["tier"] in ("G1", "G3")
    assert t[0]["speedup"] == 1.0  # only user 0 has a baseline at turn 0
    lines = turn_table_lines(per_turn(rows))
    assert lines[0].split()[:3] == ["turn", "users", "context"] and len(lines) == 3


def test_turn_row_is_strict():
    import pytest
    from pydantic import ValidationError

    row = dict(
        phase="cached",
        label="cached",
        session_id=0,
        turn=0,
        request_id="r",
        ok=True,
        context_tokens=10,
        prompt_tokens_server=10,
        new_tokens=10,
        user_tokens=3,
        cached_tokens=0,
        output_tokens=4,
        ttft_ms=1.0,
        e2e_ms=2.0,
        tier="none",
        tier_source="mock_ground_truth",
        think_s=0.0,
        since_prev_turn_s=None,
        in_flight=1,
        sent_ns=5,
    )
    assert TurnRow(**row).tier == "none"
    with pytest.raises(ValidationError):
        TurnRow(**row, extra_field=1)


def test_results_readme_documents_every_turn_field():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "results" / "README.md").read_text()
    section = readme[readme.index("## turns.jsonl") :]
    for name in TurnRow.model_fields:
        assert f"| `{name}` |" in section, name
