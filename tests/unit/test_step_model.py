"""The step model (kvbench.mock.costs.step): token budgets, chunked prefill sharing steps with decodes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import pytest

from kvbench.mock.costs.pacing import Pacer
from kvbench.mock.costs.step import StepLoop, StepParams, StepScheduler


class Costs:
    """prefill(n, c) = a*(n-c) + b*(n^2-c^2)/2; a decode step = base + per-sequence cost."""

    a, b, base, per_seq = 1e-4, 2e-8, 5e-3, 1e-4

    def prefill_s(self, n: int, c: int) -> float:
        return self.a * (n - c) + self.b * (n * n - c * c) / 2

    def decode_step_s(self, contexts: Iterable[int]) -> float:
        return self.base + self.per_seq * len(list(contexts))


def _drain(s: StepScheduler) -> list:
    steps = []
    while (step := s.plan()) is not None:
        steps.append(step)
    return steps


def test_a_prompt_alone_costs_its_whole_prefill_in_chunks() -> None:
    costs = Costs()
    s = StepScheduler(costs, StepParams(token_budget=1024))
    s.add_prefill(1, 5000, 0)
    steps = _drain(s)
    assert [st.prefill_tokens for st in steps] == [1024, 1024, 1024, 1024, 904]
    assert sum(st.duration_s for st in steps) == pytest.approx(costs.prefill_s(5000, 0), rel=1e-12)
    assert steps[-1].finished == (1,) and all(not st.finished for st in steps[:-1])


def test_a_cached_prefix_is_not_computed_and_the_last_token_always_is() -> None:
    costs = Costs()
    s = StepScheduler(costs, StepParams(token_budget=4096))
    s.add_prefill(1, 3000, 2048)
    s.add_prefill(2, 100, 100)  # fully cached: the last token is still computed
    (step,) = _drain(s)
    assert step.chunks == {1: 952, 2: 1}
    assert step.duration_s == pytest.approx(costs.prefill_s(3000, 2048) + costs.prefill_s(100, 99))


def test_decodes_go_first_and_the_budget_is_shared() -> None:
    s = StepScheduler(Costs(), StepParams(token_budget=4))
    for j in (1, 2, 3):
        s.add_decode(j, 500)
    s.add_prefill(9, 10, 0)
    first = s.plan()
    assert first is not None
    assert first.decoded == (1, 2, 3) and first.chunks == {9: 1} and not first.finished
    rest = _drain(s)
    assert [st.chunks[9] for st in rest] == [4, 4, 1] and rest[-1].finished == (9,)


def test_more_decodes_than_budget_wait_for_the_next_step() -> None:
    s = StepScheduler(Costs(), StepParams(token_budget=2))
    for j in range(5):
        s.add_decode(j, 100)
    assert [st.decoded for st in _drain(s)] == [(0, 1), (2, 3), (4,)]


def test_a_short_prefill_waits_for_the_long_chunk_it_shares_a_step_with() -> None:
    """The mechanism behind llama.cpp's warm TTFT under load: a one-token suffix that joins a step
    carrying another prompt's chunk finishes only when that step does."""
    costs = Costs()
    s = StepScheduler(costs, StepParams(token_budget=2048))
    s.add_prefill(1, 3000, 0)  # a cold prompt, first in line
    s.add_prefill(2, 1000, 999)  # a warm request: one token left to compute
    first, second = s.plan(), s.plan()
    assert first is not None and first.chunks == {1: 2048} and not first.finished
    assert second is not None and second.chunks == {1: 952, 2: 1} and second.finished == (1, 2)
    alone = costs.prefill_s(1000, 999)
    waited = first.duration_s + second.duration_s
    assert waited > 100 * alone  # its TTFT is the shared steps', not its own token's
    assert second.duration_s == pytest.approx(costs.prefill_s(3000, 2048) + alone)


def test_arrival_order_decides_who_gets_the_budget() -> None:
    s = StepScheduler(Costs(), StepParams(token_budget=100))
    s.add_prefill(1, 150, 0)
    s.add_prefill(2, 150, 0)
    steps = _drain(s)
    assert [st.chunks for st in steps] == [{1: 100}, {1: 50, 2: 50}, {2: 100}]
    assert [st.finished for st in steps] == [(), (1,), (2,)]


def test_with_slots_the_lowest_slot_gets_the_budget_whatever_came_first() -> None:
    """llama-server walks its slots in index order when it fills a batch with prompt tokens."""
    s = StepScheduler(Costs(), StepParams(token_budget=100))
    s.add_prefill(1, 150, 0, slot=3)
    s.add_prefill(2, 150, 0, slot=0)
    steps = _drain(s)
    assert [st.chunks for st in steps] == [{2: 100}, {2: 50, 1: 50}, {1: 100}]


def test_a_removed_request_leaves_the_queue() -> None:
    s = StepScheduler(Costs(), StepParams(token_budget=10))
    s.add_prefill(1, 100, 0)
    s.add_decode(2, 10)
    s.remove(1)
    s.remove(2)
    assert not s and s.plan() is None


def test_a_budget_below_one_token_is_refused() -> None:
    with pytest.raises(ValueError, match="token_budget"):
        StepScheduler(Costs(), StepParams(token_budget=0))


async def test_the_loop_serves_a_late_arrival_after_the_running_chunks() -> None:
    """On the event loop: a warm request that arrives while a cold prompt is being prefilled in
    chunks gets budget only when the running prompt leaves some (as a running request goes first on
    vLLM), so it finishes in the step with the cold prompt's last chunk, not at once."""
    s = StepScheduler(Costs(), StepParams(token_budget=1000))
    loop = StepLoop(s, time_scale=0.01, pacer=Pacer())
    done: dict[str, int] = {}

    async def cold() -> None:
        await loop.prefill(2500, 0)
        done["cold"] = loop.steps

    async def warm() -> None:
        await asyncio.sleep(0)
        await loop.prefill(600, 599)
        done["warm"] = loop.steps

    await asyncio.gather(cold(), warm())
    assert done == {"cold": 3, "warm": 3}
    loop.close()


async def test_a_cancelled_request_does_not_hold_the_steps() -> None:
    s = StepScheduler(Costs(), StepParams(token_budget=100))
    loop = StepLoop(s, time_scale=0.01, pacer=Pacer())
    task = asyncio.create_task(loop.prefill(100_000, 0))  # a thousand steps
    await asyncio.sleep(0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await loop.decode(10)  # served at once: the cancelled prefill left the queue
    assert not s
    loop.close()
