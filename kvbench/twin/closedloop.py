"""The twin under a closed-loop load, in virtual time: what it predicts for req/s and TTFT p50.

A discrete-event replay of the mock's own request path (kvbench.mock.costs.engine) on a twin's
ModelParams, for a given sequence limit: C connections each send their next request when the last
one ends; at most `limit` run at once (the rest queue, FIFO); a running request waits the fixed cost
(with `gpu.step`, before it queues: the server's front end, as the mock's step twin pays it),
onboards its cached tokens from G4 (latency, then the reads share G4's bandwidth, then the chunk
tail), prefills and decodes. Prefill and decode run as the twin's GPU does: in the profile's steps
(kvbench.mock.costs.step.StepScheduler, the same object the mock runs) or, without `gpu.step`, by
processor sharing with one decode batch at a time. The cached tokens of each request are the ones the
server reported, so the replay needs no cache model. Not modelled: the G2 staging stage (the twin
sets it well above G4's bandwidth) and the client's own time between requests.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from kvbench.mock.costs.step import Step, StepScheduler
from kvbench.mock.costs.timing import ModelParams, SharedResource
from kvbench.twin.measure import Request


@dataclass(frozen=True)
class Prediction:
    requests_per_s: float
    ttft_p50_s: float
    max_running: int  # the most requests running at once (what the server's gauge would show)


class _Sim:
    def __init__(self, p: ModelParams, reqs: Sequence[Request], connections: int, limit: int | None):
        self.p, self.reqs, self.limit = p, reqs, limit
        self.connections = max(1, connections)
        self.now = 0.0
        self.events: list[tuple[float, int, str, int]] = []
        self.seq = itertools.count()
        self.jobs = itertools.count()
        self.sent = self.done = self.running = self.max_running = 0
        self.queue: deque[int] = deque()
        self.start: dict[int, float] = {}
        self.ttft: dict[int, float] = {}
        self.left: dict[int, int] = {}  # tokens still to decode
        g4 = p.tier("G4")
        self.g4 = SharedResource(g4.aggregate_bandwidth, g4.read_bandwidth)
        self.gpu = SharedResource(1.0, 1.0)  # processor sharing (no gpu.step)
        self.owner: dict[tuple[str, int], int] = {}  # (resource, job) -> request; -1: a decode batch
        self.steps = StepScheduler(p, p.step) if p.step is not None else None
        self.stepping = False
        self.current: Step | None = None
        self.pending: dict[int, int] = {}  # request -> context, waiting for the next decode batch
        self.batch: list[int] | None = None

    def push(self, dt: float, what: str, req: int) -> None:
        heapq.heappush(self.events, (self.now + dt, next(self.seq), what, req))

    def use(self, name: str, work: float, req: int) -> None:
        job = next(self.jobs)
        (self.g4 if name == "g4" else self.gpu).add(self.now, job, work)
        self.owner[(name, job)] = req

    # the request path
    def send(self) -> None:
        if self.sent < len(self.reqs):
            req, self.sent = self.sent, self.sent + 1
            self.start[req] = self.now
            if self.steps is not None:  # the fixed cost outside the scheduler, as the mock's step twin
                self.push(self.p.request_fixed_s, "queued", req)
            else:
                self.queue.append(req)
                self.admit()

    def admit(self) -> None:
        while self.queue and (self.limit is None or self.running < self.limit):
            self.running += 1
            self.max_running = max(self.max_running, self.running)
            req = self.queue.popleft()
            if self.steps is not None:
                self.handle("fixed", req)  # paid before it queued
            else:
                self.push(self.p.request_fixed_s, "fixed", req)

    def handle(self, what: str, req: int) -> None:
        r = self.reqs[req] if req >= 0 else None
        if what == "queued":
            self.queue.append(req)
            self.admit()
        elif what == "fixed" and r is not None:
            c = min(r.cached_tokens, r.prompt_tokens - 1)
            if c > 0 and self.p.tier("G4").enabled:
                self.push(self.p.g4_latency_s(), "read", req)
            else:
                self.prefill(req)
        elif what == "read" and r is not None:
            self.use("g4", self.p.kv_bytes(min(r.cached_tokens, r.prompt_tokens - 1)), req)
        elif what == "g4":
            self.push(self.p.chunk_tail_s(self.p.onboard_chunk_tokens), "onboarded", req)
        elif what == "onboarded":
            self.prefill(req)
        elif what == "gpu" and req >= 0:
            self.first_token(req)
        elif what == "gpu":
            self.batch_done()
        elif what == "step":
            self.step_done()

    def prefill(self, req: int) -> None:
        r = self.reqs[req]
        c = min(r.cached_tokens, r.prompt_tokens - 1) if r.cached_tokens > 0 else 0
        if self.steps is not None:
            self.steps.add_prefill(req, r.prompt_tokens, c)
            self.kick()
        else:
            self.use("gpu", self.p.prefill_s(r.prompt_tokens, c), req)

    def first_token(self, req: int) -> None:
        self.ttft[req] = self.now - self.start[req]
        self.left[req] = self.reqs[req].output_tokens - 1
        self.next_token(req)

    def next_token(self, req: int) -> None:
        if self.left[req] <= 0:
            self.finish(req)
            return
        context = self.context(req)
        if self.steps is not None:
            self.steps.add_decode(req, context)
        else:
            self.pending[req] = context
            if self.batch is None:
                self.start_batch()

    def context(self, req: int) -> int:
        """Tokens before the one `req` waits for: its prompt and the output so far."""
        return self.reqs[req].prompt_tokens + self.reqs[req].output_tokens - self.left[req]

    def finish(self, req: int) -> None:
        self.done += 1
        self.running -= 1
        self.admit()
        self.send()

    # the processor-sharing GPU's decode batcher (kvbench.mock.costs.pacing.DecodeBatcher)
    def start_batch(self) -> None:
        self.batch, self.pending = list(self.pending), {}
        contexts = [self.context(q) for q in self.batch]
        self.use("gpu", self.p.decode_step_s(contexts), -1)

    def batch_done(self) -> None:
        batch, self.batch = self.batch or [], None
        for q in batch:
            self.left[q] -= 1
            self.next_token(q)
        if self.pending and self.batch is None:
            self.start_batch()

    # the step scheduler (kvbench.mock.costs.step.StepLoop)
    def kick(self) -> None:
        if self.stepping or self.steps is None:
            return
        step = self.steps.plan()
        if step is not None:
            self.stepping = True
            self.current = step
            self.push(step.duration_s, "step", -1)

    def step_done(self) -> None:
        self.stepping, step, self.current = False, self.current, None
        if step is None:
            return
        for q in step.finished:
            self.first_token(q)
        for q in step.decoded:
            self.left[q] -= 1
            self.next_token(q)
        self.kick()

    def run(self) -> Prediction:
        for _ in range(self.connections):
            self.send()
        while self.done < len(self.reqs):
            options = [(t, name) for name, res in (("g4", self.g4), ("gpu", self.gpu))
                       if (t := res.next_finish()) is not None]  # fmt: skip
            if self.events:
                options.append((self.events[0][0], "event"))
            self.now, kind = min(options)
            if kind == "event":
                _, _, what, req = heapq.heappop(self.events)
                self.handle(what, req)
                continue
            res = self.g4 if kind == "g4" else self.gpu
            for job in res.pop_finished(self.now):
                self.handle(kind, self.owner.pop((kind, job)))
        ttfts = sorted(self.ttft.values())
        mid = len(ttfts) // 2
        p50 = ttfts[mid] if len(ttfts) % 2 else (ttfts[mid - 1] + ttfts[mid]) / 2
        real = self.now * self.p.time_scale  # model seconds to the twin's real ones (1:1 for a twin)
        rps = len(self.reqs) / real if real > 0 else 0.0
        return Prediction(rps, p50 * self.p.time_scale, self.max_running)


def predict(
    params: ModelParams, requests: Sequence[Request], connections: int, limit: int | None
) -> Prediction:
    """The twin's req/s and TTFT p50 on this load with at most `limit` sequences (None: no limit)."""
    if not requests:
        raise ValueError("closed loop: no requests to replay")
    return _Sim(params, requests, connections, limit).run()
