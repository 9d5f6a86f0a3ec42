"""The replay's schedule and its bounded feed of realised prompts.

Schedule (`schedule_items`): one streaming pass over the selected rows gives each its WorkItem
(index = trace order) and arrival offset: the trace's timestamps divided by `speedup` (fixed),
seeded arrivals at a rate (rate), or none (concurrent: a closed loop takes them in order). It also
takes the rows as ContextFit passed them: a row too long for the model's context fails before
anything is sent, or is skipped or clipped (`trace.over_context`), counted.
The load shape it returns is what the LoadBackend seam reads (paced or not, how many in flight).

Feed (`PromptFeed`): a producer realises rows in trace order at most `ahead` prompts in front of
the requests that take them, on the run's event loop, yielding after every row; it is primed (the
window filled) before the phase's clock starts, so the first requests never wait for realisation.
A request takes its prompt by index; both loops take them in trace order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from kvbench.errors import UsageError
from kvbench.load.schedule import WorkItem, arrival_offsets
from kvbench.scenario import ConcurrentLoad, Load, RateLoad
from kvbench.scenario.testtypes import ReplaySection
from kvbench.traces import TraceFile, TraceRow
from kvbench.traces.realise import Realised


def selected_rows(trace: TraceFile, test: ReplaySection) -> Iterator[TraceRow]:
    """The rows the section replays: inside [start_ms, start_ms + window_ms), at most `limit`."""
    src = test.trace
    taken = 0
    for row in trace:
        if src.limit is not None and taken >= src.limit:
            return
        if not src.selects(row.timestamp_ms):
            if trace.require_monotonic and src.window_ms is not None and row.timestamp_ms >= src.start_ms:
                return  # arrival order: nothing later can be inside the window
            continue
        taken += 1
        yield row


MIN_PROMPT_TOKENS = 1  # a clipped prompt keeps at least this many tokens beside its answer


@dataclass
class ContextFit:
    """Rows against the model's context under an over-context policy, counted as they pass.

    The replay's `trace.over_context` and the throughput test's `prompts.over_context` (a dataset's
    requests) share it: `option` and `narrow` name the setting and how to select fewer rows."""

    max_model_len: int | None
    policy: str  # fail | skip | clip
    block_tokens: int
    path: str
    option: str = "trace.over_context"
    narrow: str = "trace.limit / start_ms / window_ms select fewer rows"
    skipped: int = 0
    clipped: int = 0
    skipped_answer_fills_context: int = 0  # of `skipped`: clip asked, but no prompt fits beside the answer
    skipped_not_clippable: int = 0  # of `skipped`: clip asked of a prompt sent as written (dataset text)

    def keep(self, line: int, length: int, out: int, clippable: bool = True) -> int | None:
        """Tokens of the prompt to send: `length` when it fits beside its answer, fewer when clipped;
        None when it is left out. Over the context under fail: one line naming the row and the option."""
        if self.max_model_len is None or length + out <= self.max_model_len:
            return length
        if self.policy == "fail":
            raise UsageError(
                f"{self.path}:{line}: input_length: {length} + {out} answer tokens exceeds the model's "
                f"context {self.max_model_len} ({self.option}=skip or clip sends the rest; {self.narrow})"
            )
        keep = self.max_model_len - out
        if self.policy == "skip" or keep < MIN_PROMPT_TOKENS or not clippable:
            self.skipped += 1
            if self.policy == "clip" and keep < MIN_PROMPT_TOKENS:  # the answer alone fills the context
                self.skipped_answer_fills_context += 1
            elif self.policy == "clip":
                self.skipped_not_clippable += 1
            return None
        self.clipped += 1
        return keep

    def rows(self, rows: Iterable[TraceRow], answer: Callable[[TraceRow], int]) -> Iterator[TraceRow]:
        """The rows as replayed: each over the context refused, left out or clipped to fit."""
        for row in rows:
            keep = self.keep(row.line, row.input_length, answer(row))
            if keep is None:
                continue
            if keep == row.input_length:
                yield row
                continue
            blocks = -(-keep // self.block_tokens)  # the blocks the clipped prompt still covers
            yield replace(row, input_length=keep, hash_ids=row.hash_ids[:blocks])

    def record(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "max_model_len": self.max_model_len,
            "skipped": self.skipped,
            "clipped": self.clipped,
            "skipped_why": self.skipped_why(),
        }

    def skipped_why(self) -> dict[str, int]:
        """The skipped rows by reason (an empty dict when none was skipped)."""
        answer, text = self.skipped_answer_fills_context, self.skipped_not_clippable
        why = {
            "over the context": self.skipped - answer - text,
            "answer alone fills the context": answer,
            "text prompt, sent as written (clip cuts only length-built prompts)": text,
        }
        return {k: n for k, n in why.items() if n}


def context_line(ctx: dict[str, Any], who: str = "replay", option: str = "trace.over_context") -> str | None:
    """The console's line for ContextFit.record(): rows skipped (by reason) and clipped; None if none."""
    if not (ctx.get("skipped") or ctx.get("clipped")):
        return None
    why = ctx.get("skipped_why") or {}
    reasons = f" ({', '.join(f'{n} {k}' for k, n in why.items())})" if why else ""
    return (
        f"{who}: {ctx.get('skipped', 0)} row(s) skipped{reasons}, {ctx.get('clipped', 0)} clipped: longer "
        f"than the model's context {ctx.get('max_model_len')} ({option}={ctx.get('policy')})"
    )


