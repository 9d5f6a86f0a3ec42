"""The twin's fits: pure least squares on (x, y) points, no I/O.

Every fitted term is linear in its coefficients, so each is an ordinary least-squares problem with
the coefficients held non-negative (a negative prefill or bandwidth term is noise, not physics):
`nonneg_lstsq` solves it over every subset of the columns and keeps the best fit whose coefficients
are all >= 0 (three columns at most: seven small solves, exact, no iteration).

    cold TTFT(n)          = a*n + c*n^2 + f          prefill (kvbench.model.prefill) + fixed cost
    warm TTFT(n | k) - prefill(n | k) - f - tail = L + bytes(k) / BW     the serving tier's onboarding
    inter-token time(m)   = base + bytes(m) / HBM    one decode step (kvbench.mock.costs.timing)

With only two distinct cold lengths there is no room for f: a and c come from
`kvbench.model.prefill.fit_prefill`, the two-point fit the mock and the audit use.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvbench.model import prefill as _prefill


@dataclass(frozen=True)
class Quality:
    """How well a fit reproduces its own points (seconds)."""

    points: int
    r2: float | None  # None: every point equal (nothing to explain)
    rmse_s: float
    max_abs_residual_s: float
    max_rel_residual: float  # |residual| / |measured|, worst point

    def as_dict(self) -> dict[str, float | int | None]:
        r2 = None if self.r2 is None else round(self.r2, 6)
        return {
            "points": self.points,
            "r2": r2,
            "rmse_s": self.rmse_s,
            "max_abs_residual_s": self.max_abs_residual_s,
            "max_rel_residual": round(self.max_rel_residual, 6),
        }


@dataclass(frozen=True)
class LinearFit:
    coef: dict[str, float]  # every column's coefficient (0.0 for a column the fit dropped)
    quality: Quality


def quality(y: npt.ArrayLike, predicted: npt.ArrayLike) -> Quality:
    ya, pa = np.asarray(y, dtype=float), np.asarray(predicted, dtype=float)
    res = ya - pa
    ss_tot = float(np.sum((ya - ya.mean()) ** 2))
    ss_res = float(np.sum(res**2))
    rel = np.abs(res) / np.maximum(np.abs(ya), 1e-12)
    return Quality(
        points=len(ya),
        r2=1.0 - ss_res / ss_tot if ss_tot > 0 else None,
        rmse_s=math.sqrt(ss_res / len(ya)),
        max_abs_residual_s=float(np.max(np.abs(res))),
        max_rel_residual=float(np.max(rel)),
    )


def nonneg_lstsq(columns: dict[str, npt.ArrayLike], y: npt.ArrayLike) -> LinearFit:
    """Least squares y ~ sum coef[k] * columns[k] with every coef >= 0 (the best non-negative subset)."""
    names = list(columns)
    ya = np.asarray(y, dtype=float)
    best: tuple[float, dict[str, float]] | None = None
    for size in range(len(names), 0, -1):
        for subset in itertools.combinations(names, size):
            x = np.column_stack([np.asarray(columns[k], dtype=float) for k in subset])
            sol, *_ = np.linalg.lstsq(x, ya, rcond=None)
            if np.any(sol < 0):
                continue
            sse = float(np.sum((x @ sol - ya) ** 2))
            if best is None or sse < best[0] * (1 - 1e-12):
                best = (sse, {k: float(v) for k, v in zip(subset, sol, strict=True)})
    coef = {k: 0.0 for k in names} | (best[1] if best else {})
    predicted = sum(coef[k] * np.asarray(columns[k], dtype=float) for k in names)
    return LinearFit(coef, quality(ya, list(np.broadcast_to(predicted, ya.shape))))


@dataclass(frozen=True)
class PrefillFit:
    a: float  # seconds per token
    c: float  # seconds per token^2 (kvbench.model.prefill's c: the profile's b is 2c)
    fixed_s: float  # per-request cost that does not scale with the prompt
    quality: Quality
    method: str


def fit_cold(tokens: Sequence[int], ttft_s: Sequence[float], fixed_max: float | None = None) -> PrefillFit:
    """a, c, f of cold TTFT = a*n + c*n^2 + f, fitted to each length's median (one slow request of
    several does not move it); quality over every row. f = 0 with only two distinct lengths.

    `fixed_max` bounds f from above (a warm request pays the fixed cost too, so the fastest warm
    TTFT is the most it can be): a larger f is noise in the cold rows, and a and c are refitted with
    f held at the bound."""
    if len(set(tokens)) < 2:
        raise ValueError("cold rows: need at least two distinct prompt lengths to fit the prefill cost")
    med = _medians_by_length(tokens, ttft_s)
    if len(med) == 2:
        (n1, t1), (n2, t2) = med
        a, c = _prefill.fit_prefill(n1, t1, n2, t2)
        if a >= 0 and c >= 0:
            pred = [_prefill.prefill_time(n, 0, a, c) for n in tokens]
            method = "two-point (kvbench.model.prefill.fit_prefill)"
            return PrefillFit(a, c, 0.0, quality(ttft_s, pred), method)
    n = np.asarray([x for x, _ in med], dtype=float)
    y = np.asarray([t for _, t in med], dtype=float)
    fit = nonneg_lstsq({"a": n, "c": n * n, "f": np.ones_like(n)}, y)
    a, c, f = fit.coef["a"], fit.coef["c"], fit.coef["f"]
    method = "non-negative least squares on each length's median"
    if fixed_max is not None and f > fixed_max:
        f = max(0.0, fixed_max)
        held = nonneg_lstsq({"a": n, "c": n * n}, y - f)
        a, c = held.coef["a"], held.coef["c"]
        method += f"; fixed cost held at the fastest warm TTFT ({f * 1e3:.3g} ms)"
    pred = [_prefill.prefill_time(x, 0, a, c) + f for x in tokens]
    return PrefillFit(a, c, f, quality(ttft_s, pred), method)


def _medians_by_length(tokens: Sequence[float], ttft_s: Sequence[float]) -> list[tuple[float, float]]:
    by: dict[float, list[float]] = {}
    for n, t in zip(tokens, ttft_s, strict=True):
        by.setdefault(n, []).append(t)
    return [(n, float(np.median(v))) for n, v in sorted(by.items())]


@dataclass(frozen=True)
class OnboardFit:
    latency_s: float
    bandwidth_bytes_per_s: float | None  # None: the warm rows do not grow with the bytes cached
    quality: Quality


def fit_onboard(nbytes: Sequence[float], excess_s: Sequence[float]) -> OnboardFit:
    """L and BW of excess = L + bytes/BW (the warm TTFT left after prefill, fixed cost and chunk tail),
    fitted to each size's median like the cold rows; quality over every row."""
    if not nbytes:
        raise ValueError("warm rows: none with cached tokens, so no onboarding to fit")
    med = _medians_by_length(list(nbytes), excess_s)
    x = [b for b, _ in med]
    fit = nonneg_lstsq({"latency": [1.0] * len(x), "inv_bw": x}, [t for _, t in med])
    latency, inv = fit.coef["latency"], fit.coef["inv_bw"]
    q = quality(excess_s, [latency + b * inv for b in nbytes])
    return OnboardFit(latency, 1.0 / inv if inv > 0 else None, q)


@dataclass(frozen=True)
class DecodeFit:
    base_s: float
    hbm_bytes_per_s: float | None  # None: the step time does not grow with the context
    quality: Quality


def fit_decode(context_bytes: Sequence[float], step_s: Sequence[float]) -> DecodeFit:
    """base and HBM of step = base + bytes(context)/HBM (single-stream inter-token times)."""
    if not context_bytes:
        raise ValueError("no inter-token times (every row asked for one output token)")
    fit = nonneg_lstsq({"base": [1.0] * len(context_bytes), "inv_hbm": context_bytes}, step_s)
    inv = fit.coef["inv_hbm"]
    return DecodeFit(fit.coef["base"], 1.0 / inv if inv > 0 else None, fit.quality)
