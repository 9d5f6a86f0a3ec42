"""Chained block keys of a prompt in a few numpy passes, not a hash call per block.

A block's key names its whole prefix: the bytes of the prompt's tokens joined by single spaces, up
to the block's last byte, and the tokenizer's root (the model). It used to be a blake2b chain, one
call per block: for a 120k-token prompt 7,500 calls plus 7,500 slices, ~4 ms of the mock's CPU on
every cold request. Here the prefix is read as little-endian 64-bit words; each word, xored with a
per-position constant, goes through the splitmix64 finalizer (a bijective mixer); the prefix's
value is the sum (mod 2**64) of its words' mixed values, plus its last partial word mixed with its
length, mixed once more with the prefix's byte length. Summing mixed, position-salted words is
order-sensitive and, for text not built to collide, as good as a random 64-bit function (it is
no defence against a crafted collision; a block key never was a security boundary). The root
enters the last mix only, so one pass over the words (SpanHash) gives the keys of every block
and the digest of the whole text (the tokenizer's memo key and the answer's seed, which must not
depend on the model).

Keys are KEY_BITS (60) wide, and the low LOW_BITS of block i's key are (that of block 0's key +
i), the rest its own prefix's. Python hashes an int below 2**61 by its value, so a prompt's 7,500
keys fall in neighbouring slots of a tier's dict: inserting and probing them hits memory in order
instead of at random; and an int below 2**60 is two machine digits, not three (hashed and made
faster). Together about half the cost of inserting a prompt's keys into a 200,000-block tier.
Still a function of the prefix alone (block 0 is in every prefix), so shared prefixes give equal
keys; two different prefixes collide only if their first blocks and positions agree modulo
2**LOW_BITS and their other 36 bits agree.
"""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt

SCHEME = "span-mix60-v3"  # recorded with a persisted G4 index: another scheme's keys start empty
KEY_BITS, LOW_BITS = 60, 24
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_LOW = np.uint64((1 << LOW_BITS) - 1)
_HIGH = np.uint64((1 << KEY_BITS) - (1 << LOW_BITS))  # the prefix's own bits of a key
_MASK = np.array([(1 << (8 * r)) - 1 for r in range(8)], np.uint64)  # the first r bytes of a word
Words = npt.NDArray[np.uint64]
Offsets = npt.NDArray[np.int64]
_DIGEST = "\x00digest"  # the digest's root: no model's
_scratch_arrays: tuple[Words, ...] = (np.zeros(0, np.uint64),) * 4  # _scratch()
_roots: dict[str, np.uint64] = {}


def _mix(x: Words, tmp: Words) -> Words:
    """splitmix64's finalizer on x, in place (uint64 arithmetic wraps); tmp: scratch of x's size."""
    for shift, factor in ((_S30, _M1), (_S27, _M2)):
        np.right_shift(x, shift, out=tmp)
        x ^= tmp
        x *= factor
    np.right_shift(x, _S31, out=tmp)
    x ^= tmp
    return x


def _scratch(n: int) -> tuple[Words, Words, Words, Words]:
    """(salts, raw, mixed, tmp), n words each: word j's salt (j * golden ratio) and three scratch
    arrays. Kept between calls and grown on demand: a fresh 700 KB array per pass costs its page
    faults (~170 a pass, more than the pass's arithmetic)."""
    global _scratch_arrays
    if len(_scratch_arrays[0]) < n:
        size = max(n, 2 * len(_scratch_arrays[0]))
        salts = np.arange(size, dtype=np.uint64) * _GOLDEN
        _scratch_arrays = (salts, *(np.empty(size, np.uint64) for _ in range(3)))
    salts, raw, mixed, tmp = _scratch_arrays
    return salts[:n], raw[:n], mixed[:n], tmp[:n]


def _root(root: str) -> np.uint64:
    seed = _roots.get(root)
    if seed is None:
        digest = hashlib.blake2b(root.encode(), digest_size=8).digest()
        seed = _roots[root] = np.uint64(int.from_bytes(digest, "little"))
    return seed


def root_seed(root: str) -> int:
    """The 64-bit seed a key rooted in `root` is mixed with (the C accelerator takes it as an int)."""
    return int(_root(root))


def digest_seed() -> int:
    """The seed of a text's digest (no model's root)."""
    return int(_root(_DIGEST))


class SpanHash:
    """One pass over a text's words; then the key of any of its prefixes, and its digest.

    Uses module-level scratch arrays: valid until the next SpanHash is made (the mock's one event
    loop makes them one at a time, and uses each at once); a stale one raises RuntimeError.
    """

    _latest = 0

    def __init__(self, data: bytes) -> None:
        SpanHash._latest += 1
        self._generation = SpanHash._latest
        self.size = len(data)
        n = self.size // 8 + 1  # the last word padded with zeros
        self._salts, self._raw, self._mixed, tmp = _scratch(n)
        raw = self._raw.view(np.uint8)
        raw[: self.size] = np.frombuffer(data, np.uint8)
        raw[self.size :] = 0
        np.bitwise_xor(self._raw, self._salts, out=self._mixed)
        _mix(self._mixed, tmp)

    def keys(self, ends: Offsets, root: str = "") -> tuple[int, ...]:
        """The key of each prefix data[:e] for e in `ends` (increasing byte offsets), rooted in
        `root`; neighbouring low bits (module docstring)."""
        self._check()
        if len(ends) == 0:
            return ()
        q = ends // 8  # whole words in each prefix
        last = int(q[-1])
        # the sum of each prefix's whole words: a sum per block, then a running sum of 7,500
        # numbers (reduceat's last range runs to the array's end: words[last] taken off again)
        starts = np.concatenate(([0], q[:-1]))
        step = np.add.reduceat(self._mixed[: last + 1], starts)
        step[-1:] -= self._mixed[last : last + 1]  # arrays: wrapping, not a scalar's warning
        step[starts == q] = 0  # reduceat gives the element itself for an empty range
        keys = np.cumsum(step, dtype=np.uint64)
        keys += self._tails(ends, q)
        keys ^= _root(root)
        _mix(keys, np.empty_like(keys))
        low = (keys[0] + np.arange(len(keys), dtype=np.uint64)) & _LOW
        keys &= _HIGH
        keys |= low
        return tuple(keys.tolist())

    def digest(self) -> int:
        """A 64-bit digest of the whole text (no root: the same text, the same digest)."""
        self._check()
        ends = np.array([self.size], np.int64)
        q = ends // 8
        key = np.array([self._mixed[: q[0]].sum(dtype=np.uint64)]) + self._tails(ends, q)
        key ^= _root(_DIGEST)
        return int(_mix(key, np.empty_like(key))[0])

    def _check(self) -> None:
        if self._generation != SpanHash._latest:
            raise RuntimeError("stale SpanHash: another one has since used the scratch arrays")

    def _tails(self, ends: Offsets, q: Offsets) -> Words:
        """Each prefix's partial last word, with its length, mixed; and the prefix's length."""
        r = (ends & 7).astype(np.uint64)
        tail = (self._raw[q] & _MASK[r]) ^ self._salts[q]
        tail += r * _M2
        _mix(tail, np.empty_like(tail))
        tail ^= ends.astype(np.uint64) * _GOLDEN
        return tail


def span_keys(data: bytes, ends: Offsets, root: str = "") -> tuple[int, ...]:
    """The key of each prefix data[:e] for e in `ends` (increasing byte offsets)."""
    return SpanHash(data).keys(ends, root) if len(ends) else ()
