"""The tier-cliff map's pure rules as invariants: the working set a run really sends, the tier a
working set is predicted to come from, boundaries that grow with a tier's size, the observed
tier from the mock's truth or a server's hit ratio, and a real server's partial hits."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from kvbench.engines.adapters import TierCapacity
from kvbench.errors import UsageError
from kvbench.sweep.cliff import (
    CACHED,
    MISS,
    PARTIAL,
    Boundary,
    effective_working_set,
    mark_partial,
    predicted_tier,
    serving_tier,
)
from kvbench.sweep.tiers import TierSpec, boundary_tokens, merge, parse_capacity, parse_tiers


@pytest.mark.parametrize("length", [1, 7, 1000, 4096])
def test_the_working_set_sent_is_whole_prompts_covering_the_one_asked(length: int) -> None:
    for ws in range(length, length * 6, max(1, length // 3)):
        sent = effective_working_set(ws, length)
        assert sent >= ws and sent % length == 0  # whole filler prompts of the same length
        assert sent - ws < length  # and no more of them than needed


def test_predicted_tier_is_the_first_boundary_that_holds_it() -> None:
    bounds = [Boundary("G1", 1000, "G2"), Boundary("G2", 5000, "G4"), Boundary("G4", 20000, MISS)]
    assert [predicted_tier(ws, bounds) for ws in (1, 1000, 1001, 5000, 19999, 20000, 20001)] == [
        "G1", "G1", "G2", "G2", "G4", "G4", MISS,
    ]  # fmt: skip
    assert predicted_tier(5, []) == MISS
    # monotone: a larger working set is never predicted a faster tier
    order = ["G1", "G2", "G4", MISS]
    tiers = [order.index(predicted_tier(ws, bounds)) for ws in range(0, 30000, 250)]
    assert tiers == sorted(tiers)


def test_a_bigger_tier_never_holds_a_smaller_working_set() -> None:
    for block in (1, 16):
        last = -1
        for tokens in range(0, 50_000, 997):
            b = boundary_tokens(TierCapacity("G1", tokens=tokens, block_tokens=block), 1000, 10, None)
            assert b is not None and b >= last and b % 1000 == 0
            last = b
    # bytes need KV bytes per token; with them, bytes = tokens x per-token size
    by_bytes = TierCapacity("G2", bytes=4096 * 10_000)
    assert boundary_tokens(by_bytes, 1000, 0, None) is None
    assert boundary_tokens(by_bytes, 1000, 0, 4096) == boundary_tokens(
        TierCapacity("G2", tokens=10_000), 1000, 0, None
    )


def test_slots_hold_one_prompt_each_when_it_fits() -> None:
    assert boundary_tokens(TierCapacity("G1", sequences=4), 1000, 50, None) == 4000
    # a slot of 1050 tokens holds a 1000-token prompt with its 50 output tokens; 1049 does not
    assert boundary_tokens(TierCapacity("G1", sequences=4, tokens=1050), 1000, 50, None) == 4000
    assert boundary_tokens(TierCapacity("G1", sequences=4, tokens=1049), 1000, 50, None) == 0


def test_parse_tiers_errors_name_the_entry() -> None:
    for text, msg in [
        ("G1", "expected TIER=SIZE"),
        ("G9=4GB", "G9 is not a tier"),
        ("G1=lots", "expected bytes"),
        ("G1=0slots", "at least 1 slot"),
        ("kv=0B", "must be above 0"),
        ("kv=nonsense-model", "not a size in bytes"),
    ]:
        with pytest.raises(UsageError, match=msg):
            parse_tiers(text)
    spec = parse_tiers("g2=16Ki, G1=2slots,kv=2KiB")
    assert [c.tier for c in spec.capacities] == ["G1", "G2"]  # fastest first, names upper-cased
    assert spec.capacities[1].tokens == 16384 and spec.kv_bytes_per_token == 2048
    assert parse_tiers(None) == TierSpec() and parse_tiers("") == TierSpec()


def test_merge_keeps_the_engines_block_under_the_users_size() -> None:
    reported = [
        TierCapacity("G1", tokens=100, block_tokens=16, source="server"),
        TierCapacity("G3", tokens=9),
    ]
    spec = TierSpec((parse_capacity("G1", "5000"), parse_capacity("G2", "64MiB")))
    out = merge(reported, spec)
    assert [c.tier for c in out] == ["G1", "G2", "G3"]
    assert out[0].tokens == 5000 and out[0].block_tokens == 16  # user's size, engine's block
    assert out[1].bytes == 64 * 2**20 and out[1].block_tokens == 1
    assert out[2].tokens == 9


def _write(path: Path, rows: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_serving_tier_from_the_mocks_truth(tmp_path: Path) -> None:
    _write(
        tmp_path / "mock_ground_truth.jsonl",
        [
            {"request_id": "cold", "cached_tokens": 0, "tokens_from_tier": {}},
            {"request_id": "warm", "cached_tokens": 900, "tokens_from_tier": {"G1": 100, "G3": 800}},
        ],
    )
    assert serving_tier(tmp_path, [{"request_id": "warm"}]) == "G3"  # where most of it came from
    assert serving_tier(tmp_path, [{"request_id": "cold"}]) == MISS
    assert serving_tier(tmp_path, [{"request_id": "absent"}]) is None
    assert serving_tier(tmp_path, []) is None


def test_serving_tier_on_a_server_is_its_hit_ratio(tmp_path: Path) -> None:
    def row(cached: int) -> dict[str, object]:
        return {"request_id": "w", "status": "ok", "cached_tokens": cached, "prompt_tokens": 1000}

    # no manifest, no counters: a hit whose tier the server does not say
    assert serving_tier(tmp_path, [row(990)]) == CACHED
    assert serving_tier(tmp_path, [row(100)]) == MISS  # under half cached: recomputed
    assert serving_tier(tmp_path, [{"request_id": "w", "status": "error"}]) is None


def _point(tier: str | None, ratio: float | None, seen_by: str = "server") -> SimpleNamespace:
    return SimpleNamespace(metrics={"serving_tier": tier, "hit_ratio": ratio, "tier_seen_by": seen_by})


def test_partial_hits_are_marked_against_the_sweeps_best() -> None:
    points = [_point(CACHED, 0.99), _point(CACHED, 0.95), _point(CACHED, 0.5), _point(MISS, 0.0),
              _point("G1", 0.3, "mock ground truth")]  # fmt: skip
    mark_partial(points)
    tiers = [p.metrics["serving_tier"] for p in points]
    # 0.95 is within 90% of the best 0.99; 0.5 is not; recompute and the mock's truth stay
    assert tiers == [CACHED, CACHED, PARTIAL, MISS, "G1"]
