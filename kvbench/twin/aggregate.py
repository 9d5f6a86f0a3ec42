"""The serving tier's aggregate bandwidth: how many of its reads run at full speed at once.

A TTFT sweep reads one prompt at a time, so it shows one read's bandwidth, not what concurrent reads
get: a storage system of many servers (the ibm-g4 profile: 9.9 GB/s a read, 80 GB/s in all) serves
several at full speed where one disk shares its bandwidth. With throughput runs beside the sweep,
each candidate aggregate (MULTIPLES of the one-read bandwidth) is scored by the step model's replay
of those runs (kvbench.twin.closedloop: reads share min(aggregate, k x one read's)); the best is
kept where it beats "they share one read's bandwidth" by MARGIN, else that stays. Multiples the
runs cannot tell apart (no more reads overlapped than the smallest of them) score the same: the
largest is kept, as a sequence limit that never bound is lifted (seqlimit), and `at_least` says
which the runs showed. The choice is
pure (a predictor is passed in), so it can be tested on loads the replay made with a known aggregate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kvbench.twin.measure import Load

MULTIPLES = (1, 2, 4, 8, 16, 32, 64)
MARGIN = 0.2
TIE = 0.01  # multiples whose scores are this close: the runs cannot tell them apart

Predictor = Callable[[Load, float], tuple[float, float]]  # (load, multiple) -> (req/s, TTFT p50 s)


@dataclass(frozen=True)
class Aggregate:
    multiple: int  # the aggregate is this many times one read's bandwidth
    at_least: int  # the smallest multiple that scored as well: what the runs showed
    scores: dict[int, float]  # multiple -> mean squared log error of req/s and TTFT p50

    def record(self) -> dict[str, Any]:
        best = sorted(self.scores.items(), key=lambda kv: kv[1])[:4]
        scores = ", ".join(f"{k}x: {v:.4g}" for k, v in best)
        return {"multiple": self.multiple, "at_least": self.at_least, "scores": scores}


def _score(loads: Sequence[Load], predictor: Predictor, multiple: float) -> float:
    sq = 0.0
    for load in loads:
        rps, p50 = predictor(load, multiple)
        for pred, meas in ((rps, load.requests_per_s), (p50, load.ttft_p50_s)):
            sq += math.log(max(pred, 1e-12) / max(meas, 1e-12)) ** 2
    return sq / max(1, 2 * len(loads))


def choose(loads: Sequence[Load], predictor: Predictor) -> Aggregate | None:
    """The best multiple (1 unless another beats it by MARGIN); None without loads past 1 connection."""
    if not any(ld.concurrency > 1 for ld in loads):
        return None
    scores = {m: _score(loads, predictor, m) for m in MULTIPLES}
    low = min(scores.values())
    if low >= (1 - MARGIN) * scores[1]:
        return Aggregate(1, 1, scores)
    tied = [m for m in MULTIPLES if scores[m] <= low * (1 + TIE) + 1e-15]
    return Aggregate(max(tied), min(tied), scores)
