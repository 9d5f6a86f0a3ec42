"""The twin's near tier: a prefix cache of bounded capacity whose hits cost nothing, where the runs show one.

A TTFT sweep's warm request follows its cold one at once, so it hits whatever tier holds the newest
blocks. Under a throughput load a prompt comes back after others were used, and a system whose
fast tier (GPU memory; the laptop profile's 16k-token G1) is smaller than the working set serves it
from a slower one: a cliff that one fitted tier cannot show (on the laptop G1 hits cost ~0 ms and
the G2/G3 ones several, so a one-tier twin fitted to the sweep's G1 hits came out 50-65% fast on
TTFT p50 at 1-4 connections). The fit, per candidate capacity K of the near tier (in blocks):
  1. an LRU replay of each run's lookups (at send) and commits (at first token), prompt by prompt,
     by kvbench.mock.costs.cache's rule (a prompt's blocks become the newest in prompt order, the
     oldest go), says how many of each hit's cached tokens the near tier still held;
  2. the far tier's latency and bandwidth are fitted (fit.fit_onboard) to the hits with far tokens:
     excess = L + bytes(far) / BW (excess: the TTFT less fixed cost, prefill and chunk tail);
  3. the score is the squared error of every hit's excess (a hit wholly near: 0).
The best K is kept when its score is below (1 - MARGIN) of one tier's (the sweep's onboarding fit
for every hit) and the near tier holds at least one scored hit whole; else no cliff shows. Only the
runs' hits at their fewest connections are scored, where a hit's TTFT is its own onboarding.
Pure: the rows are passed in, so a test can build hits from a known capacity.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from kvbench.twin import fit as F

MARGIN = 0.2  # a cliff's score must be this much below one tier's to be kept
GRID = 1.15  # candidate capacities: this factor apart, from one block to every block the runs used


@dataclass(frozen=True)
class Row:
    """One request of a run, in the order the server saw it."""

    prompt: Hashable  # the same key for the same prompt within a run (its blocks are its own)
    tokens: int
    cached: int
    sent_ns: int
    first_ns: int  # when its prefill ended (the server commits its blocks then)
    excess_s: float | None  # its onboarding time (a scored hit), None: not scored


@dataclass(frozen=True)
class Cliff:
    capacity_blocks: int  # the near tier's capacity
    far: F.OnboardFit  # the tier the hits beyond it come from
    score: float  # sum of squared excess errors over the scored hits
    one_tier_score: float
    hits: int  # scored hits
    near_hits: int  # of those, held whole by the near tier

    def record(self) -> dict[str, Any]:
        return {
            "capacity_blocks": self.capacity_blocks,
            "far_latency_s": self.far.latency_s,
            "far_bandwidth_bytes_per_s": self.far.bandwidth_bytes_per_s,
            "hits": self.hits,
            "near_hits": self.near_hits,
            "rmse_s": round(math.sqrt(self.score / max(1, self.hits)), 6),
            "one_tier_rmse_s": round(math.sqrt(self.one_tier_score / max(1, self.hits)), 6),
        } | {f"far_{k}": v for k, v in self.far.quality.as_dict().items() if k in ("r2", "points")}


def near_tokens(runs: Sequence[Sequence[Row]], capacity_blocks: int, block: int) -> list[list[int]]:
    """Per run, per row: the cached tokens an LRU near tier of `capacity_blocks` held at its lookup."""
    out = []
    for rows in runs:
        lru: OrderedDict[tuple[Hashable, int], None] = OrderedDict()
        near = [0] * len(rows)
        events = sorted(
            [(r.sent_ns, 0, i) for i, r in enumerate(rows)] + [(r.first_ns, 1, i) for i, r in enumerate(rows)]
        )
        for _, commit, i in events:
            r = rows[i]
            if not commit:
                held = sum((r.prompt, j) in lru for j in range(r.cached // block))
                near[i] = min(r.cached, held * block)
                continue
            for j in range(r.tokens // block):
                key = (r.prompt, j)
                if key in lru:
                    lru.move_to_end(key)
                else:
                    lru[key] = None
            while len(lru) > capacity_blocks:
                lru.popitem(last=False)
        out.append(near)
    return out


def _candidates(runs: Sequence[Sequence[Row]], block: int) -> list[int]:
    total = sum(len({(r.prompt, j) for r in rows for j in range(r.tokens // block)}) for rows in runs)
    out, k = [], 1.0
    while k < total:
        out.append(int(k))
        k = max(k + 1, k * GRID)
    return sorted(set(out))


def fit_cliff(
    runs: Sequence[Sequence[Row]],
    block: int,
    kv_bytes: Callable[[int], float],
    one_tier: Callable[[int], float],
    tail_s: float,
) -> Cliff | None:
    """The near tier's capacity and the far tier's terms, or None where no cliff shows (see above).

    A row's excess_s is its TTFT less the fixed cost and the prefill; `one_tier(cached)`: a hit's
    excess by the sweep's fit (every hit from the one tier, chunk tail included); `tail_s`: the
    chunk tail a hit with far tokens pays (a hit wholly near moves nothing)."""
    scored = [(ri, i) for ri, rows in enumerate(runs) for i, r in enumerate(rows) if r.excess_s is not None]
    if len(scored) < 3:
        return None
    one_score = sum(((runs[ri][i].excess_s or 0.0) - one_tier(runs[ri][i].cached)) ** 2 for ri, i in scored)

    def at(k: int) -> Cliff | None:
        near = near_tokens(runs, k, block)
        far_rows = [(ri, i) for ri, i in scored if near[ri][i] < runs[ri][i].cached]
        whole = len(scored) - len(far_rows)
        xs = [kv_bytes(runs[ri][i].cached - near[ri][i]) for ri, i in far_rows]
        if whole == 0 or len(set(xs)) < 2:
            return None
        ys = [(runs[ri][i].excess_s or 0.0) - tail_s for ri, i in far_rows]
        far = F.fit_onboard(xs, ys)
        inv = 0.0 if far.bandwidth_bytes_per_s is None else 1.0 / far.bandwidth_bytes_per_s
        sq = sum((y - far.latency_s - x * inv) ** 2 for x, y in zip(xs, ys, strict=True))
        sq += sum((runs[ri][i].excess_s or 0.0) ** 2 for ri, i in scored if near[ri][i] >= runs[ri][i].cached)
        return Cliff(k, far, sq, one_score, len(scored), whole)

    def better(a: Cliff | None, b: Cliff | None) -> Cliff | None:
        return b if a is None or (b is not None and b.score < a.score) else a

    best: Cliff | None = None
    for k in _candidates(runs, block):
        best = better(best, at(k))
    if best is not None:  # the grid's best, then every capacity between its neighbours
        for k in range(max(1, int(best.capacity_blocks / GRID)), int(best.capacity_blocks * GRID) + 2):
            best = better(best, at(k))
    if best is None or best.score >= (1 - MARGIN) * one_score:
        return None
    return best
