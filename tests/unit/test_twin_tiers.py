"""The twin's near tier and the cliff beyond it (kvbench.twin.tiers), on hits with a known answer."""

from __future__ import annotations

import numpy as np
import pytest

from kvbench.twin import tiers

BLOCK = 16
TAIL = 0.0003


def _kv(tokens: int) -> float:
    return 1000.0 * tokens  # bytes per token: any linear geometry


def test_the_lru_replay_says_what_the_near_tier_still_held() -> None:
    # A and B of two blocks each through a 3-block tier: B's commit evicts A's oldest block
    rows = [
        tiers.Row("A", 32, 0, 0, 1, None),
        tiers.Row("B", 32, 0, 2, 3, None),
        tiers.Row("A", 32, 32, 4, 5, 0.0),
        tiers.Row("B", 40, 32, 6, 7, 0.0),
    ]
    assert tiers.near_tokens([rows], 3, BLOCK) == [[0, 0, 16, 16]]
    assert tiers.near_tokens([rows], 4, BLOCK) == [[0, 0, 32, 32]]
    # a lookup made while the prompt's first use is still prefilling finds nothing near (not committed)
    racing = [tiers.Row("A", 32, 0, 0, 10, None), tiers.Row("A", 32, 0, 1, 11, None)]
    assert tiers.near_tokens([racing], 8, BLOCK) == [[0, 0]]


def _hits(capacity: int, latency: float, bw: float, seed: int = 0) -> list[list[tiers.Row]]:
    """A sweep (each prompt cold then warm) and a throughput run (8 prompts drawn at random, one at a
    time), their excess made by a near tier of `capacity` blocks and a far tier (latency, bw)."""
    rng = np.random.default_rng(seed)
    sweep = [(f"s{i}", n) for i, n in enumerate((320, 960, 1600)) for _ in range(2)]
    sizes = [int(s) for s in rng.integers(20, 60, 8) * BLOCK]
    load = [(f"p{j}", sizes[j]) for j in rng.integers(0, 8, 40)]
    runs = []
    for prompts in (sweep, load):
        rows, seen = [], set()
        for t, (key, n) in enumerate(prompts):
            cached = (n // BLOCK) * BLOCK if key in seen else 0
            seen.add(key)
            rows.append(tiers.Row(key, n, cached, 10 * t, 10 * t + 5, 0.0 if cached else None))
        runs.append(rows)
    near = tiers.near_tokens(runs, capacity, BLOCK)
    out = []
    for rows, held in zip(runs, near, strict=True):
        made = []
        for r, h in zip(rows, held, strict=True):
            far = r.cached - h
            excess = (latency + _kv(far) / bw + TAIL if far else 0.0) if r.cached else None
            made.append(tiers.Row(r.prompt, r.tokens, r.cached, r.sent_ns, r.first_ns, excess))
        out.append(made)
    return out


def test_the_cliff_is_found_with_its_capacity_and_far_tier() -> None:
    runs = _hits(capacity=120, latency=0.004, bw=2e9)

    def one_tier(cached: int) -> float:  # the sweep's hits were near: one tier of ~0 cost
        return TAIL

    got = tiers.fit_cliff(runs, BLOCK, _kv, one_tier, TAIL)
    assert got is not None
    # the LRU's answer is a step function of the capacity: the found one splits every hit the same way
    assert tiers.near_tokens(runs, got.capacity_blocks, BLOCK) == tiers.near_tokens(runs, 120, BLOCK)
    assert got.far.latency_s == pytest.approx(0.004, rel=1e-6)
    assert got.far.bandwidth_bytes_per_s == pytest.approx(2e9, rel=1e-6)
    assert got.score == pytest.approx(0.0, abs=1e-12) and got.one_tier_score > 0
    assert 0 < got.near_hits < got.hits
    assert got.record()["capacity_blocks"] == got.capacity_blocks


def test_one_tier_serving_every_hit_shows_no_cliff() -> None:
    runs = _hits(capacity=10**6, latency=0.0, bw=1e15)  # every hit near: all cost the same
    lat, bw = 0.003, 5e9
    same = [
        [
            tiers.Row(r.prompt, r.tokens, r.cached, r.sent_ns, r.first_ns,
                      None if r.excess_s is None else lat + _kv(r.cached) / bw + TAIL)
            for r in rows
        ]
        for rows in runs
    ]  # fmt: skip
    assert tiers.fit_cliff(same, BLOCK, _kv, lambda c: lat + _kv(c) / bw + TAIL, TAIL) is None
    assert tiers.fit_cliff(same[:1][:0], BLOCK, _kv, lambda c: 0.0, TAIL) is None  # nothing scored
