"""The twin's sequence limit (vLLM --max-num-seqs, llama.cpp slots), from the runs when they show it.

From the first of:
  given    `kvbench fit --max-seqs N`
  source   the runs were against kvbench's own mock: its profile's limit is the system's, exactly
           (the step model's scores are still recorded: on a busy machine a mock run at a fast pace
           is late by milliseconds, and a replay that cannot see that lateness matched an invented
           limit of 6 on a mock with 256 better than no limit)
  gauges   the server's own running/waiting gauges, sampled during the throughput runs
           (kvbench.twin.measure): the most requests running while others waited is the limit,
           unless the runs' timing (the step model, below) fits the prior clearly better: a gauge
           sampled once a second lags the steps, and then the model decides
  model    the candidate limit whose step-model replay of each throughput run (kvbench.twin.closedloop)
           best matches its measured req/s and TTFT p50; a limit must beat "no limit" clearly
           (MARGIN) to be chosen, so noise on an unbounded server does not invent one
  default  the runs cannot tell (no throughput runs, no limit binding at the connections run, or
           no candidate, none included, clearly better than the prior): the scheduler's prior
           (given, source mock profile, engine default) stays
A limit at or above the most connections run is invisible in the runs: "not binding" says so.
The choice is pure (a predictor is passed in), so it can be tested on data the step model made.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kvbench.twin.measure import Gauges, Load

CANDIDATES = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # and every integer below the most connections, to 64
UNBOUNDED = 256  # the profile's value for "no limit seen" when the prior would bind (vLLM's GPU default)
MARGIN = 0.2  # a limit's score must be this much below no limit's to be chosen

Predictor = Callable[[Load, int | None], tuple[float, float]]  # (load, limit) -> (req/s, TTFT p50 s)


@dataclass(frozen=True)
class Point:
    run: str
    phase: str
    concurrency: int
    measured_rps: float
    predicted_rps: float
    measured_ttft_p50_s: float
    predicted_ttft_p50_s: float

    def predicted(self) -> dict[str, float]:
        return {
            "predicted_requests_per_s": self.predicted_rps,
            "predicted_ttft_p50_s": self.predicted_ttft_p50_s,
        }


@dataclass(frozen=True)
class SeqLimit:
    value: int  # the profile's gpu.max_num_seqs
    origin: str  # given | source | gauges | model | default
    binding: bool  # the limit held requests back in the runs (False: at least the most connections run)
    residual: float | None  # rms relative error of req/s and TTFT p50 over the runs, at `value`
    points: tuple[Point, ...]
    detail: str
    scores: dict[str, float]  # candidate ("none": no limit) -> mean squared log error (the model path)

    def record(self) -> dict[str, Any]:
        """The profile's fit.terms.max_num_seqs (scalars; the points go into fit.observed_throughput)."""
        best = sorted(self.scores.items(), key=lambda kv: kv[1])[:4]
        return {
            "value": self.value,
            "origin": self.origin,
            "binding": self.binding,
            "residual": None if self.residual is None else round(self.residual, 6),
            "points": len(self.points),
            "detail": self.detail,
            "scores": ", ".join(f"{k}: {v:.4g}" for k, v in best) or None,
        }


def candidates(most_connections: int, floor: int = 1) -> list[int]:
    """Limits the runs could show: below the most connections run (at or above it none binds)."""
    small = set(range(1, min(most_connections, 65)))
    return sorted(c for c in small | set(CANDIDATES) if floor <= c < most_connections)


def score(loads: Sequence[Load], predictor: Predictor, limit: int | None) -> tuple[float, list[Point]]:
    """Mean squared log error of req/s and TTFT p50 over the loads, and the points."""
    points, sq = [], 0.0
    for load in loads:
        rps, p50 = predictor(load, limit)
        run, measured = str(load.run_dir), (load.requests_per_s, load.ttft_p50_s)
        points.append(Point(run, load.phase, load.concurrency, measured[0], rps, measured[1], p50))
        sq += _log_err(rps, load.requests_per_s) ** 2 + _log_err(p50, load.ttft_p50_s) ** 2
    return sq / max(1, 2 * len(loads)), points


