"""The throughput server's compute speed: one factor on the TTFT sweep's costs, from its runs' req/s.

A twin's costs come from its TTFT sweep. Throughput runs against another server than the sweep's
(another base URL: another process, maybe other flags; llama.cpp as kvbench runs it sweeps on 1 slot
and a 10240-token context, and serves throughput on 4 slots of 4096) need not share them: there the
factor multiplies every compute cost the sweep fitted (prefill a and c, the decode step, the
per-request fixed cost; the HBM bandwidth divides). It is chosen on a grid (GRID) to match those runs'
req/s by the step model's replay of each (kvbench.twin.closedloop, with the server's own cached
tokens, so no cache model enters), and kept at 1 unless it fits clearly better (MARGIN). req/s only:
the replay does not charge llama.cpp's slot resume, so its TTFT p50 is no measure of speed. On the
sweep's own server the sweep's costs stand (SAME_SERVER), and a twin of kvbench's mock has no factor
(its time is the model's, whatever the machine does). `choose` is pure (a predictor is passed in),
so it can be tested on data the step model made; `apply` fits it to runs and scales the profile.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kvbench.mock.costs.timing import ModelParams
from kvbench.twin import closedloop
from kvbench.twin.measure import Load, read_load
from kvbench.twin.seqlimit import Point
from kvbench.twin.sources import RunData

STEP = 1.025  # the grid's ratio between neighbours: 2.5%, well inside the targets' 15%
GRID = tuple(round(STEP**i, 6) for i in range(-28, 29))  # 0.50 .. 2.0
MARGIN = 0.2  # a factor's score must be this much below 1's to be chosen
# on the sweep's own server two short runs are noisier than the sweep's 15 points: on vLLM CPU (the
# same flags for both) a factor of 1.16 from single runs at 2 and 8 connections took 28 connections
# from -8.5% to -21% req/s, where on llama.cpp's other server 1.13 took them from +22% to +11%
SAME_SERVER = "the throughput runs were against the TTFT sweep's own server: the sweep's costs stand"
# the gpu fields that are time per unit of work (scaled by s) and the rates (divided by s)
TIMES = (
    "prefill_linear_s_per_token",
    "prefill_quadratic_s_per_token2",
    "decode_step_base_s",
    "request_fixed_s",
)
RATES = ("hbm_bandwidth_bytes_per_s",)

Predictor = Callable[[Load, float], tuple[float, float]]  # (load, factor) -> (req/s, TTFT p50 s)


@dataclass(frozen=True)
class Speed:
    value: float  # 1.0: the sweep's costs as fitted
    origin: str  # model | default
    residual: float | None  # rms relative error of req/s over the runs, at `value`
    points: tuple[Point, ...]
    detail: str

    def record(self) -> dict[str, Any]:
        """The profile's fit.terms.speed."""
        return {
            "value": round(self.value, 6),
            "origin": self.origin,
            "residual": None if self.residual is None else round(self.residual, 6),
            "points": len(self.points),
            "detail": self.detail,
        }


def scale(gpu: dict[str, Any], factor: float) -> dict[str, Any]:
    """The profile's gpu section with its compute `factor` times as slow (a new dict)."""
    out = dict(gpu)
    for k in TIMES:
        if isinstance(out.get(k), int | float):
            out[k] = out[k] * factor
    for k in RATES:
        if isinstance(out.get(k), int | float) and out[k] > 0:
            out[k] = out[k] / factor
    return out


def score(loads: Sequence[Load], predictor: Predictor, factor: float) -> tuple[float, list[Point]]:
    """Mean squared log error of req/s over the loads, and the points."""
    points, sq = [], 0.0
    for load in loads:
        rps, p50 = predictor(load, factor)
        run, conns = str(load.run_dir), load.concurrency
        points.append(Point(run, load.phase, conns, load.requests_per_s, rps, load.ttft_p50_s, p50))
        sq += math.log(max(rps, 1e-12) / max(load.requests_per_s, 1e-12)) ** 2
    return sq / max(1, len(loads)), points


def _residual(points: Sequence[Point]) -> float | None:
    errs = [(p.predicted_rps - p.measured_rps) / p.measured_rps for p in points if p.measured_rps > 0]
    return math.sqrt(sum(e * e for e in errs) / len(errs)) if errs else None


def choose(loads: Sequence[Load], predictor: Predictor) -> Speed:
    """The factor and where it came from (see the module docstring)."""
    if not loads:
        return Speed(1.0, "default", None, (), "no throughput runs to fit it to: the TTFT sweep's costs")
    scores = {f: score(loads, predictor, f) for f in GRID}
    best = min(GRID, key=lambda f: (scores[f][0], abs(math.log(f))))
    conns = ",".join(str(c) for c in sorted({ld.concurrency for ld in loads}))
    at_one = scores[1.0]
    if best != 1.0 and scores[best][0] < (1 - MARGIN) * at_one[0]:
        pts = scores[best][1]
        detail = (
            f"the step model's best match to the req/s of {len(loads)} run(s) at connections {conns} "
            f"(at 1: rms error {_residual(at_one[1]) or 0:.1%})"
        )
        return Speed(best, "model", _residual(pts), tuple(pts), detail)
    detail = f"no factor fits the req/s at connections {conns} clearly better than 1 (within {MARGIN:.0%})"
    return Speed(1.0, "default", _residual(at_one[1]), tuple(at_one[1]), detail)


def apply(
    runs: Sequence[RunData],
    draft: dict[str, Any],
    limit: int,
    notes: list[str],
    params_of: Callable[[dict[str, Any]], ModelParams],
) -> Speed:
    """Fit the factor to `runs` and scale `draft`'s gpu section by it (a note says so where it is not 1).
    `params_of` turns a profile dict into the mock's ModelParams (kvbench.twin.build's validation)."""
    chosen = fit_to_runs(runs, draft, limit, params_of)
    if chosen.value != 1.0:
        draft["gpu"] = scale(draft["gpu"], chosen.value)
        notes.append(
            f"compute {chosen.value:.3g}x the TTFT sweep's (fit.terms.speed: {chosen.detail}): the sweep and "
            "the throughput runs met the server at different speeds, and the twin takes the throughput runs'"
        )
    return chosen


def fit_to_runs(
    runs: Sequence[RunData],
    draft: dict[str, Any],
    limit: int,
    params_of: Callable[[dict[str, Any]], ModelParams],
) -> Speed:
    """The factor whose closed-loop replay best matches the req/s of the throughput runs against another
    server than the TTFT sweep's; SAME_SERVER where every throughput run was on the sweep's own."""
    swept = {r.source.server for r in runs if r.cold and r.source is not None}
    other = [r for r in runs if r.source is not None and r.source.server not in swept]
    if not other and any(r.throughput for r in runs):
        return Speed(1.0, "default", None, (), SAME_SERVER)
    loads = [ld for r in other for ld in read_load(r.run_dir) if ld.pace == 1.0]
    cache: dict[float, ModelParams] = {}

    def predictor(load: Load, factor: float) -> tuple[float, float]:
        if factor not in cache:
            cache[factor] = params_of({**draft, "gpu": scale(draft["gpu"], factor)})
        p = closedloop.predict(cache[factor], load.requests, load.concurrency, limit)
        return p.requests_per_s, p.ttft_p50_s

    return choose(loads, predictor)
