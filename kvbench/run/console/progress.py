"""Progress for long runs: a rich live panel on a terminal, plain log lines elsewhere or with --quiet,
and (with --serve-metrics) the same figures as Prometheus metrics.

Updated once per finished request and once per written row, never per chunk: a few counter
additions (kvbench.run.console.live). The panel is redrawn by rich on its own timer at 4 Hz from those
counters, so rendering never runs on a timed request's path; a plain line is due every 5 s.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

from kvbench.redact import redact_text
from kvbench.run.console.live import PhaseStats, TierRates, panel, plain_line

if TYPE_CHECKING:
    from kvbench.client import RequestRecord
    from kvbench.telemetry.serve_metrics import RunMetrics

PLAIN_EVERY_S = 5.0


class Progress:
    def __init__(
        self, quiet: bool = False, plain: bool | None = None, metrics: RunMetrics | None = None
    ) -> None:
        self.quiet = quiet
        self.plain = (not sys.stderr.isatty()) if plain is None else plain
        self.metrics = metrics
        self._live: Any = None
        self.stats = PhaseStats()
        self.tiers = TierRates()  # Run sets its counters: the adapter's transfer_counters
        self._last_log = 0.0

    # the counters other modules read (the sweep's and the tests'): the current phase's
    @property
    def phase(self) -> str:
        return self.stats.phase

    @property
    def total(self) -> int:
        return self.stats.total

    @property
    def done(self) -> int:
        return self.stats.done

    @property
    def errors(self) -> int:
        return self.stats.errors

    @property
    def in_flight(self) -> int:
        return self.stats.in_flight

    def log(self, message: str) -> None:
        if self.quiet:
            return
        message = redact_text(message)  # a server's or exporter's words may echo a credential
        if self._live is not None:
            self._live.console.print(message, highlight=False, markup=False)
        else:
            print(message, file=sys.stderr, flush=True)

    def start_phase(self, phase: str, total: int) -> None:
        in_flight = self.stats.in_flight  # a probe still out belongs to no phase, but is in flight
        self.stats = PhaseStats(phase=phase, total=total, in_flight=in_flight)
        self._last_log = self.stats.t0
        if self.metrics is not None:
            self.metrics.start_phase(phase, total)
        if self.quiet:
            return
        if self.plain:
            self.log(f"[{phase}] {total} requests")
            return
        from rich.console import Console
        from rich.live import Live

        stats = self.stats
        self._live = Live(
            get_renderable=lambda: panel(stats),
            console=Console(stderr=True),  # beside the plain lines and logs: stdout stays the results'
            refresh_per_second=4,
            transient=False,
        )
        self._live.start()

    def sending(self, noise: Any = None) -> None:
        """The phase's requests start now (its noise is up, its workers ready): req/s counts from here.
        `noise`: the phase's NoiseHandle, read for its bytes only when the figures are drawn."""
        self.stats.t0 = self._last_log = time.monotonic()
        self.stats.noise = noise
        if noise is not None and self.metrics is not None:
            self.metrics.add_noise(noise)

    def request_started(self) -> None:
        self.stats.in_flight += 1
        if self.metrics is not None:
            self.metrics.in_flight.inc()

    def request_done(self, ok: bool) -> None:
        s = self.stats
        # a row from a load worker, or one that ended after its phase's stats were replaced, never
        # passed request_started here: the count stays a count (never below zero)
        was = s.in_flight
        s.in_flight = max(was - 1, 0)
        s.done += 1
        if not ok:
            s.errors += 1
        if self.metrics is not None and was > 0:
            self.metrics.in_flight.dec()
        if self.quiet or not s.total or self._live is not None:
            return  # requests outside a phase (probes) are not progress; the panel redraws itself
        now = time.monotonic()
        if now - self._last_log >= PLAIN_EVERY_S or s.done == s.total:
            self._last_log = now
            self.log(plain_line(s, now))

    def row(self, rec: RequestRecord) -> None:
        """A request's row was written: its TTFT and cached tokens count towards the phase's figures."""
        ttft_s = None
        if rec.first_token_ns is not None and rec.sent_ns is not None:
            ttft_s = (rec.first_token_ns - rec.sent_ns) / 1e9
        if rec.phase == self.stats.phase:
            self.stats.add_row(rec.ok, ttft_s, rec.prompt_tokens, rec.cached_tokens)
        if self.metrics is not None:
            self.metrics.row(rec.phase, rec.status, ttft_s, rec.prompt_tokens, rec.cached_tokens)

    def scraped(self, samples: dict[Any, float]) -> None:
        """An engine scrape (phase boundary or the sampler's tick): the tiers' GB/s since the last."""
        rates = self.tiers.observe(time.monotonic(), samples)
        if rates is not None:
            self.stats.tier_gb_s = rates

    def end_phase(self) -> None:
        if self._live is not None:  # its last frame first, while the phase still has its total
            self._live.stop()
            self._live = None
        self.stats.total = 0
