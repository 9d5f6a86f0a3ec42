"""Progress for long runs: a rich bar on a terminal, plain log lines elsewhere or with --quiet.

Updated once per finished request, never per chunk: rendering must not cost
the load generator time on the hot path (rich redraws on its own timer).
"""

from __future__ import annotations

import sys
import time
from typing import Any


class Progress:
    def __init__(self, quiet: bool = False, plain: bool | None = None) -> None:
        self.quiet = quiet
        self.plain = (not sys.stderr.isatty()) if plain is None else plain
        self._rich: Any = None
        self._task: Any = None
        self.phase = ""
        self.total = 0
        self.done = 0
        self.errors = 0
        self.in_flight = 0
        self._t0 = 0.0
        self._last_log = 0.0

    def log(self, message: str) -> None:
        if self.quiet:
            return
        if self._rich is not None:
            self._rich.console.print(message, highlight=False, markup=False)
        else:
            print(message, file=sys.stderr, flush=True)

    def start_phase(self, phase: str, total: int) -> None:
        self.phase, self.total, self.done, self.errors, self.in_flight = phase, total, 0, 0, 0
        self._t0 = self._last_log = time.monotonic()
        if self.quiet:
            return
        if self.plain:
            self.log(f"[{phase}] {total} requests")
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as RichProgress

        self._rich = RichProgress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            transient=False,
            refresh_per_second=4,
            console=None,
        )
        self._rich.start()
        self._task = self._rich.add_task(phase, total=total, stats="")

    def sending(self) -> None:
        """The phase's requests start now (its noise is up, its workers ready): req/s counts from here."""
        self._t0 = self._last_log = time.monotonic()
        if self._rich is not None:
            self._rich.reset(self._task, total=self.total, stats="")

    def request_started(self) -> None:
        self.in_flight += 1

    def request_done(self, ok: bool) -> None:
        self.in_flight -= 1
        self.done += 1
        if not ok:
            self.errors += 1
        if self.quiet or not self.total:
            return  # requests outside a phase (probes) are not progress
        elapsed = max(time.monotonic() - self._t0, 1e-9)
        stats = f"{self.done / elapsed:.2f} req/s  in flight {self.in_flight}  errors {self.errors}"
        if self._rich is not None:
            self._rich.update(self._task, completed=self.done, stats=stats)
        elif time.monotonic() - self._last_log >= 5 or self.done == self.total:
            self._last_log = time.monotonic()
            self.log(f"[{self.phase}] {self.done}/{self.total}  {stats}  elapsed {elapsed:.1f}s")

    def end_phase(self) -> None:
        self.total = 0
        if self._rich is not None:
            self._rich.stop()
            self._rich = None
