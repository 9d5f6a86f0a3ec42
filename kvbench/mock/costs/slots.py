"""llama.cpp's cache shape: one prompt per slot, and a RAM prompt cache that prompts move through.

A shared prefix cache (vLLM's, the mock's tiers) lets every request hit any block any request
computed. llama-server does not: each of its slots (-np) holds the KV of the one prompt it last ran,
and with --cache-ram a slot that is given a different prompt first copies its own out to a RAM
prompt cache, then copies IN the cached prompt that best matches the new one (moving it: the entry
leaves the RAM cache). So a prompt is in exactly one place, a slot or the RAM cache, and a second
request for a prompt whose slot is busy finds it nowhere and computes it again. Under load that is
most of llama.cpp's misses: 8 prompts reused over 28 connections on 4 slots missed 42 of 112 times,
where a shared cache misses 8.

The rules follow llama.cpp's server (tools/server, get_available_slot and server_prompt_cache):
  pick     among idle slots, the one whose prompt shares the longest prefix with the request, if
           that prefix is more than `similarity` of the request (slot_prompt_similarity, 0.1);
           else the least recently used idle slot
  save     when the pick came from the LRU rule, or keeps under half of the slot's prompt: the
           slot's prompt is copied to the RAM cache (unless an entry already holds it; entries that
           are a prefix of it are dropped; oldest entries go when it is full)
  load     the RAM entry whose prefix with the request beats the slot's own on both the share of
           the entry kept and the share of the request, keeping at least `keep_min` (0.25) of the
           entry, is moved into the slot
  hold     after prefill the slot holds the request's prompt
Blocks are the profile's (block_tokens 1 is llama.cpp's token-exact reuse). Pure: no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class _Slot:
    keys: tuple[int, ...] = ()  # block keys of the prompt its KV holds
    busy: bool = False
    last_used: int = -1  # llama.cpp's t_last_used: the order slots were last released in


@dataclass(frozen=True)
class SlotHit:
    slot: int
    blocks: int  # cached prefix of the request, in blocks
    restored_blocks: int = 0  # blocks of the RAM entry copied into the slot (the whole entry)
    saved_blocks: int = 0  # blocks of the slot's old prompt copied out to the RAM cache

    @property
    def tier(self) -> str:
        """Where the hit came from: the slot's own KV (G1) or a prompt restored from RAM (G2)."""
        return "G2" if self.restored_blocks else "G1"


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix of two key sequences (binary search on slices: C-speed compares)."""
    lo, hi = 0, min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    while lo < hi:  # a[:lo] == b[:lo] holds; a[:hi] != b[:hi]
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass
class SlotCache:
    slots: int
    ram_blocks: int | None  # RAM prompt cache capacity in blocks; None: unbounded; 0: no RAM cache
    similarity: float = 0.1
    keep_min: float = 0.25
    _slots: list[_Slot] = field(init=False)
    _ram: list[tuple[int, ...]] = field(init=False, default_factory=list)  # oldest first
    _released: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        if self.slots < 1:
            raise ValueError("slot cache: at least one slot")
        self._slots = [_Slot() for _ in range(self.slots)]

    @property
    def ram_entries(self) -> int:
        return len(self._ram)

    def held(self, slot: int) -> tuple[int, ...]:
        return self._slots[slot].keys

    def acquire(self, keys: Sequence[int], max_blocks: int) -> SlotHit:
        """Give the request an idle slot (the caller admits at most `slots` at once) and its hit."""
        keys = tuple(keys)
        idle = [i for i, s in enumerate(self._slots) if not s.busy]
        if not idle:
            raise RuntimeError("slot cache: no idle slot (admission must bound requests by slots)")
        pick, save = None, False
        if self.similarity > 0 and keys:
            best = 0.0
            for i in idle:
                held = self._slots[i].keys
                if not held:
                    continue
                sim = common_prefix(held, keys) / len(keys)
                if sim > best and sim > self.similarity:
                    pick, best = i, sim
            if pick is not None:
                save = best * len(keys) / len(self._slots[pick].keys) < 0.5
        if pick is None:
            pick = min(idle, key=lambda i: (self._slots[i].last_used, -i))  # llama.cpp: `<=`, the last tie
            save = True
        slot = self._slots[pick]
        saved = restored = 0
        if save and self.ram_blocks != 0:
            saved = self._save(slot.keys)
            restored = self._load(slot, keys)
        slot.busy = True
        return SlotHit(pick, min(common_prefix(slot.keys, keys), max_blocks), restored, saved)

    def hold(self, slot: int, keys: Sequence[int]) -> None:
        """The slot's KV now holds this prompt (its prefill finished)."""
        self._slots[slot].keys = tuple(keys)

    def release(self, slot: int) -> None:
        s = self._slots[slot]
        s.busy = False
        s.last_used = self._released
        self._released += 1

    def reset(self) -> None:
        """/reset_prefix_cache: every idle slot and the RAM cache forget their prompts."""
        for s in self._slots:
            if not s.busy:
                s.keys = ()
        self._ram.clear()

    def _save(self, keys: tuple[int, ...]) -> int:
        if not keys or any(common_prefix(e, keys) == len(keys) for e in self._ram):
            return 0
        if self.ram_blocks is not None and len(keys) > self.ram_blocks:
            return 0  # one prompt over the whole cache: llama.cpp skips it
        self._ram = [e for e in self._ram if common_prefix(e, keys) != len(e)]
        self._ram.append(keys)
        if self.ram_blocks is not None:
            while sum(len(e) for e in self._ram) > self.ram_blocks:
                self._ram.pop(0)
        return len(keys)

    def _load(self, slot: _Slot, keys: tuple[int, ...]) -> int:
        own = common_prefix(slot.keys, keys)
        keep_best = own / len(slot.keys) if slot.keys else -1.0
        sim_best = own / len(keys) if keys else 0.0
        best = None
        for j, e in enumerate(self._ram):
            lcp = common_prefix(e, keys)
            keep, sim = lcp / len(e), (lcp / len(keys) if keys else 0.0)
            if keep < self.keep_min:
                continue
            if keep_best < keep and sim_best < sim:
                best, keep_best, sim_best = j, keep, sim
        if best is None:
            return 0
        slot.keys = self._ram.pop(best)
        return len(slot.keys)
