"""Waiting for the model on the event loop: shared resources, the pacer that carries timer
lateness into the next waits, and the decode batcher of the processor-sharing GPU.

Every shared resource is an AsyncResource: timing.SharedResource (processor sharing) on the
event loop's monotonic clock, with one timer re-armed whenever a job joins or leaves or the
capacity changes.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable

from kvbench.mock.costs.timing import ModelParams, SharedResource


class AsyncResource:
    """A SharedResource driven by the running event loop's clock (real seconds)."""

    def __init__(self, capacity: float, per_job_cap: float | None = None) -> None:
        self.core = SharedResource(capacity, per_job_cap)
        self._waiters: dict[int, asyncio.Future[float]] = {}
        self._ids = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._armed_at = 0.0

    def __len__(self) -> int:
        return len(self.core)

    def rate_if_joined(self) -> float:
        """Rate one more job would get now."""
        return self.core.rate_for(len(self.core) + 1)

    def reshare(self, change: Callable[[], None]) -> None:
        """Apply `change` to what `core.share` reads: progress up to now at the old rates first."""
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # no running loop yet (construction)
            loop = None
        if loop is not None:
            self.core.advance(loop.time())
        change()
        if loop is not None:
            self._rearm(loop)

    async def use(self, work: float) -> float:
        """Wait until `work` is done; returns how late the timer woke (seconds past the model's finish)."""
        if work <= 0:
            return 0.0
        loop = asyncio.get_running_loop()
        job = next(self._ids)
        fut: asyncio.Future[float] = loop.create_future()
        self.core.add(loop.time(), job, work)
        self._waiters[job] = fut
        self._rearm(loop)
        try:
            return await fut
        finally:
            if self._waiters.pop(job, None) is not None:  # cancelled before it finished
                self.core.remove(loop.time(), job)
                self._rearm(loop)

    def set_capacity(self, capacity: float) -> None:
        loop = asyncio.get_running_loop()
        self.core.set_capacity(loop.time(), capacity)
        self._rearm(loop)

    def _rearm(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        t = self.core.next_finish()
        if t is not None:
            self._armed_at = t
            self._timer = loop.call_at(t, self._tick, loop)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        now = loop.time()
        late = max(0.0, now - self._armed_at)
        for job in self.core.pop_finished(now, tolerance=1e-6):
            fut = self._waiters.pop(job, None)
            if fut is not None and not fut.done():
                fut.set_result(late)
        self._rearm(loop)


class Pacer:
    """Carries one request's timer lateness into its next waits.

    The event loop's selector rounds waits up to whole milliseconds, so a chain of
    sub-millisecond modelled waits (a scaled profile) would add up to several ms. The
    pacer keeps ``lag`` (real time already spent beyond the model) and takes it off the
    next waits: a sleep shorter than the lag is skipped, and a job on a shared resource
    is credited the work it would have done in that time at its current share.
    """

    def __init__(self, lag: float = 0.0) -> None:
        self.lag = lag

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            return
        if self.lag >= seconds:
            self.lag -= seconds
            return
        seconds -= self.lag
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await asyncio.sleep(seconds)
        self.lag = max(0.0, loop.time() - t0 - seconds)

    async def use(self, res: AsyncResource, work: float) -> None:
        if work <= 0:
            return
        if self.lag > 0:
            rate = res.rate_if_joined()
            credit = min(work, self.lag * rate)
            work -= credit
            self.lag = max(0.0, self.lag - credit / rate)
            if work <= 0:
                return
        self.lag = await res.use(work)


class DecodeBatcher:
    """Continuous batching: one loop runs decode steps for every request waiting for a token."""

    def __init__(self, gpu: AsyncResource, params: ModelParams) -> None:
        self.gpu = gpu
        self.params = params
        self._pending: list[tuple[int, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None
        self._pacer = Pacer()

    async def step(self, context: int) -> None:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._pending.append((context, fut))
        if self._task is None or self._task.done():
            self._pacer.lag = 0.0
            self._task = loop.create_task(self._run())
        await fut

    async def _run(self) -> None:
        while self._pending:
            batch = [(c, f) for c, f in self._pending if not f.done()]
            self._pending = []
            if not batch:
                continue
            await self._pacer.use(self.gpu, self.params.decode_step_s(c for c, _ in batch))
            for _, f in batch:
                if not f.done():
                    f.set_result(None)
            if not self._pending:
                await asyncio.sleep(0)  # let the batch's requests ask for their next token

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
