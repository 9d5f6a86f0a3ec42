"""The mock's engines: they wait (asyncio) for what the timing model says.

TieredEngine: admission (max_num_seqs) -> prefix lookup -> onboarding on shared links
(G4 behind the fabric, G3, and the host->GPU copy) -> prefill on the shared GPU -> first
token -> batched decode steps on the same GPU. With `gpu.slot_cache` the lookup is llama.cpp's
instead (kvbench.mock.costs.slots: a slot's own prompt, else one moved in from the RAM cache): a
slot hit pays G1's latency and bandwidth (the engine resuming the prompt), a restore G2's on the
whole entry, one after the other. With `gpu.step` (a twin of a real engine's scheduler) the fixed
cost per request comes before admission (the server's front end, not a sequence) and the lookup
caches the prompt's blocks at once, as vLLM v1 caches a block when it allocates it. Every shared
resource is an AsyncResource: timing.SharedResource (processor sharing) on the event loop's
monotonic clock, with one timer re-armed whenever a job joins or leaves or the capacity changes.
Capacities are divided by the profile's time_scale, so every modelled duration is multiplied by it.

FixedDelayEngine: first token exactly ttft_ms after receipt, then decode_ms_per_token apart.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kvbench.mock.config import TIER_NAMES, FixedDelayProfile, TieredProfile
from kvbench.mock.costs.cache import LookupResult, TieredKVCache
from kvbench.mock.costs.noise_link import NoiseLink
from kvbench.mock.costs.onboarding import STAGE_LINK, split_onboarding
from kvbench.mock.costs.pacing import AsyncResource, DecodeBatcher, Pacer
from kvbench.mock.costs.slots import SlotCache, SlotHit
from kvbench.mock.costs.step import StepLoop, StepScheduler
from kvbench.mock.costs.timing import ModelParams
from kvbench.mock.metrics import MockMetrics
from kvbench.mock.span_hash import SCHEME as KEY_SCHEME
from kvbench.mock.tokenizer import PromptInfo

LOWER_TIERS = ("G2", "G3", "G4")  # the tiers a hit is onboarded from (G1 is already on the GPU)
LINKS = tuple(STAGE_LINK.values())


@dataclass
class Trace:
    """One ground-truth line (all *_ns from time.perf_counter_ns, i.e. CLOCK_MONOTONIC)."""

    request_id: str
    received_ns: int
    endpoint: str = ""
    first_token_ns: int | None = None
    end_ns: int | None = None
    queue_ms: float = 0.0
    prefill_ms: float = 0.0
    onboard_ms: float = 0.0
    tokens_computed: int = 0
    cached_tokens: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tokens_from_tier: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TIER_NAMES, 0))
    in_flight_at_receive: int = 0
    # Noise when the onboarding began (modelled bytes/s): offered by `noise_flows` flows, achieved
    # on the topology (max-min fair per flow: never more than a link's capacity).
    fabric_noise_bytes_per_s: float = 0.0
    noise_offered_bytes_per_s: float = 0.0
    noise_flows: int = 0
    noise_link: str | None = None  # the link the noise shares with G4 reads (its capacity below)
    http_status: int = 200
    status: str = "ok"
    # Where the onboarding time went (both sum to onboard_ms; timing.split_onboarding): by the tier
    # the bytes came from, and by the link on the critical path (fabric = G4 reads, disk = G3
    # reads, pcie = the host->GPU copy). Bytes moved per source tier, and what the noise left the
    # G4 reads in all when the onboarding began (modelled bytes/s, reads taking all they can get).
    onboard_ms_by_tier: dict[str, float] = field(default_factory=lambda: dict.fromkeys(LOWER_TIERS, 0.0))
    onboard_ms_by_link: dict[str, float] = field(default_factory=lambda: dict.fromkeys(LINKS, 0.0))
    bytes_from_tier: dict[str, float] = field(default_factory=lambda: dict.fromkeys(LOWER_TIERS, 0.0))
    g4_link_bytes_per_s: float | None = None
    fabric_capacity_bytes_per_s: float | None = None  # capacity of noise_link, noise or not
    # The mock's own cost, so a report never reads it as the model's (report/mock_lateness.py):
    # mock_cpu_ms, the CPU its event loop spent on this request's prompt (body, tokens, cache
    # lookup and commit: what grows with the prompt); mock_late_ms, how much later than the model
    # the first token was ready (real time the waits could not absorb: the mock's work before
    # admission, timers woken late by a busy loop).
    mock_cpu_ms: float = 0.0
    mock_late_ms: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ms_since(t0_ns: int) -> float:
    return (time.perf_counter_ns() - t0_ns) / 1e6


class TieredEngine:
    def __init__(
        self,
        profile: TieredProfile,
        params: ModelParams,
        metrics: MockMetrics,
        persist_dir: Path | None = None,
    ) -> None:
        self.profile = profile
        self.params = params
        self.metrics = metrics
        ts = params.time_scale
        self.gpu = AsyncResource(1.0 / ts, 1.0 / ts)
        self.links: dict[str, AsyncResource] = {}
        for name in ("G2", "G3"):
            t = params.tier(name)
            self.links[name] = AsyncResource(t.aggregate_bandwidth / ts, t.read_bandwidth / ts)
        g4 = AsyncResource(params.tier("G4").aggregate_bandwidth / ts)
        self.noise = NoiseLink(params)  # the noise flows now, and what they leave the G4 reads
        g4.core.share = self.noise.read_rate
        self.links["G4"] = g4
        meta = {
            "model_name": profile.model_name,
            "geometry": profile.geometry,
            "block_tokens": profile.block_tokens,
            "sliding_at_full": profile.sliding_at_full,
            "block_keys": KEY_SCHEME,  # an index of another scheme's keys would never hit
        }
        slot_cfg = profile.gpu.slot_cache
        self.slots: SlotCache | None = None
        if slot_cfg is not None:
            ram = None if slot_cfg.ram_tokens is None else slot_cfg.ram_tokens // params.block_tokens
            self.slots = SlotCache(params.max_num_seqs, ram, slot_cfg.similarity)
            g1 = params.tier("G1")
            self.links["G1"] = AsyncResource(g1.aggregate_bandwidth / ts, g1.read_bandwidth / ts)
        self.cache = TieredKVCache(
            {n: params.capacity_blocks(n) for n in TIER_NAMES},
            # the slots stand for G1 and G2; G3 and G4 are the shared tiers still (a twin has none)
            {n: params.tier(n).enabled and (self.slots is None or n in ("G3", "G4")) for n in TIER_NAMES},
            params.block_tokens,
            persist_dir=persist_dir,
            persist_meta=meta,
        )
        self.decoder = DecodeBatcher(self.gpu, params)
        self.steps = (
            StepLoop(StepScheduler(params, params.step), params.time_scale, Pacer()) if params.step else None
        )
        self._admission: asyncio.Semaphore | None = None
        self._waiting = 0
        self._running = 0
        self.update_tier_gauges()

    @property
    def block_tokens(self) -> int:
        return self.params.block_tokens

    @property
    def max_model_len(self) -> int:
        return self.params.max_model_len

    @property
    def noise_bytes_per_s(self) -> float:
        """Noise achieved now (modelled bytes/s), with the G4 reads in flight plus one."""
        return self.noise.achieved(len(self.links["G4"]) + 1)

    def set_noise_rate(self, modelled_bytes_per_s: float, flows: Sequence[float] | None = None) -> None:
        """Noise offered now (modelled bytes/s), by `flows` (each one's rate; default: one flow)."""
        offered = tuple(flows) if flows is not None else (modelled_bytes_per_s,)
        self.links["G4"].reshare(lambda: self.noise.set_flows(offered))

    def _trace_noise(self, trace: Trace) -> None:
        trace.fabric_noise_bytes_per_s = self.noise_bytes_per_s
        trace.noise_offered_bytes_per_s = float(sum(self.noise.flows))
        trace.noise_flows = len(self.noise.flows)
        trace.noise_link = self.params.noise_link
        trace.g4_link_bytes_per_s = self.noise.left()
        trace.fabric_capacity_bytes_per_s = self.params.noise_link_capacity

    def update_tier_gauges(self) -> None:
        for t in self.cache.tiers:
            self.metrics.tier_used.labels(self.metrics.model_name, t.name).set(
                len(t) * self.params.block_bytes
            )

    def reset(self, include_persistent: bool, tiers: Sequence[str] | None = None) -> bool:
        self.cache.reset(include_persistent or self.profile.reset_clears_persistent, tiers)
        if self.slots is not None and (tiers is None or "G1" in tiers or "G2" in tiers):
            self.slots.reset()
        self.update_tier_gauges()
        return True

    def close(self) -> None:
        self.decoder.close()
        if self.steps is not None:
            self.steps.close()
        self.cache.close()

    def _bytes_by_tier(self, hit: LookupResult) -> dict[str, float]:
        out = dict.fromkeys(TIER_NAMES, 0.0)
        b = self.params.block_tokens
        for name, start, end in hit.runs:
            out[name] += self.params.range_bytes(start * b, end * b)
        out["G1"] = 0.0  # already in GPU memory: nothing moves
        return out

    async def _transfer(self, name: str, nbytes: float, pacer: Pacer) -> tuple[str, float, float]:
        """One stage: access latency, then the bytes on the tier's shared link. Returns
        (stage, real end, lag) so the caller can tell when the stage ended in the model."""
        p = self.params
        latency = self.noise.latency_s() if name == "G4" else p.tier(name).latency_s
        await pacer.sleep(latency * p.time_scale)
        await pacer.use(self.links[name], nbytes)
        return name, asyncio.get_running_loop().time(), pacer.lag

    async def _onboard(self, moved: dict[str, float], pacer: Pacer) -> dict[str, float]:
        """Move the hit's bytes to the GPU; returns when each stage ended in the model (loop clock)."""
        lower = moved["G3"] + moved["G4"]
        h2d = moved["G2"] + lower
        if h2d <= 0:
            return {}
        stages = [self._transfer(n, moved[n], Pacer(pacer.lag)) for n in ("G3", "G4") if moved[n] > 0]
        stages.append(self._transfer("G2", h2d, Pacer(pacer.lag)))
        ends = {name: end - lag for name, end, lag in await asyncio.gather(*stages)}
        model_end = max(ends.values())
        pacer.lag = max(0.0, asyncio.get_running_loop().time() - model_end)
        if lower > 0:
            await pacer.sleep(
                self.params.chunk_tail_s(self.params.onboard_chunk_tokens) * self.params.time_scale
            )
        return ends

    def _slot_lookup(self, slot: SlotHit) -> LookupResult:
        """The slot's hit as a lookup result: every block from one tier (G1: the slot's own, G2: restored)."""
        hit = LookupResult(self.params.block_tokens)
        if slot.blocks:
            hit.num_blocks = slot.blocks
            hit.blocks_by_tier[slot.tier] = slot.blocks
            hit.runs.append((slot.tier, 0, slot.blocks))
        return hit

    async def _resume(self, slot: SlotHit, pacer: Pacer) -> dict[str, float]:
        """A slot hit's cost: the restore from RAM (the whole entry, G2) if any, then resuming (G1).
        Its end is reported as the host-side stage's ("G2"): the ground truth's split has no G1 link."""
        b = self.params.block_tokens
        ends: dict[str, float] = {}
        for name, blocks in (("G2", slot.restored_blocks), ("G1", slot.blocks)):
            if blocks:
                _, end, lag = await self._transfer(name, self.params.range_bytes(0, blocks * b), pacer)
                ends["G2"] = end - lag
        return ends

    def slots_hold(self, slot: SlotHit, keys: Sequence[int], full_blocks: int) -> None:
        if self.slots is not None:
            self.slots.hold(slot.slot, keys[:full_blocks])

    async def generate(self, prompt: PromptInfo, max_tokens: int, trace: Trace) -> AsyncGenerator[int, None]:
        """Yields once per output token, when it is ready (the first yield is the first token)."""
        if self._admission is None:
            self._admission = asyncio.Semaphore(self.params.max_num_seqs)
        mn = self.metrics.model_name
        t0 = time.perf_counter_ns()
        pacer = Pacer(lag=max(0.0, (t0 - trace.received_ns) / 1e9))
        # a step twin's fixed cost is the server's work outside its scheduler (vLLM's API process
        # tokenizing and detokenizing, llama-server's HTTP threads): paid before the request queues
        # for a sequence, so it neither holds one nor looks the cache up before the queue has moved
        outside = self.steps is not None
        if outside:
            await pacer.sleep(self.params.request_fixed_s * self.params.time_scale)
            t0 = time.perf_counter_ns()
        self._waiting += 1
        self.metrics.waiting.labels(mn).set(self._waiting)
        try:
            await self._admission.acquire()
        finally:
            self._waiting -= 1
            self.metrics.waiting.labels(mn).set(self._waiting)
        self._running += 1
        self.metrics.running.labels(mn).set(self._running)
        slot: SlotHit | None = None
        try:
            trace.queue_ms = _ms_since(t0)
            n = prompt.num_tokens
            b = self.params.block_tokens
            cpu0 = time.thread_time_ns()
            max_blocks = self.params.cacheable_tokens(n) // b
            if self.slots is not None:
                slot = self.slots.acquire(prompt.block_keys, max_blocks)
                hit = self._slot_lookup(slot)
            else:
                hit = self.cache.lookup(prompt.block_keys, max_blocks)
            # a step twin caches a prompt's blocks when it takes them, before computing them, as vLLM
            # v1 does (its KV cache manager caches full blocks at allocation): a copy that comes
            # while the first is still prefilling hits (vLLM missed each of 8 prompts once over 28
            # connections; a twin that cached after prefill missed 10)
            early = self.steps is not None and slot is None
            if early:
                self.cache.commit(prompt.block_keys, hit, n // b)
            c = hit.cached_tokens
            moved = self._bytes_by_tier(hit)
            trace.cached_tokens = c
            trace.tokens_computed = n - c
            trace.tokens_from_tier = hit.tokens_by_tier()
            self.metrics.record_prompt(n, trace.tokens_from_tier, moved)
            trace.bytes_from_tier = {t: moved[t] for t in LOWER_TIERS}
            self._trace_noise(trace)
            # The modelled TTFT is the whole server's, from receipt: the mock's own real work before
            # admission (reading the body, tokenizing) is part of it, not added to it, so it is
            # credited against the first waits (a 130k-token prompt takes ~20 ms of that at any pace).
            trace.mock_cpu_ms += (time.thread_time_ns() - cpu0) / 1e6
            if not outside:
                await pacer.sleep(self.params.request_fixed_s * self.params.time_scale)
            t1 = time.perf_counter_ns()
            if slot is not None:
                ends = await self._resume(slot, pacer)
            else:
                ends = await self._onboard(moved, pacer)
            trace.onboard_ms = _ms_since(t1) if ends else 0.0  # nothing moved: no onboarding
            trace.onboard_ms_by_tier, trace.onboard_ms_by_link = split_onboarding(
                trace.onboard_ms, ends, moved
            )
            t2 = time.perf_counter_ns()
            if self.steps is not None:  # shared steps: this request's lag stays its own lateness
                await self.steps.prefill(n, c, None if slot is None else slot.slot)
            else:
                await pacer.use(self.gpu, self.params.prefill_s(n, c))
            trace.prefill_ms = _ms_since(t2)
            cpu0 = time.thread_time_ns()
            if slot is not None:
                self.slots_hold(slot, prompt.block_keys, n // b)
            elif not early:
                self.cache.commit(prompt.block_keys, hit, n // b)
            self.update_tier_gauges()
            trace.mock_cpu_ms += (time.thread_time_ns() - cpu0) / 1e6
            trace.mock_late_ms = pacer.lag * 1e3
            yield 0
            for i in range(1, max_tokens):
                if self.steps is not None:
                    await self.steps.decode(n + i)
                else:
                    await self.decoder.step(n + i)
                yield i
        finally:
            if slot is not None and self.slots is not None:
                self.slots.release(slot.slot)
            self._running -= 1
            self.metrics.running.labels(mn).set(self._running)
            self._admission.release()


class FixedDelayEngine:
    block_tokens = 16

    def __init__(self, profile: FixedDelayProfile, metrics: MockMetrics) -> None:
        self.profile = profile
        self.metrics = metrics
        self.noise_bytes_per_s = 0.0

    @property
    def max_model_len(self) -> int:
        return self.profile.max_model_len

    def set_noise_rate(self, modelled_bytes_per_s: float, flows: Sequence[float] | None = None) -> None:
        self.noise_bytes_per_s = modelled_bytes_per_s

    def reset(self, include_persistent: bool, tiers: Sequence[str] | None = None) -> bool:
        return True

    def close(self) -> None:
        pass

    async def generate(self, prompt: PromptInfo, max_tokens: int, trace: Trace) -> AsyncGenerator[int, None]:
        n = prompt.num_tokens
        trace.tokens_computed = n
        self.metrics.record_prompt(n, dict.fromkeys(TIER_NAMES, 0), {})
        elapsed = (time.perf_counter_ns() - trace.received_ns) / 1e9
        await asyncio.sleep(max(0.0, self.profile.ttft_ms / 1000.0 - elapsed))
        trace.prefill_ms = _ms_since(trace.received_ns)
        yield 0
        loop = asyncio.get_running_loop()
        next_t = loop.time()
        gap = self.profile.decode_ms_per_token / 1000.0
        for i in range(1, max_tokens):
            next_t += gap
            await asyncio.sleep(max(0.0, next_t - loop.time()))
            yield i
