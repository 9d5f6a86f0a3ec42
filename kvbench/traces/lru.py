"""Prefix-cache simulation over a trace: chained block keys, the unbounded (ideal) cache, tiered LRU.

Block keys. A block is named by its whole chain, not its id alone: key_i = the pair (key_{i-1},
hash_ids[i]) numbered densely in first-seen order. Published traces already chain their ids (an
id implies its prefix), so this changes nothing for them; a hand-written trace that reuses an id
after a different prefix gets a different block, as a real prefix cache would.

The rules (the same as kvbench's mock, mock/costs/cache.py, so that the mock's ground truth and this
simulation agree):

* A row's hit is the longest prefix of its blocks held in SOME tier, counted in the fastest tier
  that holds each block. A prefix hit stops at the first missing block, as a prefix cache does,
  even when later blocks are still held.
* After the row, run by run (a run: consecutive hit blocks from one tier), in prompt order: the
  run is touched (most recently used) in the tier that held it, then a run read from a lower tier
  is placed in G1, and a G3/G4 run in G2 too (which staged it); then the row's new blocks are
  written to EVERY tier of non-zero capacity, each evicting its own least recently used blocks.
  tests/unit/test_trace_analyze.py feeds the mock's own TieredKVCache the same keys and checks
  the two agree on every row, tier by tier.
* `block_tokens` given (an engine's view): at most (input_length - 1) // block_tokens blocks can
  hit (an engine computes at least one token) and only the input_length // block_tokens whole
  blocks are stored. Without it (the trace's own view, as the Mooncake paper counts) every id
  can hit and every id is stored.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from kvbench.traces.rows import TraceRow


class BlockKeys:
    """Dense integer keys for block chains, numbered in first-seen order."""

    def __init__(self) -> None:
        self._table: dict[tuple[int, int], int] = {}

    def __len__(self) -> int:
        return len(self._table)

    def of(self, hash_ids: tuple[int, ...]) -> list[int]:
        table = self._table
        keys: list[int] = []
        prev = -1
        for block_id in hash_ids:
            pair = (prev, block_id)
            key = table.get(pair)
            if key is None:
                key = table[pair] = len(table)
            keys.append(key)
            prev = key
        return keys


def row_limits(row: TraceRow, block_tokens: int | None) -> tuple[int, int]:
    """(most blocks that may hit, blocks stored afterwards) for one row."""
    n = len(row.hash_ids)
    if block_tokens is None:
        return n, n
    return min(n, max(0, (row.input_length - 1) // block_tokens)), min(n, row.input_length // block_tokens)


def expected_reusable_blocks(rows: Iterable[TraceRow], *, block_tokens: int | None = None) -> Iterator[int]:
    """Per row, in order: how many of its leading blocks an unbounded prefix cache already holds."""
    keys_of = BlockKeys()
    seen: set[int] = set()
    for row in rows:
        keys = keys_of.of(row.hash_ids)
        limit, stored = row_limits(row, block_tokens)
        hit = 0
        while hit < limit and keys[hit] in seen:
            hit += 1
        seen.update(keys[:stored])
        yield hit


@dataclass(frozen=True, slots=True)
class LruHit:
    blocks: int  # the row's prefix hit, in blocks
    by_tier: tuple[int, ...]  # of which held by each tier (G1 first)


class TieredLRU:
    """LRU tiers of fixed capacity in blocks (G1 first; capacity 0 = a tier that holds nothing)."""

    def __init__(self, capacity_blocks: list[int]) -> None:
        if not capacity_blocks or any(c < 0 for c in capacity_blocks):
            raise ValueError(f"capacities must be a non-empty list of blocks >= 0, got {capacity_blocks}")
        self.capacity = list(capacity_blocks)
        self.tiers: list[OrderedDict[int, None]] = [OrderedDict() for _ in capacity_blocks]
        self._live = [t for t, c in zip(self.tiers, capacity_blocks, strict=True) if c > 0]
        self.evicted = [0] * len(capacity_blocks)
        self.hit_blocks = [0] * len(capacity_blocks)  # over every access so far

    def access(self, keys: list[int], limit: int, stored: int) -> LruHit:
        held_in = self._lookup(keys, limit)
        by_tier = [0] * len(self.tiers)
        # run by run, in prompt order, as the mock commits: touch the run where it was found, then
        # stage it up; a block a staging insert evicted before its own touch stays evicted
        start = 0
        while start < len(held_in):
            t = held_in[start]
            end = start
            while end < len(held_in) and held_in[end] == t:
                end += 1
            run = keys[start:end]
            by_tier[t] += end - start
            tier = self.tiers[t]
            for key in run:
                if key in tier:
                    tier.move_to_end(key)
            for up in (0, 1)[: min(t, 2)]:
                for key in run:
                    self._insert(up, key)
            start = end
        for key in keys[len(held_in) : stored]:
            for t in range(len(self.tiers)):
                self._insert(t, key)
        for t, n in enumerate(by_tier):
            self.hit_blocks[t] += n
        return LruHit(len(held_in), tuple(by_tier))

    def _lookup(self, keys: list[int], limit: int) -> list[int]:
        held_in: list[int] = []
        tiers = self.tiers
        for key in keys[:limit]:
            for t, tier in enumerate(tiers):
                if key in tier:
                    held_in.append(t)
                    break
            else:
                break
        return held_in

    def _insert(self, t: int, key: int) -> None:
        cap = self.capacity[t]
        if cap <= 0:
            return
        tier = self.tiers[t]
        tier[key] = None
        tier.move_to_end(key)
        if len(tier) > cap:
            tier.popitem(last=False)
            self.evicted[t] += 1


def lru_hits(
    rows: Iterable[TraceRow], capacity_blocks: list[int], *, block_tokens: int | None = None
) -> Iterator[LruHit]:
    """Per row, in order: its prefix hit with LRU tiers of these capacities in blocks (G1 first)."""
    keys_of = BlockKeys()
    cache = TieredLRU(capacity_blocks)
    for row in rows:
        limit, stored = row_limits(row, block_tokens)
        yield cache.access(keys_of.of(row.hash_ids), limit, stored)
