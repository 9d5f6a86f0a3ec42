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

Cost: lookup() and commit() run on every request, over every block of its prompt (7,500 for a
120k-token prompt), on the mock's one event loop. A Python loop per block cost ~2 ms a request
(mostly cache misses in a 750,000-block dict) and made the mock's CPU, not the modelled links, the
limit of a filled-cache phase. So: per-block work runs in C loops (map over a tier's dict,
list.index); a replayed prompt's lookup is remembered while no tier's set of blocks changes (the
same answer, by construction), and with one enabled tier (the published G4-only shape) already
from the commit that filled it; and touches are deferred in whole batches (LRUTier), named by
the prompt's key tuple and range, so a replayed prompt's touch neither copies nor hashes its keys.
A cold prompt's lookup stops at its first block when no tier holds it.
"""

from __future__ import annotations

import json
import logging
from array import array
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from kvbench.mock.config import TIER_NAMES
from kvbench.mock.native import key_order

log = logging.getLogger("kvbench.mock")
MEMO_ENTRIES = 256  # lookups remembered (by prompt): more than a scenario's distinct prompts
MAX_PENDING = 4096  # deferred touches per tier before they are applied anyway


class LRUTier:
    """One tier's blocks in LRU order (oldest first), in a native.key_order() (C where built).

    Touches (a hit's blocks marked most recently used) are deferred: kept as whole batches and
    applied in order just before anything that needs the order (an insert of new blocks, which
    may evict; reading ``blocks``). Only order changes are deferred, never membership, so a
    lookup is always exact; and a batch touched again supersedes its earlier touch (the later
    touch moves every one of its keys to the end again), so a filled-cache phase that replays
    the same prompts keeps one pending batch per prompt instead of moving 7,500 keys a request.
    """

    def __init__(self, name: str, enabled: bool, capacity_blocks: int) -> None:
        self.name = name
        self.enabled = enabled
        self.capacity_blocks = capacity_blocks if enabled else 0
        self._blocks = key_order()
        # pending touches, oldest first: (keys, start, end) by the range's name (touch())
        self._touched: dict[Hashable, tuple[Sequence[int], int, int]] = {}
        self.evicted_blocks = 0
        # changes to the set of blocks (the lookup memo's check): inserts of new blocks; evictions
        # and clears
        self.added = 0
        self.removed = 0

    @property
    def blocks(self) -> Any:
        """The blocks, least recently used first (pending touches applied): iterable, `in`, len."""
        self._apply_touches()
        return self._blocks

    def __contains__(self, key: int) -> bool:
        return key in self._blocks

    def __len__(self) -> int:
        return len(self._blocks)

    def held(self, keys: Sequence[int]) -> list[bool]:
        """Whether each of `keys` is held (one C loop)."""
        held: list[bool] = self._blocks.held(keys)
        return held

    def touch(self, keys: Sequence[int], start: int = 0, end: int | None = None) -> None:
        """Mark the held ones of keys[start:end] most recently used, in order (absent keys are
        skipped). A range of a tuple is named by the tuple's identity: a prompt's keys are one
        tuple for as long as the tokenizer remembers the prompt, and hashing 7,500 keys (or copying
        them out) twice per request cost more than the rest of its cache work."""
        stop = len(keys) if end is None else min(end, len(keys))
        if stop <= start:
            return
        if type(keys) is tuple and (start, stop) != (0, len(keys)):
            name: Hashable = (id(keys), start, stop)  # alive while pending: the id stays its own
            batch: tuple[Sequence[int], int, int] = (keys, start, stop)
        else:
            whole = tuple(keys[start:stop])  # no copy for a whole tuple
            name, batch = whole, (whole, 0, len(whole))
        self._touched.pop(name, None)
        self._touched[name] = batch
        if len(self._touched) > MAX_PENDING:  # many distinct ranges: keep the backlog bounded
            self._apply_touches()

    def _apply_touches(self) -> None:
        pending, self._touched = self._touched, {}
        touch = self._blocks.touch
        for keys, a, b in pending.values():
            touch(keys, a, b)

    def insert(self, keys: Sequence[int]) -> list[int]:
        """Insert (or refresh) keys as most recently used; returns what was evicted."""
        if not self.enabled or self.capacity_blocks <= 0:
            return []
        if self._blocks.all_held(keys):
            self.touch(keys)  # nothing new (a refresh): the order alone changes, deferred
            return []
        self._apply_touches()
        self._blocks.add(keys)  # in order, each moved to the newest end or appended
        excess = len(self._blocks) - self.capacity_blocks
        evicted: list[int] = self._blocks.pop_oldest(excess) if excess > 0 else []  # least recently used
        self.evicted_blocks += len(evicted)
        self.added += 1
        self.removed += bool(evicted)
        return evicted

    def clear(self) -> None:
        self._blocks.clear()
        self._touched.clear()
        self.removed += 1


@dataclass
class LookupResult:
    """Outcome of a prefix lookup: per-block source tiers of the cached prefix."""

    block_tokens: int
    num_blocks: int = 0
    blocks_by_tier: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TIER_NAMES, 0))
    runs: list[tuple[str, int, int]] = field(default_factory=list)  # (tier, first block, end block)
    removed_at: tuple[int, ...] | None = None  # the tiers' removal counts when it was looked up

    @property
    def cached_tokens(self) -> int:
        return self.num_blocks * self.block_tokens

    def tokens_by_tier(self) -> dict[str, int]:
        return {t: n * self.block_tokens for t, n in self.blocks_by_tier.items()}

    def copy(self) -> LookupResult:
        by_tier, runs = dict(self.blocks_by_tier), list(self.runs)
        return LookupResult(self.block_tokens, self.num_blocks, by_tier, runs, self.removed_at)


# keys, max_blocks, whole, the tiers' removal and addition counts, result. `whole`: one enabled tier
# holds every block asked for, so only a removal can change the answer.
_Memo = tuple[tuple[int, ...], int, bool, tuple[int, ...], tuple[int, ...], LookupResult]


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
        # lookups of a replayed prompt (the same block-key tuple, e.g. from the tokenizer's memo):
        # by id(keys); an answer stays exact while no tier's set of blocks changed (_Memo)
        self._memo: OrderedDict[int, _Memo] = OrderedDict()
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
        """The cached prefix of `keys` (at most `max_blocks` blocks), each block in the fastest
        enabled tier that holds it."""
        if type(keys) is not tuple:  # only an immutable key sequence can be remembered
            return self._lookup(keys, max_blocks)
        removed, added = self._counts()
        memo = self._memo.get(id(keys))
        if (
            memo is not None
            and memo[0] is keys
            and memo[1] == max_blocks
            and memo[3] == removed
            and (memo[2] or memo[4] == added)
        ):
            self._memo.move_to_end(id(keys))
            return memo[5].copy()
        res = self._lookup(keys, max_blocks)
        whole = len(self._enabled) == 1 and res.num_blocks == len(range(len(keys))[:max_blocks])
        self._remember((keys, max_blocks, whole, removed, added, res))
        return res.copy()

    def _counts(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return tuple(t.removed for t in self._enabled), tuple(t.added for t in self._enabled)

    def _remember(self, memo: _Memo) -> None:
        self._memo[id(memo[0])] = memo
        self._memo.move_to_end(id(memo[0]))
        if len(self._memo) > MEMO_ENTRIES:
            self._memo.popitem(last=False)

    def _remember_commit(self, keys: Sequence[int], hit: LookupResult, full_blocks: int) -> None:
        """One enabled tier, and nothing removed from it since the lookup: after the commit it holds
        every block of the prompt (the hit's, held at the lookup, and the new ones), so the prompt's
        next lookup is known. Remembered now, so that the first replay of a prompt after the fill
        does not probe its 7,500 blocks (~3 ms each, cold in the CPU cache, on the timed path)."""
        if len(self._enabled) != 1 or type(keys) is not tuple or hit.removed_at is None:
            return
        if self._enabled[0].capacity_blocks <= 0:  # holds nothing, ever
            return
        memo = self._memo.get(id(keys))
        removed, added = self._counts()
        if memo is None or memo[0] is not keys or removed != hit.removed_at:
            return
        n = len(range(len(keys))[: memo[1]])
        if n > full_blocks:
            return
        tier = self._enabled[0].name
        res = LookupResult(self.block_tokens, n, removed_at=removed)
        if n > 0:
            res.runs.append((tier, 0, n))
            res.blocks_by_tier[tier] = n
        self._remember((keys, memo[1], True, removed, added, res))

    def _lookup(self, keys: Sequence[int], max_blocks: int) -> LookupResult:
        res = LookupResult(self.block_tokens, removed_at=self._counts()[0])
        enabled = self._enabled
        keys = keys[:max_blocks]
        n = len(keys)
        if not enabled or n == 0 or not any(keys[0] in t for t in enabled):
            return res  # a cold prompt (its first block nowhere): no need to probe the other 7,499
        # held[k][i]: whether enabled tier k holds block i (one C loop per tier)
        held = [t.held(keys) for t in enabled]

        def first(k: int, value: bool, start: int) -> int:
            try:
                return held[k].index(value, start)
            except ValueError:
                return n

        nxt = [first(k, True, 0) for k in range(len(enabled))]  # next block each tier holds
        i = 0
        while i < n:
            for k in range(len(enabled)):  # the fastest tier that holds block i
                if nxt[k] < i:
                    nxt[k] = first(k, True, i)
                if nxt[k] == i:
                    break
            else:
                break  # no tier holds block i: the cached prefix ends here
            # the run stays in tier k until it misses a block or a faster tier holds one
            end = min([first(k, False, i), *nxt[:k]])
            res.runs.append((enabled[k].name, i, end))
            i = end
        res.num_blocks = i
        for name, a, b in res.runs:
            res.blocks_by_tier[name] += b - a
        return res

    def commit(self, keys: Sequence[int], hit: LookupResult, full_blocks: int) -> None:
        """Record a finished prefill of a prompt with `full_blocks` whole blocks."""
        g1, g2 = self.tiers[0], self.tiers[1]
        for name, a, b in hit.runs:
            self.tier(name).touch(keys, a, b)
            staged = name in ("G3", "G4") and g2.enabled
            if (name == "G4" and self._log is not None) or (name != "G1" and g1.enabled) or staged:
                run = keys[a:b]  # copied only where a tier takes the blocks in
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
        self._remember_commit(keys, hit, full_blocks)

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
