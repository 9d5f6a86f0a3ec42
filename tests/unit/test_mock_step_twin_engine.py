"""The mock with `gpu.step` (a twin of a real engine's scheduler) on its request path (mock.costs.engine):
the fixed cost is the server's front end, and a prompt's blocks are cached when it takes them."""

from __future__ import annotations

import asyncio
import time

from kvbench.mock.config import TieredProfile
from kvbench.mock.costs.engine import TieredEngine, Trace
from kvbench.mock.costs.timing import derive_params
from kvbench.mock.metrics import MockMetrics
from kvbench.mock.profiles import load_profile, validate_profile
from kvbench.mock.tokenizer import PromptInfo

BLOCK = 16
N = 4096  # tokens a prompt: long enough that its prefill outlasts a second request's arrival
FIXED_S = 0.05


def _engine(steps: bool, seqs: int = 4) -> TieredEngine:
    d = load_profile("ci").model_dump()
    d |= {"block_tokens": BLOCK, "time_scale": 1.0}
    d["gpu"] |= {"max_num_seqs": seqs, "request_fixed_s": FIXED_S}
    if steps:
        d["gpu"]["step"] = {"token_budget": 8192}
    profile = validate_profile(d, "test")
    assert isinstance(profile, TieredProfile)
    return TieredEngine(profile, derive_params(profile), MockMetrics(profile.model_name))


def _prompt() -> PromptInfo:
    keys = tuple(range(N // BLOCK))
    return PromptInfo(digest=b"p" * 32, num_tokens=N, block_keys=keys)


async def _one(engine: TieredEngine, tag: str) -> Trace:
    trace = Trace(request_id=tag, received_ns=time.perf_counter_ns())
    async for _ in engine.generate(_prompt(), 1, trace):
        pass
    return trace


async def _two_at_once(engine: TieredEngine) -> tuple[Trace, Trace]:
    try:
        first = asyncio.create_task(_one(engine, "a"))
        await asyncio.sleep(FIXED_S + 0.01)  # the first is past its fixed cost, prefilling
        second = await _one(engine, "b")
        return await first, second
    finally:
        engine.close()


async def test_a_step_twin_caches_a_prompt_while_it_is_still_prefilling() -> None:
    first, second = await _two_at_once(_engine(steps=True))
    assert first.cached_tokens == 0
    assert second.cached_tokens > 0  # vLLM v1 caches a block when it allocates it


async def test_without_steps_a_copy_during_the_prefill_misses() -> None:
    first, second = await _two_at_once(_engine(steps=False))
    assert first.cached_tokens == 0 and second.cached_tokens == 0


async def test_a_step_twin_pays_its_fixed_cost_before_it_queues_for_a_sequence() -> None:
    engine = _engine(steps=True, seqs=1)
    try:
        t0 = time.perf_counter()
        first = asyncio.create_task(_one(engine, "a"))
        await asyncio.sleep(0.001)
        second = await _one(engine, "b")
        held_s = time.perf_counter() - t0
        await first
    finally:
        engine.close()
    # with one sequence, a fixed cost paid inside it would serialise both: 2 fixed costs, 2
    # prefills. Paid before the queue, the second's overlaps the first's sequence
    serial_s = 2 * FIXED_S + (second.prefill_ms + second.onboard_ms) / 1e3 + first_busy_s(engine)
    assert second.queue_ms > 0  # it did wait for the one sequence
    assert held_s < serial_s - FIXED_S / 2


def first_busy_s(engine: TieredEngine) -> float:
    """A lone cold prompt's prefill, as the engine's model costs it."""
    return engine.params.prefill_s(N, 0)
