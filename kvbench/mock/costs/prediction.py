"""What the tier model predicts for a whole closed-loop run, in virtual time (no sleeping).

The mock serves requests in real time; this replays the same model as a discrete-event
simulation so a profile's throughput can be predicted (and tested) without running it: each
request onboards its cached prefix from G4 (G4 reads share the profile's topology with the noise
flows, max-min fair per flow; host->GPU copies share PCIe), then prefills on the shared GPU, then decodes.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from kvbench.mock.costs.timing import ModelParams, SharedResource


@dataclass(frozen=True)
class ThroughputPrediction:
    requests: int
    total_s: float
    requests_per_s: float
    mean_ttft_s: float


@dataclass(frozen=True)
class _Shape:
    requests: int
    connections: int
    prompts: int
    prompt_tokens: int
    output_tokens: int
    use_cache: bool


class _ClosedLoop:
    """One simulated run: events on a heap, GPU/G4/G2 as processor-sharing resources."""

    def __init__(self, params: ModelParams, shape: _Shape, noise: Sequence[float], warm_start: bool):
        self.p, self.shape = params, shape
        self.g4, self.g2 = params.tier("G4"), params.tier("G2")
        shares: dict[int, float] = {}

        def g4_rate(k: int) -> float:
            if k not in shares:
                shares[k] = params.g4_share(k, noise).cache_each
            return shares[k]

        self.g4_latency = params.g4_latency_s(noise)
        self.res = {
            "gpu": SharedResource(1.0, 1.0),
            "G4": SharedResource(self.g4.aggregate_bandwidth, share=g4_rate),
            "G2": SharedResource(self.g2.aggregate_bandwidth, self.g2.read_bandwidth),
        }
        self.cached: set[int] = set(range(shape.prompts)) if warm_start else set()
        self.c_max = params.cacheable_tokens(shape.prompt_tokens)
        self.events: list[tuple[float, int, int, str]] = []  # (time, seq, request, what)
        self.seq = self.job_ids = self.next_req = self.done = 0
        self.now = 0.0
        # per request: stages "onboard" (2 parallel transfers) -> "prefill" -> "decode"
        self.pending_parts: dict[int, int] = {}
        self.ttft: dict[int, float] = {}
        self.start: dict[int, float] = {}
        self.job_owner: dict[tuple[str, int], tuple[int, str]] = {}

    def push(self, t: float, req: int, what: str) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, req, what))

    def use(self, resource: str, req: int, work: float, what: str) -> None:
        self.job_ids += 1
        self.res[resource].add(self.now, self.job_ids, work)
        self.job_owner[(resource, self.job_ids)] = (req, what)

    def caching(self) -> bool:
        return self.shape.use_cache and self.g4.enabled

    def begin(self, req: int) -> None:
        self.start[req] = self.now
        if self.caching() and req % self.shape.prompts in self.cached:
            self.pending_parts[req] = 2
            self.push(self.now + self.g4_latency, req, "g4_read")
            self.push(self.now + self.g2.latency_s, req, "h2d_copy")
        else:
            self.use("gpu", req, self.p.prefill_s(self.shape.prompt_tokens, 0), "prefilled")

    def handle(self, req: int, what: str) -> None:
        p, n = self.p, self.shape.prompt_tokens
        if what == "g4_read":
            self.use("G4", req, p.kv_bytes(self.c_max), "part_done")
        elif what == "h2d_copy":
            self.use("G2", req, p.kv_bytes(self.c_max), "part_done")
        elif what == "part_done":
            self.pending_parts[req] -= 1
            if self.pending_parts[req] == 0:
                self.push(self.now + p.chunk_tail_s(p.onboard_chunk_tokens), req, "onboarded")
        elif what == "onboarded":
            self.use("gpu", req, p.prefill_s(n, self.c_max), "prefilled")
        elif what == "prefilled":
            self.prefilled(req)
        elif what == "finished":
            self.done += 1
            if self.next_req < self.shape.requests:
                self.next_req += 1
                self.begin(self.next_req - 1)

    def prefilled(self, req: int) -> None:
        p, shape = self.p, self.shape
        self.ttft[req] = self.now - self.start[req]
        if self.caching():
            self.cached.add(req % shape.prompts)
        steps = max(0, shape.output_tokens - 1)
        # This request's share of `steps` batched steps: the weight read split over the batch
        # plus its own KV read. k decoders sharing the GPU then take steps x a whole batch step,
        # as in the server's decode loop.
        share = (
            p.decode_base_s / min(shape.connections, shape.requests)
            + p.kv_bytes(shape.prompt_tokens) / p.hbm_bandwidth
        )
        work = steps * share
        if work > 0:
            self.use("gpu", req, work, "finished")
        else:
            self.push(self.now, req, "finished")

    def run(self) -> ThroughputPrediction:
        for _ in range(min(self.shape.connections, self.shape.requests)):
            self.next_req += 1
            self.begin(self.next_req - 1)
        while self.done < self.shape.requests:
            candidates: list[tuple[float, str]] = []
            if self.events:
                candidates.append((self.events[0][0], "event"))
            for name, r in self.res.items():
                t = r.next_finish()
                if t is not None:
                    candidates.append((t, name))
            self.now, kind = min(candidates)
            if kind == "event":
                _, _, req, what = heapq.heappop(self.events)
                self.handle(req, what)
            else:
                for job in self.res[kind].pop_finished(self.now):
                    self.handle(*self.job_owner.pop((kind, job)))
        now = self.now
        mean_ttft = sum(self.ttft.values()) / len(self.ttft) if self.ttft else 0.0
        requests = self.shape.requests
        return ThroughputPrediction(requests, now, requests / now if now > 0 else 0.0, mean_ttft)


def predict_closed_loop(
    params: ModelParams,
    *,
    requests: int = 200,
    connections: int = 28,
    prompts: int = 100,
    prompt_tokens: int = 120_000,
    output_tokens: int = 16,
    use_cache: bool = True,
    noise: Sequence[float] = (),
    warm_start: bool = False,
) -> ThroughputPrediction:
    """Virtual-time simulation of a closed-loop run (model seconds, no sleeping).

    Request i uses prompt i mod `prompts` (first pass cold, second pass warm; with
    `warm_start` G4 already holds every prompt, as after a fill phase). Simplifications: a
    cached prompt's blocks become visible when its prefill ends (as in the server); only G4
    caches (`use_cache` False: everything is recomputed); decode is approximated per request as
    its share of batched steps (a GPU job). `noise`: each noise flow's offered rate (modelled
    bytes/s), as the mock's fabric port models them.
    """
    shape = _Shape(requests, connections, prompts, prompt_tokens, output_tokens, use_cache)
    return _ClosedLoop(params, shape, noise, warm_start).run()
