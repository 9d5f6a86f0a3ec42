"""Schedules: which prompt each request uses and when it may start; the in-process worker loops.

Schedules are pure functions seeded by numpy's default_rng: testable without a
network. The workers only call `issue(item)`, which owns the request and its row;
kvbench.load.backends decides where and how the workers run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np

from kvbench.scenario import ConcurrentLoad, Load, RateLoad, SequentialLoad


@dataclass(frozen=True, slots=True)
class WorkItem:
    index: int
    prompt_id: int
    scheduled_offset_s: float = 0.0  # rate load: arrival time from phase start


def request_order(load: Load, n_prompts: int) -> list[int]:
    """Prompt ids in issue order."""
    if isinstance(load, SequentialLoad):
        return list(range(n_prompts))
    rng = np.random.default_rng([load.seed, 0x0D0E])
    n = load.requests
    if isinstance(load, ConcurrentLoad) and load.sampling == "each_equally":
        reps = -(-n // n_prompts)
        ids = np.tile(np.arange(n_prompts), reps)[:n]
        return rng.permutation(ids).tolist()
    return rng.integers(0, n_prompts, n).tolist()


def arrival_offsets(load: RateLoad) -> list[float]:
    """Seconds from phase start at which each request arrives."""
    if load.arrivals == "constant":
        return [i / load.rate for i in range(load.requests)]
    rng = np.random.default_rng([load.seed, 0xA77])
    gaps = rng.exponential(1.0 / load.rate, load.requests)
    gaps[0] = 0.0
    return np.cumsum(gaps).tolist()


def work_items(load: Load, n_prompts: int) -> list[WorkItem]:
    order = request_order(load, n_prompts)
    if isinstance(load, RateLoad):
        offs = arrival_offsets(load)
        return [WorkItem(i, p, offs[i]) for i, p in enumerate(order)]
    return [WorkItem(i, p) for i, p in enumerate(order)]


Issue = Callable[[WorkItem, int], Awaitable[None]]  # (item, scheduled_perf_ns)


async def run_closed_loop(items: list[WorkItem], concurrency: int, issue: Issue) -> None:
    """N workers, each takes the next item as soon as its previous request ends."""
    queue = iter(items)

    async def worker() -> None:
        for item in queue:
            await issue(item, time.perf_counter_ns())

    async with asyncio.TaskGroup() as tg:
        for _ in range(min(concurrency, len(items))):
            tg.create_task(worker())


async def run_open_loop(items: list[WorkItem], max_concurrency: int, issue: Issue) -> None:
    """Requests start at their arrival times; at most max_concurrency in flight (later ones wait)."""
    sem = asyncio.Semaphore(max_concurrency)
    start = time.perf_counter_ns()

    async def one(item: WorkItem, due_ns: int) -> None:
        async with sem:
            await issue(item, due_ns)

    async with asyncio.TaskGroup() as tg:
        for item in items:
            due = start + int(item.scheduled_offset_s * 1e9)
            delay = (due - time.perf_counter_ns()) / 1e9
            if delay > 0:
                await asyncio.sleep(delay)
            tg.create_task(one(item, due))
