"""Trace rows become prompts, token-exact: one hash id, one block of exactly `block_tokens` tokens.

The text of a block is a seeded stream of vocabulary words drawn from (seed, hash id) alone, so
the same id is always the same text and two rows that share leading ids share a text prefix of
exactly those blocks: the trace's sharing, reproduced. A prompt is its blocks joined by single
spaces, the last one cut to the row's input_length. The words are ones the target's tokenizer
counts as one token each with a leading space (checked once with its /tokenize, `calibrate`), so
a block of N words is N tokens wherever it sits; the first block is shortened by the special
tokens the server adds (BOS), so the prompt the server counts is input_length tokens and the
engine's own blocks fall on the trace's block boundaries.

Cold by construction: a salt (a few random words) opens the first block of every root, inside
its block_tokens (the block keeps its length), so no block of this run can match anything cached
before it, while every prefix shared inside the run stays shared. The words are drawn from the
run's salt and the root's id together: one salt for every root would itself be a prefix all roots
share, and a token-level cache (llama.cpp's slot, SGLang's radix tree) would report it as a hit.

Memory: nothing here holds the trace. `realise` is a generator over rows; block texts are
remembered in a bounded LRU (recently used ids are the ones a prefix shares next), never all.

`engine_rows` re-expresses rows in an engine's smaller blocks (block_tokens a multiple of it) so
kvbench.traces.lru's rules, with `block_tokens=` the engine's, give the hits that engine (or the
mock) can have exactly, not only within one trace block.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import tee

import numpy as np

from kvbench.traces.lru import BlockKeys, expected_reusable_blocks
from kvbench.traces.rows import TraceRow

Counter = Callable[[list[str]], Awaitable[list[int]]]
CACHE_BYTES = 64 * 2**20  # block texts kept for reuse (a Mooncake block is ~3 KB of text)
_MASK64 = 2**64 - 1


@dataclass(frozen=True, slots=True)
class Calibration:
    """What the target's tokenizer does to block text: the special tokens it adds, the words kept."""

    special_tokens: int = 0
    words: tuple[str, ...] = ()
    dropped_words: tuple[str, ...] = ()
    source: str = "estimate"  # server (its /tokenize) | estimate (one token per word assumed)


async def calibrate(vocab: Sequence[str], counter: Counter | None) -> Calibration:
    """Which vocabulary words the server counts as one token after a space, and its special tokens.

    One /tokenize call for the whole vocabulary when every word is one token (the usual case);
    one per word only when some is not, to find which."""
    if counter is None:
        return Calibration(0, tuple(vocab), (), "estimate")
    one, two, every = await counter(["the", "the the", "the " + " ".join(vocab)])
    per_word = two - one
    special = max(0, one - per_word)
    if per_word == 1 and every - one == len(vocab):
        return Calibration(special, tuple(vocab), (), "server")
    counts = await counter(["the " + w for w in vocab])
    kept = tuple(w for w, c in zip(vocab, counts, strict=True) if c - one == 1)
    dropped = tuple(w for w, c in zip(vocab, counts, strict=True) if c - one != 1)
    if len(kept) < 16:
        raise ValueError(
            f"the server's tokenizer splits {len(dropped)} of {len(vocab)} words: none to build blocks from"
        )
    return Calibration(special, kept, dropped, "server")


@dataclass(frozen=True, slots=True)
class Realised:
    """One row made into a prompt, with what the trace says the server may reuse of it."""

    index: int  # position in the replay, 0-based
    row: TraceRow
    text: str
    tokens: int  # the prompt's tokens as the server counts them (input_length, special tokens included)
    expected_blocks: int  # leading blocks an unbounded prefix cache already holds (the trace's ideal)
    expected_cached_tokens: int  # expected_blocks * block_tokens, capped at input_length
    engine_expected_tokens: int | None = None  # the same in the engine's blocks (whole ones, < input)


