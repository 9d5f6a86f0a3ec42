"""`trace analyze` in one streaming pass: sizes, the ideal hit rate, tiered LRU, reuse, working set.

The pure per-row functions the replay and the mock-agreement test use live in lru.py and are
re-exported here (`expected_reusable_blocks`, `lru_hits`). `analyze_trace` reads the trace once,
row by row, keeping only per-block state (keys, LRU tiers, last use) and per-window counters.

Hit rates are counted in the trace's blocks (every id can hit, every id is stored: the trace's
own view, as the Mooncake paper counts its cache ratio); token hit rates count a hit block as
block_tokens tokens, the last one cut to the row's input_length.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from kvbench.traces.lru import BlockKeys, LruHit, TieredLRU, expected_reusable_blocks, lru_hits, row_limits
from kvbench.traces.reuse import ReuseHistogram, WorkingSet
from kvbench.traces.rows import TraceRow
from kvbench.traces.sizing import TIER_NAMES, TierPlan

__all__ = ["TraceAnalysis", "analyze_trace", "expected_reusable_blocks", "lru_hits"]


@dataclass
class LruSummary:
    source: str
    geometry: str
    block_bytes: float
    capacity_bytes: dict[str, float]
    capacity_blocks: dict[str, int]
    hit_blocks: dict[str, int]
    evicted_blocks: dict[str, int]
    block_hit_rate: float
    token_hit_rate: float


@dataclass
class TraceAnalysis:
    path: str
    format: str
    block_tokens: int
    rows: int = 0
    sessions: int = 0
    duration_s: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    blocks: int = 0
    unique_blocks: int = 0
    ideal_hit_blocks: int = 0
    ideal_hit_tokens: int = 0
    lru: LruSummary | None = None
    reuse: list[dict[str, int]] = field(default_factory=list)
    reuse_median_requests: int | None = None
    reuse_mean_s: float | None = None
    working_set: list[dict[str, float]] = field(default_factory=list)
    window_s: float = 60.0

    @property
    def ideal_block_hit_rate(self) -> float:
        return self.ideal_hit_blocks / self.blocks if self.blocks else 0.0

    @property
    def ideal_token_hit_rate(self) -> float:
        return self.ideal_hit_tokens / self.input_tokens if self.input_tokens else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ideal_block_hit_rate"] = self.ideal_block_hit_rate
        out["ideal_token_hit_rate"] = self.ideal_token_hit_rate
        out["mean_input_tokens"] = self.input_tokens / self.rows if self.rows else 0.0
        out["mean_output_tokens"] = self.output_tokens / self.rows if self.rows else 0.0
        return out


def _hit_tokens(row: TraceRow, hit_blocks: int, block_tokens: int) -> int:
    return min(hit_blocks * block_tokens, row.input_length)


def analyze_trace(
    rows: Iterable[TraceRow],
    *,
    path: str,
    format: str,
    block_tokens: int,
    plan: TierPlan | None = None,
    window_s: float = 60.0,
) -> TraceAnalysis:
    """Every figure of `trace analyze` from one pass over `rows`."""
    out = TraceAnalysis(path=path, format=format, block_tokens=block_tokens, window_s=window_s)
    keys_of = BlockKeys()
    seen: set[int] = set()
    cache = TieredLRU(plan.capacity_blocks()) if plan is not None else None
    lru_tokens = 0
    reuse = ReuseHistogram()
    working = WorkingSet(window_ms=window_s * 1000.0)
    sessions: set[str] = set()
    first_ms: float | None = None
    last_ms = 0.0
    for index, row in enumerate(rows):
        keys = keys_of.of(row.hash_ids)
        limit, stored = row_limits(row, None)
        hit = 0
        while hit < limit and keys[hit] in seen:
            hit += 1
        before = len(seen)
        seen.update(keys[:stored])
        lru_hit: LruHit | None = cache.access(keys, limit, stored) if cache is not None else None
        if lru_hit is not None:
            lru_tokens += _hit_tokens(row, lru_hit.blocks, block_tokens)
        reuse.add(keys, index, row.timestamp_ms)
        working.add(keys, len(seen) - before, row.timestamp_ms, hit, lru_hit.blocks if lru_hit else 0)
        out.rows += 1
        out.input_tokens += row.input_length
        out.output_tokens += row.output_length
        out.blocks += len(keys)
        out.ideal_hit_blocks += hit
        out.ideal_hit_tokens += _hit_tokens(row, hit, block_tokens)
        if row.session is not None:
            sessions.add(row.session)
        first_ms = row.timestamp_ms if first_ms is None else min(first_ms, row.timestamp_ms)
        last_ms = max(last_ms, row.timestamp_ms)
    out.sessions = len(sessions)
    out.duration_s = (last_ms - (first_ms or 0.0)) / 1000.0
    out.unique_blocks = len(seen)
    out.reuse = reuse.table()
    out.reuse_median_requests = reuse.quantile(0.5)
    out.reuse_mean_s = reuse.seconds_sum / reuse.reuses if reuse.reuses else None
    out.working_set = working.close()
    if cache is not None and plan is not None:
        out.lru = _lru_summary(cache, plan, out, lru_tokens)
    return out


def _lru_summary(cache: TieredLRU, plan: TierPlan, out: TraceAnalysis, lru_tokens: int) -> LruSummary:
    hits = cache.hit_blocks
    total = sum(hits)
    return LruSummary(
        source=plan.source,
        geometry=plan.geometry,
        block_bytes=plan.block_bytes,
        capacity_bytes={n: plan.capacity_bytes.get(n, 0.0) for n in TIER_NAMES},
        capacity_blocks=dict(zip(TIER_NAMES, plan.capacity_blocks(), strict=True)),
        hit_blocks=dict(zip(TIER_NAMES, hits, strict=True)),
        evicted_blocks=dict(zip(TIER_NAMES, cache.evicted, strict=True)),
        block_hit_rate=total / out.blocks if out.blocks else 0.0,
        token_hit_rate=lru_tokens / out.input_tokens if out.input_tokens else 0.0,
    )
