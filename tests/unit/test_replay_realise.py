"""Prompt realisation from trace rows: token-exact blocks, the same id the same text, salted roots,
streaming; the bounded feed; the engine-block restatement the mock agreement relies on."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator

import pytest

from kvbench.load.prompts import VOCAB
from kvbench.mock.tokenizer import count_tokens
from kvbench.run.replay.feed import PromptFeed
from kvbench.traces.lru import expected_reusable_blocks
from kvbench.traces.realise import BlockText, Calibration, EngineReuse, calibrate, engine_rows, realise
from kvbench.traces.rows import TraceRow

SALT = "alpha beta gamma delta epsilon zeta"
CAL = Calibration(0, VOCAB, (), "server")


def rows() -> list[TraceRow]:
    return [
        TraceRow(1, 0.0, 40, 3, (1, 2, 3)),
        TraceRow(2, 1.0, 50, 3, (1, 2, 4, 5)),
        TraceRow(3, 2.0, 20, 3, (9, 10)),
        TraceRow(4, 3.0, 33, 3, (1, 2, 3)),
    ]


def blocks(salt: str = SALT, seed: int = 0) -> BlockText:
    return BlockText(VOCAB, 16, seed, salt)


def test_prompts_are_token_exact_and_share_exactly_their_common_blocks() -> None:
    out = list(realise(rows(), blocks(), CAL))
    for r in out:
        assert count_tokens(r.text) == r.tokens == r.row.input_length
    words = [r.text.split() for r in out]
    # rows 1, 2 share ids (1, 2): exactly 32 words in common, then they differ
    common = len(list(itertools.takewhile(lambda p: p[0] == p[1], zip(words[0], words[1], strict=False))))
    assert common == 32
    # the same ids are the same text: row 4 is row 1 cut to 33 tokens
    assert words[3] == words[0][:33]
    # different roots differ from their first words on (no common salt prefix for a token-level cache)
    assert words[0][:3] != words[2][:3]
    assert [r.expected_blocks for r in out] == [0, 2, 0, 3]
    assert [r.expected_cached_tokens for r in out] == [0, 32, 0, 33]


def test_a_new_salt_changes_every_root_and_nothing_else() -> None:
    a = [r.text.split() for r in realise(rows(), blocks(), CAL)]
    b = [r.text.split() for r in realise(rows(), blocks("one two three four five six"), CAL)]
    for x, y in zip(a, b, strict=True):
        assert x[:6] != y[:6] and x[6:] == y[6:]
    unsalted = [r.text.split() for r in realise(rows(), blocks(""), CAL)]
    assert all(len(w) == r.input_length for w, r in zip(unsalted, rows(), strict=True))
    # the salt opens the root's block, which keeps its length: the id's words after it, cut by six
    assert all(x[6:16] == u[:10] and x[16:] == u[16:] for x, u in zip(a, unsalted, strict=True))


def test_special_tokens_shorten_the_first_block_only() -> None:
    cal = Calibration(1, VOCAB, (), "server")  # a BOS: the server counts one more than the words
    out = list(realise(rows(), blocks(), cal))
    assert [len(r.text.split()) + 1 for r in out] == [r.input_length for r in rows()]
    assert [r.tokens for r in out] == [r.input_length for r in rows()]
    # the engine's blocks (BOS first) still end where the trace's do: block 1 starts at word 15
    one, two = (r.text.split() for r in out[:2])
    assert one[:31] == two[:31] and one[31] != two[31]


def test_realise_streams_without_reading_ahead() -> None:
    seen = 0

    def endless() -> Iterator[TraceRow]:
        nonlocal seen
        for i in itertools.count():
            seen += 1
            yield TraceRow(i + 1, float(i), 64, 1, (i % 7, 1000 + i, 2000 + i, 3000 + i))

    gen = realise(endless(), blocks(), CAL)
    first = list(itertools.islice(gen, 5))
    assert len(first) == 5 and seen <= 6  # at most one row read ahead (the tee'd ideal)


async def test_calibration_drops_words_the_tokenizer_splits() -> None:
    split = {"government", "development"}

    async def counter(texts: list[str]) -> list[int]:  # a BOS, and two words of two tokens each
        return [1 + sum(2 if w in split else 1 for w in t.split()) for t in texts]

    cal = await calibrate(VOCAB, counter)
    assert cal.special_tokens == 1 and set(cal.dropped_words) == split
    assert split.isdisjoint(cal.words) and len(cal.words) == len(VOCAB) - 2
    assert (await calibrate(VOCAB, None)).source == "estimate"


def test_engine_rows_restate_the_trace_in_smaller_blocks() -> None:
    trace = rows()
    fine = list(engine_rows(trace, 16, 8))
    assert [len(r.hash_ids) for r in fine] == [5, 7, 3, 5]
    # row 4 = row 1 cut to 33 tokens: 4 whole 8-blocks of row 1 are reusable (32 tokens)
    assert list(expected_reusable_blocks(fine, block_tokens=8))[3] == 4
    with pytest.raises(ValueError, match="not a multiple"):
        list(engine_rows(trace, 16, 5))
    realised = list(realise(trace, blocks(), CAL, engine_block=8))
    assert [r.engine_expected_tokens for r in realised] == [0, 32, 0, 32]


async def test_the_feed_stays_within_its_window_and_fails_with_a_bad_row() -> None:
    made = 0

    def counted(n: int) -> Iterator[TraceRow]:
        nonlocal made
        for i in range(n):
            made += 1
            if i == 7:
                raise ValueError("trace.jsonl:8: hash_ids: bad")
            yield TraceRow(i + 1, float(i), 16, 1, (i,))

    feed = PromptFeed(realise(counted(20), blocks(), CAL), ahead=3)
    await feed.start()
    assert made <= 4  # the window (3), plus the row being realised
    for i in range(3):
        assert (await feed.take(i)).index == i
        await asyncio.sleep(0)
    assert made <= 7
    for i in range(3, 7):
        await feed.take(i)
    with pytest.raises(ValueError, match="hash_ids"):
        await feed.take(7)
    with pytest.raises(ValueError):
        await feed.aclose()


def test_engine_reuse_equals_the_lru_rules_over_engine_rows() -> None:
    # random chained rows, partial last blocks shared at every length: the fast per-trace-block
    # count and kvbench.traces.lru over the restated rows must agree row by row
    import random

    rng = random.Random(5)
    trace, prefixes = [], [()]
    for i in range(300):
        base = rng.choice(prefixes)[: rng.randrange(0, 6)]
        ids = base + tuple(rng.randrange(0, 3) for _ in range(rng.randrange(1, 4)))
        prefixes.append(ids)
        length = (len(ids) - 1) * 64 + rng.randrange(1, 65)
        trace.append(TraceRow(i + 1, float(i), length, 1, ids))
    fast = EngineReuse(64, 16)
    got = [fast.access(r) for r in trace]
    want = [h * 16 for h in expected_reusable_blocks(engine_rows(trace, 64, 16), block_tokens=16)]
    assert got == want and sum(got) > 0