class BlockText:
    """hash id -> the words of its block; the same id always the same words (seeded by seed and id)."""

    def __init__(self, words: Sequence[str], block_tokens: int, seed: int, salt: str) -> None:
        self.block_tokens = block_tokens
        self.seed = seed
        self._vocab = np.array(list(words), dtype=object)
        # the run's random salt as a seed: each root's salt words come from it and the root's id
        self._salt_seed = (
            int.from_bytes(hashlib.blake2b(salt.encode(), digest_size=8).digest()) if salt else None
        )
        self._salt_words = len(salt.split())
        self._cache: OrderedDict[tuple[int, bool], list[str]] = OrderedDict()
        self._cache_blocks = max(64, CACHE_BYTES // (6 * max(block_tokens, 1)))

    def words(self, hash_id: int, first: bool, special: int) -> list[str]:
        """The block's words: block_tokens of them, less the special tokens in a first block, whose
        salt (when there is one) comes first."""
        key = (hash_id, first)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        n = self.block_tokens - (special if first else 0)
        rng = np.random.default_rng([self.seed, hash_id & _MASK64, (hash_id >> 64) & _MASK64, 0xB10C])
        drawn: list[str] = self._vocab[rng.integers(0, len(self._vocab), max(n, 0))].tolist()
        words = (self._root_salt(hash_id) + drawn)[: max(n, 0)] if first else drawn
        self._cache[key] = words
        if len(self._cache) > self._cache_blocks:
            self._cache.popitem(last=False)
        return words

    def _root_salt(self, hash_id: int) -> list[str]:
        if self._salt_seed is None:
            return []
        rng = np.random.default_rng([self._salt_seed, hash_id & _MASK64, (hash_id >> 64) & _MASK64, 0x5A17])
        return list(self._vocab[rng.integers(0, len(self._vocab), self._salt_words)].tolist())


def prompt_text(row: TraceRow, blocks: BlockText, special: int) -> tuple[str, int]:
    """The row's prompt and its tokens as the server counts them: input_length (a row shorter
    than the special tokens still gets one word)."""
    left = max(1, row.input_length - special)
    parts: list[str] = []
    for i, hash_id in enumerate(row.hash_ids):
        if left <= 0:
            break
        words = blocks.words(hash_id, i == 0, special)
        take = words if len(words) <= left else words[:left]
        parts.append(" ".join(take))
        left -= len(take)
    words_used = max(1, row.input_length - special) - left
    return " ".join(parts), special + words_used


def realise(
    rows: Iterable[TraceRow], blocks: BlockText, calibration: Calibration, engine_block: int | None = None
) -> Iterator[Realised]:
    """Each row as a prompt, in order, one at a time (a generator: the caller bounds how far ahead).

    The expected hits run alongside, row by row (tee'd streams advanced in step: at most one row
    buffered): the trace's ideal, and with `engine_block` the engine's own exact share."""
    special = calibration.special_tokens
    block_tokens = blocks.block_tokens
    mine, for_ideal = tee(rows, 2)
    ideal = expected_reusable_blocks(for_ideal)
    engine = EngineReuse(block_tokens, engine_block) if engine_block else None
    for index, (row, hit) in enumerate(zip(mine, ideal, strict=True)):
        text, tokens = prompt_text(row, blocks, special)
        engine_tokens = engine.access(row) if engine is not None else None
        yield Realised(
            index, row, text, tokens, hit, min(hit * block_tokens, row.input_length), engine_tokens
        )


class EngineReuse:
    """The unbounded prefix cache in an engine's blocks (a divisor of the trace's), one row at a time.

    The same answer as kvbench.traces.lru.expected_reusable_blocks over `engine_rows` with
    block_tokens=engine_block (a test holds the two equal), without restating every row in
    m = block_tokens / engine_block times as many ids: a row stores all m engine blocks of each of
    its trace blocks but the last, and the whole engine blocks of its last one, a prefix of that
    id's text; so per chained trace block it is enough to keep the most engine blocks stored."""

    def __init__(self, block_tokens: int, engine_block: int) -> None:
        if block_tokens % engine_block:
            raise ValueError(
                f"block_tokens {block_tokens} is not a multiple of the engine's block {engine_block}"
            )
        self.block_tokens, self.engine_block = block_tokens, engine_block
        self.m = block_tokens // engine_block
        self._keys = BlockKeys()
        self._stored: dict[int, int] = {}  # chained trace block -> engine blocks of it held (a prefix)

    def access(self, row: TraceRow) -> int:
        """The row's reusable tokens in whole engine blocks (one token always computed); then it is stored."""
        keys = self._keys.of(row.hash_ids)
        m, stored = self.m, self._stored
        hit = 0
        for key in keys:
            held = stored.get(key, 0)
            hit += held
            if held < m:
                break
        limit = max(0, (row.input_length - 1) // self.engine_block)
        whole = row.input_length // self.engine_block  # engine blocks the row stores
        for j, key in enumerate(keys):
            n = min(m, whole - j * m)
            if n <= 0:
                break
            if stored.get(key, 0) < n:
                stored[key] = n
        return min(hit, limit) * self.engine_block


def engine_rows(rows: Iterable[TraceRow], block_tokens: int, engine_block: int) -> Iterator[TraceRow]:
    """The rows in blocks of `engine_block` tokens: trace block id X becomes ids (X, 0..m-1), m =
    block_tokens / engine_block, as many as the row's tokens fill (the last one partial), because
    the realised text of X cut short is the start of X's whole text."""
    if block_tokens % engine_block:
        raise ValueError(
            f"block_tokens {block_tokens} is not a multiple of the engine's block {engine_block}"
        )
    m = block_tokens // engine_block
    for row in rows:
        n = -(-row.input_length // engine_block)
        ids = tuple(row.hash_ids[j // m] * m + j % m for j in range(min(n, len(row.hash_ids) * m)))
        yield replace(row, hash_ids=ids)
