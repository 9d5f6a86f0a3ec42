"""What a running phase looks like so far: counters the runner keeps anyway, a bounded TTFT sample,
and the two ways to show it (a rich panel on a terminal, one plain line elsewhere).

Nothing here is on a timed request's path: a finished row costs a few additions and one array
store; the quantiles are read only when the panel redraws (~4 Hz, on rich's own timer) or a plain
line is due, over at most RESERVOIR samples, never over all the rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvbench.engines.adapters.base import TransferCounter
from kvbench.engines.telemetry import SampleKey, Scraper

RESERVOIR = (
    4096  # TTFT samples kept per phase: p99 of a uniform sample of this size is within ~0.3 pct-points
)


class Reservoir:
    """A uniform sample of at most `size` values from a stream (Vitter's algorithm R), seeded."""

    def __init__(self, size: int = RESERVOIR, seed: int = 0) -> None:
        self.values = np.empty(size, dtype=np.float64)
        self.seen = 0
        self._rng = np.random.default_rng(seed)

    def add(self, value: float) -> None:
        size = len(self.values)
        if self.seen < size:
            self.values[self.seen] = value
        else:
            j = int(self._rng.integers(0, self.seen + 1))
            if j < size:
                self.values[j] = value
        self.seen += 1

    def quantiles(self, qs: tuple[float, ...]) -> tuple[float, ...] | None:
        n = min(self.seen, len(self.values))
        if not n:
            return None
        return tuple(float(x) for x in np.quantile(self.values[:n], qs))


@dataclass
class PhaseStats:
    """One phase's running totals: requests planned, finished, failed, in flight, tokens, TTFT."""

    phase: str = ""
    total: int = 0
    done: int = 0
    errors: int = 0
    in_flight: int = 0
    rows: int = 0  # rows written (the request's final attempt), which is what TTFT and hits are over
    prompt_tokens: int = 0
    cached_tokens: int = 0
    t0: float = field(default_factory=time.monotonic)
    ttft_s: Reservoir = field(default_factory=Reservoir)
    noise: Any = None  # the phase's kvbench.noise NoiseHandle: its live_bytes(), read only when drawn
    tier_gb_s: dict[str, float] = field(default_factory=dict)  # "onboard G2": GB/s between the last 2 scrapes

    def add_row(self, ok: bool, ttft_s: float | None, prompt_tokens: int, cached_tokens: int | None) -> None:
        self.rows += 1
        if ok and ttft_s is not None:
            self.ttft_s.add(ttft_s)
        if ok and cached_tokens is not None:  # a server that reports no cached count says nothing of hits
            self.prompt_tokens += prompt_tokens
            self.cached_tokens += cached_tokens

    def rate(self, now: float) -> float:
        return self.done / max(now - self.t0, 1e-9)

    def hit_ratio(self) -> float | None:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None

    def noise_gb_s(self, now: float) -> float | None:
        """Noise bytes per second since the phase's requests started (None: quiet, or known at stop)."""
        live = getattr(self.noise, "live_bytes", None)
        sent = live() if live is not None else None
        return None if sent is None else sent / max(now - self.t0, 1e-9) / 1e9

    def ttft_ms(self) -> tuple[float, float] | None:
        q = self.ttft_s.quantiles((0.5, 0.99))
        return None if q is None else (q[0] * 1e3, q[1] * 1e3)


def stats_text(s: PhaseStats, now: float) -> str:
    """The figures of a plain progress line (without the phase and count)."""
    out = f"{s.rate(now):.2f} req/s  in flight {s.in_flight}  errors {s.errors}"
    ttft = s.ttft_ms()
    if ttft is not None:
        out += f"  TTFT p50 {ttft[0]:.1f} ms p99 {ttft[1]:.1f} ms"
    hit = s.hit_ratio()
    if hit is not None:
        out += f"  hit {hit:.1%}"
    noise = s.noise_gb_s(now)
    if noise is not None:
        out += f"  noise {noise:.2f} GB/s"
    if s.tier_gb_s:
        out += "  " + tiers_text(s.tier_gb_s)
    return out


def tiers_text(rates: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.2f} GB/s" for k, v in sorted(rates.items()))


def plain_line(s: PhaseStats, now: float) -> str:
    return f"[{s.phase}] {s.done}/{s.total}  {stats_text(s, now)}  elapsed {now - s.t0:.1f}s"


def panel(s: PhaseStats, now: float | None = None) -> Any:
    """The terminal's live panel (a rich renderable): built only when rich redraws."""
    from rich.panel import Panel
    from rich.progress_bar import ProgressBar
    from rich.table import Table

    now = time.monotonic() if now is None else now
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row("progress", ProgressBar(total=max(s.total, 1), completed=s.done, width=40))
    grid.add_row("requests", f"{s.done}/{s.total}  ({s.in_flight} in flight)")
    grid.add_row("rate", f"{s.rate(now):.2f} req/s")
    ttft = s.ttft_ms()
    grid.add_row("TTFT p50 / p99", "-" if ttft is None else f"{ttft[0]:.1f} / {ttft[1]:.1f} ms")
    hit = s.hit_ratio()
    grid.add_row("hit ratio", "-" if hit is None else f"{hit:.1%} of prompt tokens cached")
    noise = s.noise_gb_s(now)
    if s.noise is not None:
        grid.add_row("noise", "known when it stops" if noise is None else f"{noise:.2f} GB/s")
    if s.tier_gb_s:
        grid.add_row("tiers", tiers_text(s.tier_gb_s))
    grid.add_row("errors", str(s.errors), style="red" if s.errors else None)
    grid.add_row("elapsed", f"{now - s.t0:.1f} s")
    return Panel(grid, title=f"[bold]{s.phase}", expand=False)


def tier_bytes(samples: dict[SampleKey, float], counters: Sequence[TransferCounter]) -> dict[str, float]:
    """Bytes moved so far per "direction tier", from the engine's byte-unit transfer counters (the
    block- and token-unit ones need the report's sizes: left to the report)."""
    present = {name for name, _ in samples}
    out: dict[str, float] = {}
    for c in counters:
        if c.unit != "bytes" or (c.superseded_by and c.superseded_by in present):
            continue
        for (name, labels), value in samples.items():
            lab = dict(labels)
            if name != c.name or any(lab.get(k, "").lower() != v.lower() for k, v in c.match):
                continue
            key = f"{c.direction} {c.tier or lab.get(c.tier_label or '', '?')}"
            out[key] = out.get(key, 0.0) + value
    return out


@dataclass
class TierRates:
    """GB/s per tier between the last two scrapes of the engine's /metrics."""

    counters: Sequence[TransferCounter] = ()
    last: tuple[float, dict[str, float]] | None = None

    def observe(self, now: float, samples: dict[SampleKey, float]) -> dict[str, float] | None:
        totals = tier_bytes(samples, self.counters)
        prev, self.last = self.last, (now, totals)
        if prev is None or now <= prev[0] or not totals:
            return None
        dt = now - prev[0]
        # a tier that never moved a byte (G1 of an engine without one) is left off the view
        return {k: max(v - prev[1].get(k, 0.0), 0.0) / dt / 1e9 for k, v in totals.items() if v}


@dataclass
class TappedScraper(Scraper):
    """The engine's scraper, each scrape's samples also handed to `tap` (the live view's tier GB/s):
    no scrape of its own, so the view costs the server nothing more."""

    tap: Callable[[dict[SampleKey, float]], None] | None = None

    async def scrape(self, phase: str, http: Any = None) -> dict[SampleKey, float] | None:
        samples = await super().scrape(phase, http)
        if samples is not None and self.tap is not None:
            self.tap(samples)
        return samples
