"""Prefill cost, one convention for the mock and the audit.

One request alone on the GPU computes token i of its prompt at a linear cost (projections,
MLP) plus attention over the i tokens before it. Summed over an n-token prompt:

    t(n) = a*n + c*n^2                     (c is half the per-token attention slope)

and with the first k tokens already cached only tokens k..n-1 are computed:

    t(n | k) = a*(n - k) + c*(n^2 - k^2)

Two uncached points (n1, t1), (n2, t2) fix a and c (`fit_prefill`). The mock times
requests with these functions; the audit uses them to bound published figures, so the two
agree by construction. `cold_reuse_speedup` and `required_shared_fraction` are the audit's
best case for an empty cache whose prompts are each used `uses` times.
"""

from __future__ import annotations

import math


def prefill_time(n: float, cached: float, a: float, c: float) -> float:
    """Seconds to prefill tokens cached..n-1 of an n-token prompt: a*(n-k) + c*(n^2-k^2)."""
    k = max(0.0, min(float(cached), float(n)))
    n = float(n)
    return a * (n - k) + c * (n * n - k * k)


def fit_prefill(n1: float, t1: float, n2: float, t2: float) -> tuple[float, float]:
    """(a, c) of t(n) = a*n + c*n^2 through (n1, t1) and (n2, t2); ValueError for equal lengths."""
    det = n1 * n2**2 - n2 * n1**2
    if det == 0:
        raise ValueError("the two prefill points must have different, non-zero lengths")
    return (t1 * n2**2 - t2 * n1**2) / det, (n1 * t2 - n2 * t1) / det


def suffix_time(a: float, c: float, n: float, shared: float) -> float:
    """Prefill time of the last (1-f)*n tokens of an n-token prompt whose first f*n are cached.

    prefill_time(n, f*n) = a*(1-f)*n + c*(1-f^2)*n^2 (the suffix still attends over the prefix).
    """
    return a * (1.0 - shared) * n + c * (1.0 - shared**2) * n * n


def shared_fraction_for_suffix(a: float, c: float, n: float, target: float) -> float | None:
    """The f at which suffix_time(a, c, n, f) equals `target` (0 if no sharing is needed; None: never)."""
    full = suffix_time(a, c, n, 0.0)
    if target >= full:
        return 0.0
    if target <= 0.0:
        return None
    # x = 1 - f:  c n^2 x (2 - x) + a n x = target  ->  c n^2 x^2 - (a n + 2 c n^2) x + target = 0
    qa, qb = c * n * n, a * n + 2.0 * c * n * n
    if abs(qa) < 1e-300:
        return 1.0 - target / qb
    return 1.0 - (qb - math.sqrt(qb * qb - 4.0 * qa * target)) / (2.0 * qa)


def cold_reuse_speedup(uses: float, prompts: float, shared: float, cost: str = "linear") -> float:
    """Best throughput speedup of a cold cache over full recomputation.

    `prompts` distinct prompts of equal length n, each requested `uses` times; a fraction
    `shared` of every prompt is a prefix common to all prompts. Prefill cost a*n (linear) or
    c*n^2 (quadratic); hits cost nothing. Work with the cache: the first prompt in full, the
    other prompts' first uses only their unshared suffix, reuses free.
    """
    suffix = 1.0 - shared if cost == "linear" else 1.0 - shared**2
    return uses * prompts / (1.0 + (prompts - 1.0) * suffix)


def required_shared_fraction(
    uses: float, prompts: float, speedup: float, cost: str = "linear"
) -> float | None:
    """The shared-prefix fraction f at which cold_reuse_speedup reaches `speedup` (None: unreachable)."""
    if speedup > uses * prompts:
        return None
    if speedup <= uses or prompts <= 1.0:
        return 0.0
    suffix = (uses * prompts / speedup - 1.0) / (prompts - 1.0)
    return 1.0 - suffix if cost == "linear" else math.sqrt(1.0 - suffix)
