"""The goodput search on fake points whose capacity is known: it lands within one step."""

import pytest

from kvbench.sweep.search import Sample, search_capacity


def fake_points(capacity, n=40, calls=None):
    """A load at or under `capacity` serves every request within the SLO; above it, a quarter."""

    async def evaluate(load, repeat):
        if calls is not None:
            calls.append((load, repeat))
        good = n if load <= capacity else n // 4
        return Sample(good, n, good / 10)

    return evaluate


@pytest.mark.parametrize("capacity", [1, 7, 13, 31])
async def test_integer_search_finds_the_capacity(capacity):
    result = await search_capacity(fake_points(capacity), 1, 32, target=0.9)
    assert result.highest_meeting == capacity
    assert result.lowest_missing == capacity + 1
    best = result.trial_at(capacity)
    assert best is not None and best.passed and best.runs == 1
    assert len(result.trials) <= 2 + 5  # both ends, then log2(31) halvings


async def test_rate_search_lands_within_one_step():
    result = await search_capacity(fake_points(3.3), 0.5, 10.0, target=0.9, step=0.25, integer=False)
    assert result.highest_meeting <= 3.3 < result.lowest_missing
    assert result.lowest_missing - result.highest_meeting <= 0.25


async def test_range_ends_say_when_the_capacity_is_outside():
    low = await search_capacity(fake_points(0), 1, 16, target=0.9)
    assert low.highest_meeting is None and low.lowest_missing == 1 and "lowest" in low.note
    high = await search_capacity(fake_points(100), 1, 16, target=0.9)
    assert high.highest_meeting == 16 and "beyond" in high.note


async def test_a_straddling_point_is_run_again_and_pooled():
    calls = []

    async def evaluate(load, repeat):
        calls.append((load, repeat))
        # 9 of 10: a point estimate at the target, an interval either side of it
        return Sample(10 if load <= 2 else 9 if load == 3 else 0, 10)

    result = await search_capacity(evaluate, 2, 4, target=0.9, max_repeats=3)
    three = result.trial_at(3)
    assert three is not None and three.runs == 3 and three.requests == 30 and three.good == 27
    assert [r for load, r in calls if load == 3] == [0, 1, 2]
    assert three.verdict == "straddles" and three.passed  # 0.9 >= 0.9 by the point estimate
    assert result.highest_meeting == 3