@dataclass(frozen=True)
class Schedule:
    items: list[WorkItem]
    load: Load  # what the backend reads: paced (open loop) or not, and the in-flight cap
    span_s: float  # the last arrival's offset (0 for a closed loop)
    max_prompt_tokens: int
    min_prompt_tokens: int = 0
    max_answer_tokens: int = 0


def schedule_items(rows: Iterable[TraceRow], test: ReplaySection, path: str, max_tokens: int) -> Schedule:
    offsets: list[float] = []
    first_ms: float | None = None
    longest = 0
    shortest: int | None = None
    outputs: list[int] = []
    for row in rows:  # already fitted to the context (ContextFit)
        outputs.append(row.output_length if test.output_tokens == "trace" else max_tokens)
        longest = max(longest, row.input_length)
        shortest = row.input_length if shortest is None else min(shortest, row.input_length)
        first_ms = row.timestamp_ms if first_ms is None else first_ms
        offsets.append((row.timestamp_ms - first_ms) / 1000.0 / test.trace.speedup)
    n = len(offsets)
    if n == 0:
        raise UsageError(f"{path}: no rows selected (trace.start_ms / window_ms / limit)")
    load: Load
    if test.schedule == "concurrent":
        load = ConcurrentLoad(concurrency=test.concurrency, requests=n)
        offsets = [0.0] * n
    else:
        rate = test.rate if test.rate is not None else n / max(offsets[-1], 1e-3)
        load = RateLoad(
            rate=rate,
            arrivals=test.arrivals,
            max_concurrency=test.max_concurrency,
            requests=n,
            seed=test.seed,
        )
        if test.schedule == "rate":
            offsets = arrival_offsets(load)
    items = [WorkItem(i, i, off) for i, off in enumerate(offsets)]
    return Schedule(items, load, offsets[-1], longest, shortest or 0, max(outputs))


class PromptFeed:
    """Realised prompts at most `ahead` in front of the requests that take them."""

    def __init__(self, realised: Iterator[Realised], ahead: int) -> None:
        self._it = realised
        self._space = asyncio.Semaphore(ahead)
        self._futs: dict[int, asyncio.Future[Realised]] = {}
        self._ahead = ahead
        self._made = 0
        self._primed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None

    def _fut(self, index: int) -> asyncio.Future[Realised]:
        fut = self._futs.get(index)
        if fut is None:
            fut = self._futs[index] = asyncio.get_running_loop().create_future()
        return fut

    async def start(self) -> None:
        """Start the producer and wait until the window is full (or the trace is done)."""
        self._task = asyncio.create_task(self._produce())
        await self._primed.wait()
        if self.error is not None:
            raise self.error

    async def _produce(self) -> None:
        try:
            for r in self._it:
                await self._space.acquire()
                self._fut(r.index).set_result(r)
                self._made += 1
                if self._made >= self._ahead:
                    self._primed.set()
                await asyncio.sleep(0)  # one row at a time: the dispatch loop runs in between
        except Exception as exc:  # a bad row deep in the file: the requests waiting for it fail with it
            self.error = exc
            for fut in self._futs.values():
                if not fut.done():
                    fut.set_exception(exc)
        finally:
            self._primed.set()

    async def take(self, index: int) -> Realised:
        if self.error is not None and index not in self._futs:
            raise self.error
        r = await self._fut(index)
        del self._futs[index]
        self._space.release()
        return r

    async def aclose(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for fut in self._futs.values():
            if fut.done() and not fut.cancelled():
                fut.exception()  # retrieved: no "never retrieved" warning for an unused prompt
        if self.error is not None:
            raise self.error