def _log_err(predicted: float, measured: float) -> float:
    return math.log(max(predicted, 1e-12) / max(measured, 1e-12))


def residual(points: Sequence[Point]) -> float | None:
    errs = [
        (pred - meas) / meas
        for p in points
        for pred, meas in ((p.predicted_rps, p.measured_rps), (p.predicted_ttft_p50_s, p.measured_ttft_p50_s))
        if meas > 0
    ]
    return math.sqrt(sum(e * e for e in errs) / len(errs)) if errs else None


def choose(
    loads: Sequence[Load],
    predictor: Predictor,
    prior: int,
    prior_from: str,
    given: int | None = None,
    gauges: Gauges | None = None,
    exact_prior: bool = False,
) -> SeqLimit:
    """The sequence limit and where it came from (see the module docstring for the order)."""
    most = max((ld.concurrency for ld in loads), default=0)

    def at(value: int, origin: str, binding: bool, detail: str, scores: dict[str, float]) -> SeqLimit:
        pts = score(loads, predictor, value)[1] if loads else []
        return SeqLimit(value, origin, binding, residual(pts), tuple(pts), detail, scores)

    if given is not None:
        return at(given, "given", most > given, "--max-seqs", {})
    if gauges is not None and gauges.saw_waiting:
        detail = f"most {gauges.name} {gauges.max_running} while requests waited ({gauges.samples} samples)"
        seen = gauges.max_running
        if not loads or seen == prior or not _timing_refutes(loads, predictor, seen, prior):
            return at(seen, "gauges", True, detail, {})
        # a gauge sampled once a second lags the steps: vLLM CPU's showed 1 running and 3 waiting
        # twice at 8 connections on a server of 4, and a limit of 1 took 28 connections -31% req/s
        gauges = Gauges(gauges.name, 1, False, gauges.samples)  # the model decides, from 1 up
    if not loads:
        return at(prior, "default", False, f"no throughput runs to fit it to: {prior_from}", {})
    floor = max(1, gauges.max_running) if gauges is not None else 1
    scores = {"none": score(loads, predictor, None)[0]}
    for c in candidates(most, floor):
        scores[str(c)] = score(loads, predictor, c)[0]
    if exact_prior:
        return at(prior, "source", most > prior, prior_from, scores)
    best = min((k for k in scores if k != "none"), key=lambda k: (scores[k], -int(k)), default=None)
    if best is not None and scores[best] < (1 - MARGIN) * scores["none"]:
        detail = f"the step model's best match to {len(loads)} run(s) at connections {_conns(loads)}"
        return at(int(best), "model", True, detail, scores)
    unbound = f"no limit binding up to {most} connection(s) (the step model's best match is none)"
    if str(prior) in scores and min(scores.values()) >= (1 - MARGIN) * scores[str(prior)]:
        # nothing beats the prior clearly either (on a CPU-bound server a limit of 4 and none at
        # 8 connections time alike): the prior stays, as with no runs, rather than an invented 256
        detail = f"no limit fits the runs clearly better than {prior} (within {MARGIN:.0%}): kept {prior}"
        return at(prior, "default", True, f"{detail} ({prior_from})", scores)
    if prior >= most:
        return at(prior, "default", False, f"{unbound}; kept {prior} ({prior_from})", scores)
    return at(max(UNBOUNDED, most), "model", False, unbound, scores)


def _timing_refutes(loads: Sequence[Load], predictor: Predictor, seen: int, prior: int) -> bool:
    """The runs' timing fits the prior clearly better (MARGIN) than the limit the gauges showed."""
    return score(loads, predictor, prior)[0] < (1 - MARGIN) * score(loads, predictor, seen)[0]


def _conns(loads: Sequence[Load]) -> str:
    return ",".join(str(c) for c in sorted({ld.concurrency for ld in loads}))
