"""SLO attainment and goodput of one point (a sweep's, or a run's phase), from its saved rows:
pure functions, no I/O. Below the sweep so that a run's own report judges the scenario's `slo:`.

A request is *good* when every metric an SLO bounds is within the bound: its TTFT, its mean
inter-token latency (vLLM's TPOT) and its end-to-end time. When both a p50 and a p99 bound name
one metric, a request is held to the looser one (the p99): the p50 bound is a statement about the
middle of the distribution, checked on the point's percentiles (`percentiles_met`), not a cap on
every request. Failed requests are never good. Attainment is good / all measured requests with a
Wilson score interval; goodput is good requests per second of measured phase time, its interval
the attainment's scaled by the same requests per second (the phase's request count and duration
taken as given, as in a closed loop).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from kvbench.scenario.slo import SLO_METRICS

Z95 = 1.959963984540054


def wilson(good: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion (good of n); (0, 1) when there is no sample."""
    if n <= 0:
        return 0.0, 1.0
    p = good / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # the ends exactly: all good (or none) must not read as a hair under 1 (over 0) in float
    lo = 0.0 if good == 0 else max(0.0, centre - half)
    hi = 1.0 if good == n else min(1.0, centre + half)
    return lo, hi


def per_request_bounds(slo: Mapping[str, float | None]) -> dict[str, float]:
    """Row column -> the bound each request is held to (the loosest SLO naming that metric)."""
    out: dict[str, float] = {}
    for name, bound in slo.items():
        if bound is None:
            continue
        column = SLO_METRICS[name][0]
        out[column] = max(out.get(column, bound), bound)
    return out


def is_good(row: Mapping[str, Any], bounds: Mapping[str, float]) -> bool:
    """Did this request succeed with every bounded metric within its bound?"""
    if row.get("status") != "ok":
        return False
    for column, bound in bounds.items():
        value = row.get(column)
        if value is None or not (value <= bound):
            return False
    return True


def percentile(values: Iterable[float | None], q: float) -> float | None:
    xs = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.percentile(xs, q)) if xs else None


@dataclass
class PointMetrics:
    """One point's figures: what the summary table shows and the search decides on."""

    requests: int
    ok: int
    good: int
    duration_s: float | None
    throughput_rps: float | None
    attainment: float | None
    attainment_ci: tuple[float, float]
    goodput_rps: float | None
    goodput_ci: tuple[float | None, float | None]
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    itl_p99_ms: float | None
    e2e_p50_ms: float | None
    e2e_p99_ms: float | None
    percentiles_met: dict[str, bool] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def point_metrics(
    rows: Sequence[Mapping[str, Any]], duration_s: float | None, slo: Mapping[str, float | None]
) -> PointMetrics:
    """The figures of one point from its measured rows and the seconds its measured phases took."""
    bounds = per_request_bounds(slo)
    n = len(rows)
    ok_rows = [r for r in rows if r.get("status") == "ok"]
    good = sum(1 for r in rows if is_good(r, bounds))
    lo, hi = wilson(good, n)
    rate = n / duration_s if duration_s else None

    def pct(column: str, q: float) -> float | None:
        return percentile((r.get(column) for r in ok_rows), q)

    met = {}
    for name, bound in slo.items():
        if bound is not None:
            value = pct(*SLO_METRICS[name])
            met[name] = value is not None and value <= bound
    return PointMetrics(
        requests=n,
        ok=len(ok_rows),
        good=good,
        duration_s=duration_s,
        throughput_rps=len(ok_rows) / duration_s if duration_s else None,
        attainment=good / n if n else None,
        attainment_ci=(lo, hi),
        goodput_rps=good / duration_s if duration_s else None,
        goodput_ci=(lo * rate, hi * rate) if rate is not None else (None, None),
        ttft_p50_ms=pct("ttft_ms", 50),
        ttft_p99_ms=pct("ttft_ms", 99),
        itl_p99_ms=pct("itl_ms_mean", 99),
        e2e_p50_ms=pct("e2e_ms", 50),
        e2e_p99_ms=pct("e2e_ms", 99),
        percentiles_met=met,
    )


def verdict(good: int, n: int, target: float) -> str:
    """`meets` when the whole interval is at or above the target attainment, `misses` when it is
    wholly below, `straddles` otherwise (the search repeats such a point)."""
    lo, hi = wilson(good, n)
    if lo >= target:
        return "meets"
    if hi < target:
        return "misses"
    return "straddles"
