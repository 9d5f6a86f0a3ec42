"""The noise effect with an interval, from repeated order-balanced quiet/noisy pairs.

One quiet/noisy pair says nothing about run-to-run variation; several do. A noisy run alternates
its pairs (quiet-noisy, noisy-quiet, quiet-noisy, ...: ABBA), so a slow drift of the machine
(a cache warming, a neighbour's job) falls on both sides equally. Each pair gives one paired
difference, the log of the time per request of its noisy phase over its quiet phase:

    d_i = ln((T_noisy_i / ok_noisy_i) / (T_quiet_i / ok_quiet_i))

The effect is exp(mean d) - 1 (the geometric-mean increase in time per request; the change in
requests/s is exp(-mean d) - 1), with a Student t interval over the n pairs (few pairs: t, not
a bootstrap, which needs more). Logs make a doubling and a halving symmetric and keep large
effects honest.

Wording: the effect is *distinguishable from zero* when the interval excludes zero and its bound
nearest zero is at least `min_effect_pct` away (smaller changes are within the resolution of a
timed run: clocks, pacing, a busy machine); an interval that excludes zero but stays inside that
margin is *negligible*; an interval that includes zero is *no distinguishable effect*.

Pure: numbers in, a pydantic model out; no scipy (the t quantile is computed here).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

LEVEL = 0.95
MIN_EFFECT_PCT = 1.0
_PAIR = re.compile(r"^(?P<label>quiet|noisy)-(?P<pair>\d+)(?P<rest>.*)$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PairResult(_Model):
    pair: str = Field(description="pair key (pair number and repetition)")
    order: str = Field(description="quiet_first | noisy_first")
    quiet_phase: str = Field(description="the quiet phase")
    noisy_phase: str = Field(description="the noisy phase")
    quiet_s_per_request: float = Field(description="quiet phase wall time / ok requests, s")
    noisy_s_per_request: float = Field(description="noisy phase wall time / ok requests, s")
    change_pct: float = Field(description="noisy / quiet time per request - 1, %")


class NoiseEffect(_Model):
    metric: str = Field(description="what is compared, in words")
    pairs: int = Field(description="complete quiet/noisy pairs")
    balanced: bool = Field(description="as many quiet-first as noisy-first pairs")
    level: float = Field(description="confidence level of the interval")
    time_change_pct: float = Field(description="geometric-mean change in time per request, %")
    time_change_ci_pct: tuple[float, float] | None = Field(
        description="t interval of time_change_pct (None below two pairs)"
    )
    rate_change_pct: float = Field(description="the same effect as a change in requests/s, %")
    rate_change_ci_pct: tuple[float, float] | None = Field(description="interval of rate_change_pct")
    min_effect_pct: float = Field(description="smallest change called distinguishable, %")
    verdict: str = Field(description="slower | faster | negligible | none | unknown")
    sentence: str = Field(description="the verdict in words")
    per_pair: list[PairResult] = Field(description="each pair's phases and change")


def t_quantile(p: float, df: int) -> float:
    """Quantile p (0.5 < p < 1) of Student's t with `df` degrees of freedom (bisection on the CDF)."""
    if df <= 0:
        raise ValueError("df must be positive")
    if not 0.5 < p < 1:
        raise ValueError("p must be in (0.5, 1)")
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < p:
        hi *= 2
    for _ in range(80):
        mid = (lo + hi) / 2
        if _t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _t_cdf(x: float, df: int) -> float:
    """P(T <= x) for x >= 0: 1 - I_{df/(df+x^2)}(df/2, 1/2) / 2 (regularized incomplete beta)."""
    z = df / (df + x * x)
    return 1.0 - 0.5 * _betainc(df / 2.0, 0.5, z)


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) (continued fraction, Numerical Recipes 6.4)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    ln_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _betainc(b, a, 1.0 - x)
    f, c, d = 1.0, 1.0, 0.0
    for i in range(400):
        m = i // 2
        if i == 0:
            num = 1.0
        elif i % 2 == 0:
            num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        else:
            num = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d = 1.0 + num * d
        d = 1e-300 if abs(d) < 1e-300 else d
        d = 1.0 / d
        c = 1.0 + num / c
        c = 1e-300 if abs(c) < 1e-300 else c
        f *= c * d
        if abs(1.0 - c * d) < 1e-14:
            break
    return math.exp(ln_front) * (f - 1.0) / a


def mean_interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, tuple[float, float] | None]:
    """Mean and its two-sided Student t interval (None for fewer than two values)."""
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    mean = sum(values) / n
    if n < 2:
        return mean, None
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return mean, (mean - half, mean + half)


