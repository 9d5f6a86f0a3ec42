"""The mock with `gpu.slot_cache` (llama.cpp's cache shape) on its request path (mock.costs.engine)."""

from __future__ import annotations

import asyncio
import time

from kvbench.mock.config import TieredProfile
from kvbench.mock.costs.engine import TieredEngine, Trace
from kvbench.mock.costs.timing import derive_params
from kvbench.mock.metrics import MockMetrics
from kvbench.mock.profiles import load_profile, validate_profile
from kvbench.mock.tokenizer import PromptInfo

N = 64  # tokens a prompt (block_tokens 1: llama.cpp's token-exact reuse)


def _engine(slots: int, ram_tokens: int | None) -> TieredEngine:
    d = load_profile("ci").model_dump()
    d |= {"block_tokens": 1, "time_scale": 0.001}
    d["gpu"] |= {"max_num_seqs": slots, "step": {"token_budget": 2048}}
    d["gpu"]["slot_cache"] = {"similarity": 0.1, "ram_tokens": ram_tokens}
    for name in ("G3", "G4"):
        d["tiers"][name]["enabled"] = False
    profile = validate_profile(d, "test")
    assert isinstance(profile, TieredProfile)
    return TieredEngine(profile, derive_params(profile), MockMetrics(profile.model_name))


def _prompt(tag: int) -> PromptInfo:
    keys = tuple(tag * 1000 + i for i in range(N))
    return PromptInfo(digest=tag.to_bytes(8, "little") * 4, num_tokens=N, block_keys=keys)


async def _one(engine: TieredEngine, tag: int, hold: asyncio.Event | None = None) -> Trace:
    trace = Trace(request_id=str(tag), received_ns=time.perf_counter_ns())
    gen = engine.generate(_prompt(tag), 3, trace)
    async for i in gen:
        if i == 0 and hold is not None:
            await hold.wait()  # still decoding: its slot stays busy
    return trace


async def test_a_prompt_whose_slot_is_busy_is_computed_again() -> None:
    engine = _engine(slots=2, ram_tokens=None)
    try:
        first = await _one(engine, 1)
        hold = asyncio.Event()
        busy = asyncio.create_task(_one(engine, 1, hold))  # prompt 1 back in its slot, held there
        await asyncio.sleep(0.05)
        again = await _one(engine, 1)  # the only copy is in a running slot
        hold.set()
        held = await busy
        after = await _one(engine, 1)
    finally:
        engine.close()
    assert first.cached_tokens == 0
    assert held.cached_tokens == N - 1 and held.tokens_from_tier["G1"] == N - 1
    assert again.cached_tokens == 0 and again.tokens_computed == N
    assert after.cached_tokens == N - 1


async def test_a_prompt_that_lost_its_slot_comes_back_from_ram() -> None:
    engine = _engine(slots=1, ram_tokens=None)
    try:
        await _one(engine, 1)
        await _one(engine, 2)  # slot 0 saves prompt 1 to RAM
        back = await _one(engine, 1)
    finally:
        engine.close()
    assert back.cached_tokens == N - 1 and back.tokens_from_tier["G2"] == N - 1
    assert back.onboard_ms > 0  # the restore and the resume cost time


async def test_without_ram_a_prompt_that_lost_its_slot_is_a_miss() -> None:
    engine = _engine(slots=1, ram_tokens=0)
    try:
        await _one(engine, 1)
        await _one(engine, 2)
        back = await _one(engine, 1)
    finally:
        engine.close()
    assert back.cached_tokens == 0
