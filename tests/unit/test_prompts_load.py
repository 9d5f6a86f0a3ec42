import numpy as np
import pytest

from kvbench.load import arrival_offsets, request_order, work_items
from kvbench.prompts import SALT_WORDS, build_prompts, make_salt, resolve_lengths
from kvbench.scenario import ConcurrentLoad, RateLoad, SequentialLoad


def bpe_like(text: str) -> int:
    """A stand-in tokenizer: BOS + long words cost two tokens, so word count != token count."""
    return 1 + sum(2 if len(w) > 7 else 1 for w in text.split())


async def fake_counter(texts):
    return [bpe_like(t) for t in texts]


async def test_exact_lengths_with_a_tokenizer_that_is_not_one_token_per_word():
    salt = make_salt(np.random.default_rng(1))
    lengths = [500, 1000, 4321]
    prompts = await build_prompts(lengths, seed=3, counter=fake_counter, sample_salt=salt)
    for p, n in zip(prompts, lengths, strict=True):
        assert p.actual_tokens == n
        assert bpe_like(p.with_salt(salt)) == n
        assert p.count_source == "server"


async def test_deterministic_and_distinct():
    a = await build_prompts([300, 300], seed=5)
    b = await build_prompts([300, 300], seed=5)
    c = await build_prompts([300, 300], seed=6)
    assert [p.body for p in a] == [p.body for p in b]
    assert a[0].body != a[1].body  # distinct prompts of the same length
    assert a[0].body != c[0].body


async def test_shared_prefix():
    ps = await build_prompts([400, 500], seed=1, shared_prefix_tokens=200)
    w0, w1 = ps[0].body.split(), ps[1].body.split()
    assert w0[:200] == w1[:200]
    assert w0[200:210] != w1[200:210]


def test_salt_is_fresh_and_fixed_length():
    rng = np.random.default_rng()
    salts = {make_salt(rng) for _ in range(1000)}
    assert len(salts) == 1000
    assert all(len(s.split()) == SALT_WORDS for s in salts)


def test_resolve_lengths():
    assert resolve_lengths([1, 2], 5, 0) == [1, 2, 1, 2, 1]
    spaced = resolve_lengths((110_000, 130_000, "fixed_mean"), 100, 0)
    assert np.mean(spaced) == pytest.approx(120_000, abs=1)
    drawn = resolve_lengths((10, 20, "uniform"), 1000, 0)
    assert min(drawn) >= 10 and max(drawn) <= 20
    assert drawn == resolve_lengths((10, 20, "uniform"), 1000, 0)


def test_each_prompt_used_equally_and_seeded():
    load = ConcurrentLoad(concurrency=28, requests=200, seed=0)
    order = request_order(load, 100)
    assert sorted(np.bincount(order).tolist()) == [2] * 100
    assert order == request_order(load, 100)
    assert order != request_order(ConcurrentLoad(concurrency=28, requests=200, seed=1), 100)


def test_sequential_and_rate_schedules():
    assert request_order(SequentialLoad(), 3) == [0, 1, 2]
    poisson = RateLoad(rate=10, requests=2000, seed=2)
    offs = arrival_offsets(poisson)
    assert offs == sorted(offs)
    assert offs[-1] / len(offs) == pytest.approx(0.1, rel=0.1)  # mean gap 1/rate
    const = arrival_offsets(RateLoad(rate=4, requests=3, arrivals="constant"))
    assert const == [0.0, 0.25, 0.5]
    items = work_items(poisson, 10)
    assert items[5].scheduled_offset_s == offs[5]
