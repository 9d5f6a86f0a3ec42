"""Tiered prefix cache (no timing): which blocks sit in which tier.

* Blocks are named by chained 64-bit keys (tokenizer.block_keys), so matching keys from
  the start of a prompt is prefix matching.
* Each tier G1..G4 is an LRU of block keys bounded by capacity_bytes / block_bytes; a
  disabled tier holds nothing and never hits.
* lookup(): the longest prefix whose every block is in SOME enabled tier; each block
  counts in the fastest tier that holds it.
* commit() after prefill: hit blocks are touched (LRU); blocks onboarded from G2..G4 are
  placed in G1 (and G3/G4 reads in G2, which staged them) when those tiers are enabled;
  newly computed blocks are written through to EVERY enabled tier (each evicts its own
  least recently used blocks). So a block evicted from G1 is found again in G2, G3 or G4.
* Persistence (optional, G4 only): a directory with ``g4-meta.json`` and ``g4-index.bin``,
  an append-only log of 8-byte keys in LRU order (inserts and touches). Loading keeps the
  last occurrence of each key, the newest ``capacity`` keys, and rewrites the log compacted.
  The meta file names the model, geometry and block size; a mismatch starts empty.
"""

from __future__ import annotations

import json
import logging
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from kvbench.mock.config import TIER_NAMES

log = logging.getLogger("kvbench.mock")


class LRUTier:
    def __init__(self, name: str, enabled: bool, capacity_blocks: int) -> None:
        self.name = name
        self.enabled = enabled
        self.capacity_blocks = capacity_blocks if enabled else 0
        self.blocks: OrderedDict[int, None] = OrderedDict()
        self.evicted_blocks = 0

    def __contains__(self, key: int) -> bool:
        return key in self.blocks

    def __len__(self) -> int:
        return len(self.blocks)

    def touch(self, keys: Sequence[int]) -> None:
        move = self.blocks.move_to_end
        for k in keys:
            if k in self.blocks:
                move(k)

    def insert(self, keys: Sequence[int]) -> list[int]:
        """Insert (or refresh) keys as most recently used; returns what was evicted."""
        if not self.enabled or self.capacity_blocks <= 0:
            return []
        blocks = self.blocks
        move = blocks.move_to_end
        for k in keys:
            if k in blocks:
                move(k)
            else:
                blocks[k] = None
        evicted = []
        while len(blocks) > self.capacity_blocks:
            evicted.append(blocks.popitem(last=False)[0])
        self.evicted_blocks += len(evicted)
        return evicted

    def clear(self) -> None:
        self.blocks.clear()


@dataclass
class LookupResult:
    """Outcome of a prefix lookup: per-block source tiers of the cached prefix."""

    block_tokens: int
    num_blocks: int = 0
    blocks_by_tier: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TIER_NAMES, 0))
    runs: list[tuple[str, int, int]] = field(default_factory=list)  # (tier, first block, end block)

    @property
    def cached_tokens(self) -> int:
        return self.num_blocks * self.block_tokens

    def tokens_by_tier(self) -> dict[str, int]:
        return {t: n * self.block_tokens for t, n in self.blocks_by_tier.items()}


class TieredKVCache:
    def __init__(
        self,
        capacity_blocks: dict[str, int],
        enabled: dict[str, bool],
        block_tokens: int,
        persist_dir: Path | None = None,
        persist_meta: dict[str, object] | None = None,
    ) -> None:
        self.block_tokens = block_tokens
        self.tiers = [LRUTier(n, enabled[n], capacity_blocks[n]) for n in TIER_NAMES]
        self._enabled = [t for t in self.tiers if t.enabled]
        self._log: BinaryIO | None = None
        self._persist_dir = persist_dir
        self._meta = persist_meta or {}
        if persist_dir is not None and self.tier("G4").enabled:
            self._load_g4(persist_dir)

    def tier(self, name: str) -> LRUTier:
        return self.tiers[TIER_NAMES.index(name)]

    @property
    def persistent(self) -> bool:
        return self._log is not None

    def lookup(self, keys: Sequence[int], max_blocks: int) -> LookupResult:
        res = LookupResult(self.block_tokens)
        enabled = self._enabled
        if not enabled:
            return res
        runs = res.runs
        cur: str | None = None
        start = 0
        i = 0
        for i, key in enumerate(keys[:max_blocks]):
            for t in enabled:
                if key in t.blocks:
                    name = t.name
                    break
            else:
                break
            if name != cur:
                if cur is not None:
                    runs.append((cur, start, i))
                cur, start = name, i
        else:
            i = min(len(keys), max_blocks)
        if cur is not None:
            runs.append((cur, start, i))
        res.num_blocks = i
        for name, a, b in runs:
            res.blocks_by_tier[name] += b - a
        return res

    def commit(self, keys: Sequence[int], hit: LookupResult, full_blocks: int) -> None:
        """Record a finished prefill of a prompt with `full_blocks` whole blocks."""
        g1, g2 = self.tiers[0], self.tiers[1]
        for name, a, b in hit.runs:
            run = keys[a:b]
            self.tier(name).touch(run)
            if name == "G4" and self._log is not None:
                self._append(run)
            if name != "G1":
                g1.insert(run)
            if name in ("G3", "G4"):
                g2.insert(run)
        new = keys[hit.num_blocks : full_blocks]
        if new:
            for t in self._enabled:
                t.insert(new)
            if self._log is not None:
                self._append(new)

    def reset(self, include_persistent: bool, tiers: Sequence[str] | None = None) -> None:
        """Empty every tier (or only `tiers`, e.g. G1 and G2 to force a lower-tier hit);
        a persisted G4 only when `include_persistent`."""
        for t in self.tiers:
            if tiers is not None and t.name not in tiers:
                continue
            if t.name == "G4" and self.persistent and not include_persistent:
                continue
            t.clear()
        clears_g4 = tiers is None or "G4" in tiers
        if self.persistent and include_persistent and clears_g4 and self._persist_dir is not None:
            assert self._log is not None
            self._log.close()
            self._log = open(self._persist_dir / "g4-index.bin", "wb")  # noqa: SIM115

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    # --- persistence
    def _append(self, keys: Sequence[int]) -> None:
        assert self._log is not None
        self._log.write(array("Q", keys).tobytes())
        self._log.flush()

    def _load_g4(self, d: Path) -> None:
        d.mkdir(parents=True, exist_ok=True)
        meta_path, index_path = d / "g4-meta.json", d / "g4-index.bin"
        keys: list[int] = []
        if meta_path.exists() and index_path.exists():
            try:
                meta = json.loads(meta_path.read_text())
            except (OSError, ValueError):
                meta = None
            if meta == self._meta:
                raw = index_path.read_bytes()
                arr = array("Q")
                arr.frombytes(raw[: len(raw) - len(raw) % 8])
                keys = list(arr)
            else:
                log.warning("persisted G4 index in %s is for another model or block size; starting empty", d)
        g4 = self.tier("G4")
        # last occurrence wins (LRU order), newest `capacity` kept
        ordered = list(dict.fromkeys(reversed(keys)))[: g4.capacity_blocks]
        ordered.reverse()
        g4.insert(ordered)
        meta_path.write_text(json.dumps(self._meta, sort_keys=True))
        with open(index_path, "wb") as f:
            f.write(array("Q", ordered).tobytes())
        self._log = open(index_path, "ab")  # noqa: SIM115
