"""The mock's clocks: processor sharing on a virtual clock (conservation of work, fair shares,
capacity changes), the asyncio resource driven by it (joins, cancellation), the pacer that carries
a request's timer lateness into its next waits, and the fixed-delay engine's token count."""

from __future__ import annotations

import asyncio
import time

import pytest

from kvbench.mock.config import FixedDelayProfile
from kvbench.mock.costs.engine import AsyncResource, FixedDelayEngine, Pacer, Trace
from kvbench.mock.costs.timing import SharedResource, processor_sharing_finish_times
from kvbench.mock.metrics import MockMetrics
from kvbench.mock.tokenizer import PromptInfo


def test_shared_resource_conserves_work_and_shares_fairly() -> None:
    res = SharedResource(capacity=10.0)
    res.add(0.0, 1, 20.0)
    res.add(0.0, 2, 40.0)
    # two jobs at 5/s each: job 1 (20 units) first, at t = 4
    assert res.next_finish() == pytest.approx(4.0)
    assert res.pop_finished(4.0) == [1]
    # job 2 has 40 - 20 left and now runs alone at 10/s: t = 6
    assert res.next_finish() == pytest.approx(6.0)
    assert res.pop_finished(6.0) == [2]
    assert res.next_finish() is None and len(res) == 0


def test_capacity_changes_take_effect_from_the_moment_they_happen() -> None:
    res = SharedResource(capacity=10.0)
    res.add(0.0, 1, 30.0)
    res.set_capacity(1.0, 5.0)  # 10 done by t=1, 20 left at 5/s
    assert res.next_finish() == pytest.approx(5.0)
    assert res.remove(3.0, 1) == pytest.approx(10.0)  # removed half-way: what it had left
    assert res.remove(3.0, 99) == 0.0


def test_per_job_cap_and_share_rule() -> None:
    capped = SharedResource(capacity=100.0, per_job_cap=10.0)
    assert [capped.rate_for(k) for k in (0, 1, 5, 10, 20)] == [0.0, 10.0, 10.0, 10.0, 5.0]
    shared = SharedResource(capacity=1.0, share=lambda k: 7.0 / k)
    assert shared.rate_for(7) == 1.0
    idle = SharedResource(capacity=0.0)
    idle.add(0.0, 1, 1.0)
    assert idle.next_finish() is None and idle.pop_finished(10.0) == []


def test_finish_times_are_monotone_in_work_and_never_before_work_over_capacity() -> None:
    jobs = [(0.0, 5.0), (0.0, 10.0), (1.0, 2.0), (3.0, 8.0)]
    ends = processor_sharing_finish_times(jobs, capacity=2.0)
    for (arrival, work), end in zip(jobs, ends, strict=True):
        assert end >= arrival + work / 2.0 - 1e-9  # no faster than alone
    # all work done by the time the last job ends, at full capacity while busy (no idle gap here)
    assert max(ends) == pytest.approx(sum(w for _, w in jobs) / 2.0)


async def test_async_resource_two_jobs_take_twice_as_long_as_one() -> None:
    res = AsyncResource(capacity=1.0)
    assert res.rate_if_joined() == 1.0
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    lates = await asyncio.gather(res.use(0.05), res.use(0.05))
    # each alone would take 0.05 s; together, sharing, both end no earlier than 0.1 s
    assert loop.time() - t0 >= 0.1 - 2e-3
    assert all(late >= 0.0 for late in lates)
    assert await res.use(0.0) == 0.0 and len(res) == 0


async def test_a_cancelled_job_leaves_the_resource() -> None:
    res = AsyncResource(capacity=1.0)
    task = asyncio.create_task(res.use(100.0))
    await asyncio.sleep(0.01)
    assert len(res) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(res) == 0
    assert res.rate_if_joined() == 1.0  # the next job has it all


async def test_raising_capacity_speeds_a_job_in_progress() -> None:
    res = AsyncResource(capacity=0.001)  # 100 s for 0.1 units at this rate
    task = asyncio.create_task(res.use(0.1))
    await asyncio.sleep(0.01)
    res.set_capacity(1000.0)
    await asyncio.wait_for(task, 10.0)  # ends in moments, not 100 s


async def test_the_pacer_skips_waits_the_lag_already_covers() -> None:
    pacer = Pacer(lag=0.5)
    await pacer.sleep(0.2)
    await pacer.sleep(0.2)
    # neither wait slept: 0.4 s of the lag paid for them (a real sleep would reset the lag to its
    # own overshoot, a few ms at most)
    assert pacer.lag == pytest.approx(0.1)
    await pacer.sleep(0.0)
    assert pacer.lag == pytest.approx(0.1)


async def test_the_pacer_credits_lag_as_work_on_a_resource() -> None:
    res = AsyncResource(capacity=2.0)
    pacer = Pacer(lag=0.5)
    await pacer.use(res, 0.6)  # 0.5 s of lag at 2 units/s covers 1.0 > 0.6: no wait at all
    assert pacer.lag == pytest.approx(0.5 - 0.6 / 2.0)
    assert len(res) == 0
    short = Pacer(lag=0.01)
    await short.use(res, 0.04)  # 0.02 units credited, 0.02 waited for
    assert short.lag >= 0.0 and len(res) == 0


async def test_fixed_delay_engine_yields_one_event_per_output_token() -> None:
    profile = FixedDelayProfile(
        name="f", description="d", model_name="m", ttft_ms=20.0, decode_ms_per_token=1.0
    )
    engine = FixedDelayEngine(profile, MockMetrics("m"))
    assert engine.max_model_len == 131_072 and engine.reset(True) is True
    engine.set_noise_rate(5.0)
    assert engine.noise_bytes_per_s == 5.0
    trace = Trace(request_id="r", received_ns=time.perf_counter_ns())
    t0 = time.perf_counter_ns()
    tokens = [i async for i in engine.generate(PromptInfo(b"d", 100, ()), 5, trace)]
    assert tokens == [0, 1, 2, 3, 4]
    assert trace.tokens_computed == 100
    assert trace.prefill_ms >= 20.0 - 1.0  # the first token no sooner than the profile's TTFT
    assert (time.perf_counter_ns() - t0) / 1e6 >= 20.0 + 4 * 1.0 - 2.0
    engine.close()
