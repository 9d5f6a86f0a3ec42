"""Goodput search: bisect a load range (concurrency or rate) for the highest load whose SLO
attainment reaches a target. Pure control flow; the caller's `evaluate` runs (or fakes) a point.

A load *meets* the target when the Wilson interval of its attainment lies at or above it. When
the interval straddles the target the point is run again and its requests pooled (up to
`max_repeats` runs); still straddling, the point estimate decides and the trial says so.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from kvbench.report.core.goodput import verdict, wilson


@dataclass(frozen=True)
class Sample:
    """One run of a point: its good and measured requests, and its goodput (req/s)."""

    good: int
    requests: int
    goodput_rps: float | None = None
    rate_rps: float | None = None  # all its requests per second (good or not)


# (load, repeat index from 0) -> that run's sample
Evaluate = Callable[[float, int], Awaitable[Sample]]


@dataclass
class Trial:
    """A load as the search decided it, over all its runs."""

    load: float
    good: int
    requests: int
    runs: int
    verdict: str  # meets | misses | straddles (decided by the point estimate)
    passed: bool
    attainment_ci: tuple[float, float]
    goodput_rps: float | None  # mean over its runs
    goodput_ci: tuple[float, float] | None = None  # the attainment's interval times the mean request rate


@dataclass
class SearchResult:
    """The highest load found meeting the target, the lowest found missing it, every trial."""

    target: float
    lo: float
    hi: float
    step: float
    highest_meeting: float | None
    lowest_missing: float | None
    note: str
    trials: list[Trial] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def trial_at(self, load: float | None) -> Trial | None:
        return next((t for t in self.trials if t.load == load), None)


async def _decide(evaluate: Evaluate, load: float, target: float, max_repeats: int) -> Trial:
    good = n = 0
    goodputs: list[float] = []
    rates: list[float] = []
    runs = 0
    state = "straddles"
    while runs < max(1, max_repeats) and state == "straddles":
        sample = await evaluate(load, runs)
        runs += 1
        good, n = good + sample.good, n + sample.requests
        if sample.goodput_rps is not None:
            goodputs.append(sample.goodput_rps)
        if sample.rate_rps is not None:
            rates.append(sample.rate_rps)
        state = verdict(good, n, target)
    passed = state == "meets" or (state == "straddles" and n > 0 and good / n >= target)
    mean = sum(goodputs) / len(goodputs) if goodputs else None
    lo, hi = wilson(good, n)
    rate = sum(rates) / len(rates) if rates else None
    span = (lo * rate, hi * rate) if rate is not None else None
    return Trial(load, good, n, runs, state, passed, (lo, hi), mean, span)


def _middle(lo: float, hi: float, integer: bool) -> float:
    return float((int(lo) + int(hi)) // 2) if integer else (lo + hi) / 2


async def search_capacity(
    evaluate: Evaluate,
    lo: float,
    hi: float,
    *,
    target: float,
    step: float = 1.0,
    integer: bool = True,
    max_repeats: int = 3,
) -> SearchResult:
    """Bisect [lo, hi] until the highest meeting and lowest missing loads are `step` apart."""
    result = SearchResult(target, lo, hi, step, None, None, "")
    first = await _decide(evaluate, lo, target, max_repeats)
    result.trials.append(first)
    if not first.passed:
        result.lowest_missing = lo
        result.note = f"even the lowest load ({lo:g}) misses attainment {target:g}"
        return result
    last = await _decide(evaluate, hi, target, max_repeats)
    result.trials.append(last)
    if last.passed:
        result.highest_meeting = hi
        result.note = (
            f"the highest load tried ({hi:g}) still meets attainment {target:g}: capacity is beyond the range"
        )
        return result
    good, bad = lo, hi
    while bad - good > step:
        mid = _middle(good, bad, integer)
        if mid <= good or mid >= bad:
            break
        trial = await _decide(evaluate, mid, target, max_repeats)
        result.trials.append(trial)
        good, bad = (mid, bad) if trial.passed else (good, mid)
    result.highest_meeting, result.lowest_missing = good, bad
    result.note = f"highest load meeting attainment {target:g}: {good:g} (next tried, {bad:g}, misses)"
    return result
