import numpy as np
import pytest

from kvbench.load.prompts import SALT_WORDS, build_prompts, make_salt, resolve_lengths
from kvbench.load.schedule import arrival_offsets, request_order, work_items
from kvbench.scenario import ConcurrentLoad, LengthRange, RateLoad, SequentialLoad


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
    spaced = resolve_lengths(LengthRange(min=110_000, max=130_000, distribution="fixed_mean"), 100, 0)
    assert np.mean(spaced) == pytest.approx(120_000, abs=1)
    drawn = resolve_lengths(LengthRange(min=10, max=20), 1000, 0)
    assert min(drawn) >= 10 and max(drawn) <= 20
    assert drawn == resolve_lengths(LengthRange(min=10, max=20), 1000, 0)


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


# --- the load backend seam -------------------------------------------------------------------------


def test_load_kinds_say_how_many_in_flight():
    assert SequentialLoad().max_in_flight == 1
    assert ConcurrentLoad(concurrency=7, requests=10).max_in_flight == 7
    assert RateLoad(rate=2, requests=10, max_concurrency=3).max_in_flight == 3
    assert [k.paced for k in (SequentialLoad(), RateLoad(rate=2, requests=1))] == [False, True]


@pytest.mark.parametrize(
    "load",
    [
        SequentialLoad(),
        ConcurrentLoad(concurrency=3, requests=12),
        RateLoad(rate=500, requests=12, max_concurrency=2),
    ],
)
async def test_local_backend_respects_max_in_flight(load):
    import asyncio

    from kvbench.load import load_backend

    items = work_items(load, 12)
    in_flight = peak = 0
    seen = []

    async def issue(item, scheduled_ns):
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.002)
        seen.append(item.index)
        in_flight -= 1

    await load_backend("local").run(load, items, issue)
    assert sorted(seen) == list(range(len(items)))
    assert peak <= load.max_in_flight
