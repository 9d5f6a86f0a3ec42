"""The server under load, step by step: a scheduler with a token budget per step (a profile's `gpu.step`).

Without `gpu.step` the mock shares its GPU by processor sharing: k prefills each progress at 1/k,
so a warm request's one-token suffix gets through at once beside others' long prefills. Engines do
not work that way. vLLM and llama.cpp run the GPU in steps: each step computes at most
`token_budget` tokens (vLLM's max_num_batched_tokens, llama.cpp's n_batch), one for every running
decode first, then chunks of the waiting prefills in arrival order; a step ends when all of its
work ends, so a short prefill that shares a step with a long chunk waits for it. This is what
makes TTFT under load queue and batch as it does on the engine.

    step time = sum over chunks of prefill(end, start)            (the timing model's prefill cost)
              + (decode_step_base + sum of decoding contexts' KV / HBM   if the step decodes)

A prompt prefilled alone in chunks costs exactly prefill(n, c): the chunks' costs add up (the
attention term is over the tokens before each one). The bounded number of sequences is the
profile's `gpu.max_num_seqs` (llama.cpp slots, vLLM max_num_seqs: admission in the engine); the
per-request fixed cost (the API server's parse, tokenize and detokenize) is `gpu.request_fixed_s`,
a wait before prefill that takes no GPU time (in either mode). Transfers (onboarding from G2-G4)
stay the tier and fabric model's.

`StepScheduler` is pure (no clock): the mock's `StepLoop` drives it on the event loop and a
virtual-time simulation could drive it the same way.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class StepParams:
    token_budget: int  # tokens computed in one step: one per decode, the rest prefill chunks


@dataclass
class _Prefill:
    job: int
    next_token: int  # the first token of the prompt not computed yet
    end: int  # the prompt's length: prefill is done when next_token reaches it
    order: int  # prefills fill a step in this order: arrival (the job), or llama.cpp's slot index


@dataclass(frozen=True)
class Step:
    """One step as planned: how long it takes, whose prefill it finishes, whose token it decodes."""

    duration_s: float  # model seconds
    finished: tuple[int, ...]  # jobs whose prefill (and so first token) ends with this step
    decoded: tuple[int, ...]  # jobs that get their next token at the end of this step
    prefill_tokens: int = 0
    chunks: dict[int, int] = field(default_factory=dict)  # job -> prefill tokens computed in the step


class _Costs(Protocol):
    """What a step costs, from the timing model (timing.ModelParams)."""

    def prefill_s(self, n: int, c: int) -> float: ...

    def decode_step_s(self, contexts: Iterable[int]) -> float: ...


class StepScheduler:
    """The queue of work and the rule that packs it into steps (decodes first, then prefill chunks)."""

    def __init__(self, params: _Costs, step: StepParams) -> None:
        if step.token_budget < 1:
            raise ValueError("gpu.step.token_budget: at least 1 token per step")
        self.params = params
        self.step = step
        self._prefills: dict[int, _Prefill] = {}  # insertion order is arrival order
        self._decodes: dict[int, int] = {}  # job -> context length of the token it waits for
        self._by_slot = False

    def __bool__(self) -> bool:
        return bool(self._prefills or self._decodes)

    def add_prefill(self, job: int, n: int, cached: int, slot: int | None = None) -> None:
        """Tokens cached..n-1 of an n-token prompt are to be computed (at least the last one).
        With `slot`, prefills fill a step in slot order, as llama-server walks its slots, not in
        arrival order."""
        start = min(max(0, cached), n - 1) if n > 0 else 0
        self._by_slot = self._by_slot or slot is not None
        self._prefills[job] = _Prefill(job, start, max(n, start + 1), job if slot is None else slot)

    def add_decode(self, job: int, context: int) -> None:
        self._decodes[job] = context

    def remove(self, job: int) -> None:
        """A request that went away (a client cancelled it) leaves the queue."""
        self._prefills.pop(job, None)
        self._decodes.pop(job, None)

    def plan(self) -> Step | None:
        """Take the next step's work off the queue; None when there is nothing to do."""
        if not self:
            return None
        budget = self.step.token_budget
        decoded = tuple(itertools.islice(self._decodes, budget))
        contexts = [self._decodes.pop(j) for j in decoded]
        budget -= len(decoded)
        duration = self.params.decode_step_s(contexts) if contexts else 0.0
        finished: list[int] = []
        chunks: dict[int, int] = {}
        waiting = list(self._prefills.values())
        if self._by_slot:
            waiting.sort(key=lambda p: p.order)
        for p in waiting:
            if budget <= 0:
                break
            take = min(budget, p.end - p.next_token)
            duration += self.params.prefill_s(p.next_token + take, p.next_token)
            p.next_token += take
            budget -= take
            chunks[p.job] = take
            if p.next_token >= p.end:
                finished.append(p.job)
                del self._prefills[p.job]
        return Step(duration, tuple(finished), decoded, sum(chunks.values()), chunks)


class _Pacer(Protocol):
    lag: float

    async def sleep(self, seconds: float) -> None: ...


class StepLoop:
    """Runs a StepScheduler on the event loop: one task sleeps each step's modelled time.

    A step's content is fixed when it starts, so a request that arrives mid-step waits for the
    next one, as on the engine. Lateness of the loop's timers is carried into the next steps'
    sleeps (the engine's Pacer), so a busy machine delays the steps' real ends, not the model's.
    """

    def __init__(self, scheduler: StepScheduler, time_scale: float, pacer: _Pacer) -> None:
        self.scheduler = scheduler
        self.time_scale = time_scale
        self._pacer = pacer
        self._waiting: dict[int, asyncio.Future[None]] = {}
        self._ids = itertools.count()
        self._task: asyncio.Task[None] | None = None
        self.steps = 0  # steps run, for tests and the ground truth

    async def prefill(self, n: int, cached: int, slot: int | None = None) -> None:
        """Return when the step that computes this prompt's last token ends (its first token)."""
        job = next(self._ids)
        self.scheduler.add_prefill(job, n, cached, slot)
        await self._wait(job)

    async def decode(self, context: int) -> None:
        job = next(self._ids)
        self.scheduler.add_decode(job, context)
        await self._wait(job)

    async def _wait(self, job: int) -> None:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._waiting[job] = fut
        if self._task is None or self._task.done():
            self._pacer.lag = 0.0
            self._task = loop.create_task(self._run())
        try:
            await fut
        finally:
            if self._waiting.pop(job, None) is not None:  # cancelled before its step ended
                self.scheduler.remove(job)

    async def _run(self) -> None:
        while (step := self.scheduler.plan()) is not None:
            await self._pacer.sleep(step.duration_s * self.time_scale)
            self.steps += 1
            for job in (*step.finished, *step.decoded):
                fut = self._waiting.pop(job, None)
                if fut is not None and not fut.done():
                    fut.set_result(None)
            if not self.scheduler:
                await asyncio.sleep(0)  # let the step's requests ask for their next token

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