def pair_phases(
    phases: Sequence[Mapping[str, Any]],
) -> list[tuple[str, Mapping[str, Any], Mapping[str, Any]]]:
    """(pair key, quiet phase, noisy phase) for every complete pair, in run order.

    A phase record needs `name`, `label`, `duration_s` and `ok` (or `requests`); a pair is read from
    `pair` when the record has it, else from the name (quiet-3, noisy-3-r2, ...).
    """
    sides: dict[str, dict[str, Mapping[str, Any]]] = {}
    for p in phases:
        label = str(p.get("label", ""))
        if label not in ("quiet", "noisy"):
            continue
        key = p.get("pair")
        if key is None:
            m = _PAIR.match(str(p.get("name", "")))
            if m is None:
                continue
            key = f"{m['pair']}{m['rest']}"
        sides.setdefault(str(key), {})[label] = p
    return [(k, v["quiet"], v["noisy"]) for k, v in sides.items() if "quiet" in v and "noisy" in v]


def _per_request(p: Mapping[str, Any]) -> float | None:
    dur, ok = p.get("duration_s"), p.get("ok", p.get("requests"))
    if not dur or not ok:
        return None
    return float(dur) / float(ok)


def noise_effect(
    phases: Sequence[Mapping[str, Any]],
    level: float = LEVEL,
    min_effect_pct: float = MIN_EFFECT_PCT,
) -> NoiseEffect | None:
    """The paired effect of the noise over the run's quiet/noisy pairs (None without a pair)."""
    order = {str(p.get("name")): i for i, p in enumerate(phases)}
    results: list[PairResult] = []
    logs: list[float] = []
    for key, q, n in pair_phases(phases):
        tq, tn = _per_request(q), _per_request(n)
        if tq is None or tn is None:
            continue
        first = (
            "quiet_first"
            if order.get(str(q.get("name")), 0) < order.get(str(n.get("name")), 0)
            else "noisy_first"
        )
        logs.append(math.log(tn / tq))
        results.append(
            PairResult(
                pair=key,
                order=first,
                quiet_phase=str(q.get("name")),
                noisy_phase=str(n.get("name")),
                quiet_s_per_request=tq,
                noisy_s_per_request=tn,
                change_pct=(tn / tq - 1.0) * 100.0,
            )
        )
    if not logs:
        return None
    mean, ci = mean_interval(logs, level)
    pct = (math.exp(mean) - 1.0) * 100.0
    ci_pct = ((math.exp(ci[0]) - 1.0) * 100.0, (math.exp(ci[1]) - 1.0) * 100.0) if ci else None
    rate_ci = ((math.exp(-ci[1]) - 1.0) * 100.0, (math.exp(-ci[0]) - 1.0) * 100.0) if ci else None
    firsts = sum(r.order == "quiet_first" for r in results)
    verdict, sentence = _verdict(pct, ci_pct, min_effect_pct, len(results), level)
    return NoiseEffect(
        metric="time per request of the noisy phase / the quiet phase of the same pair (geometric mean)",
        pairs=len(results),
        balanced=2 * firsts == len(results),
        level=level,
        time_change_pct=pct,
        time_change_ci_pct=ci_pct,
        rate_change_pct=(math.exp(-mean) - 1.0) * 100.0,
        rate_change_ci_pct=rate_ci,
        min_effect_pct=min_effect_pct,
        verdict=verdict,
        sentence=sentence,
        per_pair=results,
    )


def _verdict(
    pct: float, ci: tuple[float, float] | None, margin: float, n: int, level: float
) -> tuple[str, str]:
    lvl = f"{100 * level:g}%"
    if ci is None:
        return "unknown", (
            f"one pair only ({pct:+.1f}% time): no interval, so the effect cannot be told from run-to-run "
            "variation; run several pairs (noisy.pairs)"
        )
    lo, hi = ci
    span = f"{lvl} CI {lo:+.1f}% to {hi:+.1f}% over {n} pairs"
    if lo <= 0 <= hi:
        return "none", f"no distinguishable effect: {pct:+.1f}% time per request, {span} includes zero"
    nearest = min(abs(lo), abs(hi))
    if nearest < margin:
        return "negligible", (
            f"negligible: {pct:+.1f}% time per request ({span}) excludes zero but stays within "
            f"{margin:g}% of it, the resolution of a timed run"
        )
    if lo > 0:
        return (
            "slower",
            f"noisy phases are slower: {pct:+.1f}% time per request ({span}), distinguishable from zero",
        )
    return (
        "faster",
        f"noisy phases are faster: {pct:+.1f}% time per request ({span}), distinguishable from zero",
    )
