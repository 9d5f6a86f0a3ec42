"""Trace analysis on hand-computable traces: the ideal (unbounded) and tiered-LRU prefix hits."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbench.model.kv_geometry import PRESETS
from kvbench.traces import TraceRow, open_trace
from kvbench.traces.analyze import analyze_trace, expected_reusable_blocks, lru_hits
from kvbench.traces.controls import SynthControls
from kvbench.traces.sizing import parse_tiers, plan_from_profile, plan_from_tiers
from kvbench.traces.synth import synthesize, write_trace

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "traces"


def _row(*ids: int, n: int | None = None) -> TraceRow:
    return TraceRow(0, 0.0, n if n is not None else 16 * len(ids), 1, tuple(ids))


def test_ideal_hits_by_hand() -> None:
    # rows: [1,2] [1,2,3] [4] [1,5,6] [1,2,3] [4,7]: the leading blocks seen before are 0 2 0 1 3 1
    rows = list(open_trace(DATA / "mooncake.jsonl"))
    assert list(expected_reusable_blocks(rows)) == [0, 2, 0, 1, 3, 1]
    a = analyze_trace(rows, path="m", format="mooncake", block_tokens=512)
    assert (a.blocks, a.unique_blocks, a.ideal_hit_blocks) == (14, 7, 7)
    assert a.ideal_block_hit_rate == 0.5
    # hit tokens: 2*512, 512, 3*512 cut to 1536, 512 (of 700): 1024 + 512 + 1536 + 512
    assert a.ideal_hit_tokens == 3584
    assert a.input_tokens == 1024 + 1500 + 512 + 1200 + 1536 + 700


def test_engine_view_cannot_hit_the_last_token_and_stores_whole_blocks() -> None:
    rows = list(open_trace(DATA / "mooncake.jsonl"))
    # row 2 (1500 tokens) stores 2 whole blocks, not its partial third; row 3 (512) can hit nothing;
    # row 5 (1536) can hit at most 2 of its 3
    assert list(expected_reusable_blocks(rows, block_tokens=512)) == [0, 2, 0, 1, 2, 1]


def test_a_prefix_hit_stops_at_the_first_missing_block() -> None:
    # block 2 after block 9 is another block than block 2 after block 1 (chained keys)
    rows = [_row(1, 2, 3), _row(9, 2, 3), _row(1, 7, 3)]
    assert list(expected_reusable_blocks(rows)) == [0, 0, 1]


def test_lru_one_tier_by_hand() -> None:
    # G1 of 3 blocks: row 4 ([1,5,6]) evicts row 2's chain, so row 5 finds only block 1
    rows = list(open_trace(DATA / "mooncake.jsonl"))
    assert [h.blocks for h in lru_hits(rows, [3])] == [0, 2, 0, 0, 1, 0]


def test_lru_two_tiers_by_hand() -> None:
    # G1 2 blocks, G2 4 blocks (written through): rows 4 and 5 find block 1 in G2 only
    rows = list(open_trace(DATA / "mooncake.jsonl"))
    hits = list(lru_hits(rows, [2, 4]))
    assert [h.blocks for h in hits] == [0, 2, 0, 1, 1, 0]
    assert [h.by_tier for h in hits] == [(0, 0), (2, 0), (0, 0), (0, 1), (0, 1), (0, 0)]


def test_a_row_longer_than_the_cache_evicts_its_own_head() -> None:
    rows = [_row(1, 2, 3), _row(1, 2, 3)]
    assert [h.blocks for h in lru_hits(rows, [2])] == [0, 0]
    assert [h.blocks for h in lru_hits(rows, [3])] == [0, 3]


def test_zero_capacity_tiers_hold_nothing() -> None:
    rows = [_row(1, 2), _row(1, 2)]
    assert [h.blocks for h in lru_hits(rows, [0, 0, 0, 0])] == [0, 0]
    assert [h.by_tier for h in lru_hits(rows, [0, 0, 0, 5])] == [(0, 0, 0, 0), (0, 0, 0, 2)]


def test_unbounded_lru_equals_the_ideal_row_by_row() -> None:
    trace = open_trace(ROOT / "scenarios" / "traces" / "ci.jsonl")
    ideal = list(expected_reusable_blocks(trace))
    assert sum(ideal) > 0
    assert [h.blocks for h in lru_hits(trace, [10**9])] == ideal
    small = [h.blocks for h in lru_hits(trace, [20])]
    assert sum(small) < sum(ideal)  # a small cache loses hits on this trace


def test_tier_sizing_uses_kv_bytes_per_token() -> None:
    assert parse_tiers("G1=80GB, g2=1.5TiB") == {"G1": 80e9, "G2": 1.5 * 2**40}
    plan = plan_from_tiers("G1=80GB,G3=2TB", "llama-3.1-8b", 512)
    per_block = PRESETS["llama-3.1-8b"].bytes_per_token() * 512
    assert plan.block_bytes == per_block
    assert plan.capacity_blocks() == [int(80e9 // per_block), 0, int(2e12 // per_block), 0]


def test_mock_profile_tiers_in_trace_blocks() -> None:
    plan = plan_from_profile("laptop", 512)
    # laptop: llama-3.1-8b, every tier enabled; 2 GiB of G1 at 128 KiB a token holds 16k tokens
    assert plan.capacity_blocks()[0] == (2 * 2**30) // (128 * 2**10 * 512)
    g4_only = plan_from_profile("ibm-g4", 512).capacity_blocks()
    assert g4_only[:3] == [0, 0, 0] and g4_only[3] > 0


@pytest.mark.parametrize("spec", ["G5=1GB", "G1", "G1=lots", "G1=1GB,G1=2GB", ""])
def test_bad_tiers(spec: str) -> None:
    from kvbench.errors import UsageError

    with pytest.raises(UsageError, match="--tiers"):
        parse_tiers(spec)


def test_analysis_with_tiers_and_windows() -> None:
    rows = list(open_trace(DATA / "mooncake.jsonl"))
    plan = plan_from_tiers("G1=1GB", "llama-3.1-8b", 512)
    plan = type(plan)({"G1": plan.block_bytes * 3}, plan.block_bytes, plan.geometry, "test")
    a = analyze_trace(rows, path="m", format="mooncake", block_tokens=512, plan=plan, window_s=0.25)
    assert a.lru is not None
    assert a.lru.hit_blocks["G1"] == 3 and a.lru.block_hit_rate == 3 / 14
    # windows of 250 ms: rows at 0,100,200 | 300,400 | 500 ms
    assert [w["requests"] for w in a.working_set] == [3, 2, 1]
    assert [w["cumulative_blocks"] for w in a.working_set] == [4, 6, 7]
    assert [w["ideal_hit_blocks"] for w in a.working_set] == [2, 4, 1]
    # reuse distances in requests: block 1 at rows 0,1,3,4 -> 1,2,1; block (1,2) -> 1,3; (1,2,3) -> 3; 4 -> 3
    assert {b["lo"]: b["reuses"] for b in a.reuse} == {1: 3, 2: 4}


def test_analyze_a_100k_row_synthesized_trace(tmp_path: Path) -> None:
    controls = SynthControls.model_validate(
        {
            "rows": 100_000,
            "seed": 3,
            "arrival": {"rate_per_s": 50},
            "system_prompt": {"tokens": 1000, "variants": 4},
            "documents": {"count": 2000, "mean_tokens": 3000, "share": 0.6},
            "sessions": {"share": 0.2, "think_time_s": 20},
        }
    )
    path = tmp_path / "big.jsonl.gz"
    assert write_trace(synthesize(controls), path, "mooncake") == 100_000
    trace = open_trace(path)
    plan = plan_from_tiers("G1=80GB,G2=1TB", "gpt-oss-120b", trace.block_tokens)
    a = analyze_trace(trace, path=str(path), format=trace.format, block_tokens=512, plan=plan)
    assert a.rows == 100_000
    assert a.lru is not None and 0 < a.lru.block_hit_rate <= a.ideal_block_hit_rate


@pytest.mark.parametrize(
    "caps", [[40, 0, 0, 0], [10, 30, 0, 0], [8, 16, 32, 64], [0, 0, 0, 50], [5, 0, 25, 0], [3, 6, 9, 12]]
)
def test_lru_agrees_with_the_mocks_cache_row_by_row(caps: list[int]) -> None:
    """The simulation claims the mock's rules: the mock's own TieredKVCache, fed the same block keys
    with the engine's limits, gives the same hit, tier by tier, on every row."""
    from kvbench.mock.costs.cache import TieredKVCache
    from kvbench.traces.lru import BlockKeys, row_limits

    names = ["G1", "G2", "G3", "G4"]
    rows = list(open_trace(ROOT / "scenarios" / "traces" / "ci.jsonl"))
    mock = TieredKVCache(
        dict(zip(names, caps, strict=True)), {n: c > 0 for n, c in zip(names, caps, strict=True)}, 512
    )
    keys_of = BlockKeys()
    expected = []
    for row in rows:
        keys = tuple(keys_of.of(row.hash_ids))
        limit, stored = row_limits(row, 512)
        hit = mock.lookup(keys, limit)
        mock.commit(keys, hit, stored)
        expected.append((hit.num_blocks, tuple(hit.blocks_by_tier[n] for n in names)))
    ours = [(h.blocks, h.by_tier) for h in lru_hits(rows, caps, block_tokens=512)]
    assert sum(h for h, _ in ours) > 0
    assert ours == expected
