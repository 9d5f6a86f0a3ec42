"""Chained block keys of a prompt in a few numpy passes, not a hash call per block.

A block's key names its whole prefix: the bytes of the prompt's tokens joined by single spaces, up
to the block's last byte, and the tokenizer's root (the model). It used to be a blake2b chain, one
call per block: for a 120k-token prompt 7,500 calls plus 7,500 slices, ~4 ms of the mock's CPU on
every cold request. Here the prefix is read as little-endian 64-bit words; each word, xored with a
per-position constant, goes through the splitmix64 finalizer (a bijective mixer); the prefix's
value is the sum (mod 2**64) of its words' mixed values, plus its last partial word mixed with its
length, mixed once more with the prefix's byte length. Summing mixed, position-salted words is
order-sensitive and, for text not built to collide, as good as a random 64-bit function (it is
no defence against a crafted collision; a block key never was a security boundary).

Locality: the low LOW_BITS of block i's key are (that of block 0's key + i), the rest its own
prefix's. Python hashes an int by its value, so a prompt's 7,500 keys fall in neighbouring slots of
a tier's dict: inserting and probing them hits memory in order instead of at random (about half
the cost in a 200,000-block tier). Still a function of the prefix alone (block 0 is in every
prefix), so shared prefixes give equal keys; two different prefixes collide only if their first
blocks and positions agree modulo 2**LOW_BITS and their 40 high bits agree.
"""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt

SCHEME = "span-mix64-v1"  # recorded with a persisted G4 index: another scheme's keys start empty
LOW_BITS = 24
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_LOW = np.uint64((1 << LOW_BITS) - 1)
_MASK = np.array([(1 << (8 * r)) - 1 for r in range(8)], np.uint64)  # the first r bytes of a word
_ZERO = np.zeros(1, np.uint64)
_positions = _a = _b = np.zeros(0, np.uint64)  # _scratch()
_roots: dict[str, np.uint64] = {}

Words = npt.NDArray[np.uint64]


def _mix(x: Words, tmp: Words) -> Words:
    """splitmix64's finalizer on x, in place (uint64 arithmetic wraps); tmp: scratch of x's size."""
    for shift, factor in ((_S30, _M1), (_S27, _M2)):
        np.right_shift(x, shift, out=tmp)
        x ^= tmp
        x *= factor
    np.right_shift(x, _S31, out=tmp)
    x ^= tmp
    return x


def _scratch(n: int) -> tuple[Words, Words, Words]:
    """(salts, a, b): word j's salt (j * golden ratio) and two scratch arrays, n words each.

    Kept between calls and grown on demand: a fresh 700 KB array per pass costs its page faults
    (~170 a pass, more than the pass's arithmetic). The mock's one event loop is the only caller.
    """
    global _positions, _a, _b
    if len(_positions) < n:
        size = max(n, 2 * len(_positions))
        _positions = np.arange(size, dtype=np.uint64) * _GOLDEN
        _a, _b = np.empty(size, np.uint64), np.empty(size, np.uint64)
    return _positions[:n], _a[:n], _b[:n]


def _root(root: str) -> np.uint64:
    seed = _roots.get(root)
    if seed is None:
        digest = hashlib.blake2b(root.encode(), digest_size=8).digest()
        seed = _roots[root] = np.uint64(int.from_bytes(digest, "little"))
    return seed


def span_keys(data: bytes, ends: npt.NDArray[np.int64], root: str = "") -> tuple[int, ...]:
    """The key of each prefix data[:e] for e in `ends` (increasing byte offsets, each > 0)."""
    if len(ends) == 0:
        return ()
    q = ends // 8  # whole words in each prefix
    r = (ends & 7).astype(np.uint64)  # and its bytes in the next word
    n = int(q[-1]) + 1  # the words read: every block's whole words, and the last one's next
    salts, words, tmp = _scratch(n)
    raw = words.view(np.uint8)
    size = min(len(data), 8 * n)
    raw[:size] = np.frombuffer(data, np.uint8, size)
    raw[size:] = 0
    # the partial words (each prefix's next r bytes) before `words` is mixed in place
    tail = (words[q] & _MASK[r]) ^ salts[q]
    tail += r * _M2
    words ^= salts
    words ^= _root(root)
    _mix(words, tmp)
    # the sum of each prefix's whole words: a sum per block (words[q[-1]] is made the last range's
    # bound, 0), then a running sum of 7,500 numbers
    words[n - 1] = 0
    starts = np.concatenate(([0], q[:-1]))
    step = np.add.reduceat(words, starts)
    step[starts == q] = 0  # reduceat gives the element itself for an empty range
    keys = np.cumsum(step, dtype=np.uint64)
    keys += _mix(tail, np.empty_like(tail))
    keys ^= ends.astype(np.uint64) * _GOLDEN
    _mix(keys, tail)
    low = (keys[0] + np.arange(len(keys), dtype=np.uint64)) & _LOW
    keys &= ~_LOW
    keys |= low
    return tuple(keys.tolist())
