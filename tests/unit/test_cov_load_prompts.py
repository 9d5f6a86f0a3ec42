"""Prompts and schedules (kvbench.load.prompts, kvbench.load.schedule) as properties of their inputs:
seeds reproduce, bounds hold, salts differ, the loops keep their in-flight caps, and a counted build
hits lengths exactly with tokenizers that cost more than one token a word."""

from __future__ import annotations

import asyncio
import hashlib

import numpy as np
import pytest

from kvbench.load.prompts import (
    SALT_WORDS,
    VOCAB,
    Prompt,
    bounded_counter,
    build_prompts,
    make_salt,
    resolve_lengths,
)
from kvbench.load.schedule import (
    WorkItem,
    arrival_offsets,
    request_order,
    run_closed_loop,
    run_open_loop,
    work_items,
)
from kvbench.scenario import ConcurrentLoad, LengthRange, RateLoad


def test_a_poisson_schedule_is_its_seed_and_its_gaps_are_exponential() -> None:
    load = RateLoad(rate=50, requests=4000, seed=11)
    offs = arrival_offsets(load)
    assert offs == arrival_offsets(RateLoad(rate=50, requests=4000, seed=11))
    assert offs != arrival_offsets(RateLoad(rate=50, requests=4000, seed=12))
    gaps = np.diff(offs)
    assert offs[0] == 0.0 and (gaps >= 0).all()
    # exponential gaps: mean 1/rate and a standard deviation equal to the mean
    assert gaps.mean() == pytest.approx(1 / 50, rel=0.08)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.1)


def test_a_constant_rate_spaces_arrivals_exactly() -> None:
    offs = arrival_offsets(RateLoad(rate=8, requests=17, arrivals="constant"))
    assert np.allclose(np.diff(offs), 1 / 8) and offs[0] == 0.0 and len(offs) == 17


def test_random_sampling_stays_in_range_and_reproduces() -> None:
    load = ConcurrentLoad(concurrency=4, requests=500, seed=3, sampling="random")
    order = request_order(load, 7)
    assert len(order) == 500 and set(order) <= set(range(7)) and len(set(order)) == 7
    assert order == request_order(load, 7)
    items = work_items(load, 7)
    assert [it.index for it in items] == list(range(500)) and all(it.scheduled_offset_s == 0 for it in items)


@pytest.mark.parametrize(("lo", "hi", "count"), [(100, 120, 1000), (5, 6, 50)])
def test_a_uniform_range_draws_within_its_bounds_from_its_seed(lo: int, hi: int, count: int) -> None:
    spec = LengthRange(min=lo, max=hi)
    drawn = resolve_lengths(spec, count, seed=4)
    assert min(drawn) >= lo and max(drawn) <= hi and len(drawn) == count
    assert {lo, hi} <= set(drawn)  # both ends reachable (a miss: under 1e-20 at these sizes)
    assert drawn == resolve_lengths(spec, count, seed=4) and drawn != resolve_lengths(spec, count, seed=5)


def test_a_fixed_mean_range_is_evenly_spaced_and_one_prompt_is_its_middle() -> None:
    spec = LengthRange(min=100, max=500, distribution="fixed_mean")
    assert resolve_lengths(spec, 5, seed=0) == [100, 200, 300, 400, 500]
    assert resolve_lengths(LengthRange(min=100, max=301), 1, seed=0) == [200]


def test_a_salt_is_vocabulary_words_and_changes_the_row_not_its_length() -> None:
    rng = np.random.default_rng(8)
    salts = [make_salt(rng) for _ in range(50)]
    assert len(set(salts)) == 50 and all(set(s.split()) <= set(VOCAB) for s in salts)
    p = Prompt(2, 10, "alpha beta gamma")
    a, b = p.row(salts[0]), p.row(salts[1])
    assert a["sha256"] == hashlib.sha256(f"{salts[0]} alpha beta gamma".encode()).hexdigest()[:16]
    assert a["sha256"] != b["sha256"] and p.row("")["chars"] == len("alpha beta gamma")
    assert len(p.with_salt(salts[0]).split()) == SALT_WORDS + 3


async def test_an_estimated_set_counts_salt_words_into_the_length() -> None:
    salt = make_salt(np.random.default_rng(0))
    salted = await build_prompts([50, 7], seed=1, sample_salt=salt)
    assert [len(p.with_salt(salt).split()) for p in salted] == [50, 7]
    plain = await build_prompts([50, 3], seed=1, shared_prefix_tokens=10)
    assert [len(p.body.split()) for p in plain] == [50, 3]
    assert plain[0].body.split()[:3] == plain[1].body.split()  # a prompt shorter than the shared part


async def test_a_bounded_counter_keeps_its_parallelism() -> None:
    live = peak = 0

    async def one(text: str) -> int:
        nonlocal live, peak
        live += 1
        peak = max(peak, live)
        await asyncio.sleep(0)
        live -= 1
        return len(text)

    counts = await bounded_counter(one, parallel=3)(["a" * i for i in range(20)])
    assert counts == list(range(20)) and peak == 3


async def test_the_closed_loop_sends_each_item_once_within_its_concurrency() -> None:
    live = peak = 0
    seen: list[int] = []

    async def issue(item: WorkItem, _due: int) -> None:
        nonlocal live, peak
        live += 1
        peak = max(peak, live)
        await asyncio.sleep(0)
        seen.append(item.index)
        live -= 1

    await run_closed_loop([WorkItem(i, 0) for i in range(25)], 4, issue)
    assert sorted(seen) == list(range(25)) and peak == 4 and live == 0


async def test_the_open_loop_keeps_the_arrival_order_and_its_cap() -> None:
    live = peak = 0
    dues: list[tuple[int, int]] = []

    async def issue(item: WorkItem, due: int) -> None:
        nonlocal live, peak
        live += 1
        peak = max(peak, live)
        dues.append((item.index, due))
        await asyncio.sleep(0.001)
        live -= 1

    items = [WorkItem(i, 0, i * 0.0005) for i in range(30)]
    await run_open_loop(items, 2, issue)
    assert peak <= 2 and sorted(i for i, _ in dues) == list(range(30))
    by_index = dict(dues)
    # each item is due at the loop's start plus its offset: the gaps are the schedule's, exactly
    assert all(by_index[i] - by_index[0] == int(i * 0.0005 * 1e9) for i in range(30))


def two_token_words(text: str) -> int:
    return 2 * len(text.split())


def long_words_are_two(text: str) -> int:
    return sum(2 if len(w) > 5 else 1 for w in text.split())


async def test_lengths_are_hit_with_a_tokenizer_of_two_tokens_a_word() -> None:
    async def counter(texts: list[str]) -> list[int]:
        return [two_token_words(t) for t in texts]

    salt = make_salt(np.random.default_rng(0))
    (p,) = await build_prompts([350], seed=0, counter=counter, sample_salt=salt)
    assert p.actual_tokens == 350


async def test_lengths_are_hit_when_the_boundary_word_is_two_tokens() -> None:
    async def counter(texts: list[str]) -> list[int]:
        return [long_words_are_two(t) for t in texts]

    salt = make_salt(np.random.default_rng(0))
    (p,) = await build_prompts([200], seed=0, counter=counter, sample_salt=salt)
    assert p.actual_tokens == 200
