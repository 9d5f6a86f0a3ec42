"""What the runner sees of a running noise generator: NoiseHandle, its per-second rows and summary.

Every backend owns one NoiseHandle. It writes what the generator achieved, once a second, as
noise.jsonl rows (`t_ns`, `phase`, `client`, `bytes`, `bytes_per_s`, plus a `client: "total"`
row), and its `summary()` goes into the manifest: totals, mean and peak rate, whether the target
rate was reached, and a warning when the generator never reached it, sent nothing or had problems.
A backend that runs elsewhere (other processes, other machines) feeds the same handle, so rows and
summary look the same whatever generated the bytes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

REACHED_FRACTION = 0.9  # mean >= 90% of the target counts as reaching it


class RowWriter(Protocol):
    """Where the per-second rows go: kvbench.results.JsonlWriter, or anything with `write(row)`."""

    def write(self, row: dict[str, Any]) -> None: ...


@dataclass
class NoiseHandle:
    """What the runner sees of a running generator; `summary()` goes into the manifest."""

    kind: str
    config: dict[str, Any]
    phase: str
    origin_ns: int
    writer: RowWriter | None = None
    target_bytes_per_s: float | None = None
    active: bool = False
    started_ns: int | None = None
    stopped_ns: int | None = None
    clients: list[dict[str, Any]] = field(default_factory=list)
    total_bytes: int = 0
    duration_s: float | None = None  # set by a generator that knows better than the wall clock
    problems: list[str] = field(default_factory=list)
    peak_bytes_per_s: float = 0.0
    intervals: int = 0
    live_bytes: Callable[[], int | None] | None = None  # bytes so far, while running (None: unknown)

    def now_ns(self) -> int:
        return time.perf_counter_ns() - self.origin_ns

    def record(self, t_ns: int, dt_s: float, per_client: dict[str, int], *, full: bool = True) -> None:
        """One interval: a row per client and a total row. `full` intervals count towards the peak."""
        if dt_s <= 0:
            return
        total = 0
        for client, nbytes in per_client.items():
            total += nbytes
            self._row(t_ns, client, nbytes, dt_s)
        self._row(t_ns, "total", total, dt_s)
        self.intervals += 1
        if full:
            self.peak_bytes_per_s = max(self.peak_bytes_per_s, total / dt_s)

    def _row(self, t_ns: int, client: str, nbytes: int, dt_s: float) -> None:
        if self.writer is None:
            return
        self.writer.write(
            {
                "t_ns": int(t_ns),
                "phase": self.phase,
                "client": client,
                "bytes": int(nbytes),
                "bytes_per_s": round(nbytes / dt_s, 1),
            }
        )

    def summary(self) -> dict[str, Any]:
        """Best after the `async with` block; taken inside it, it covers the noise so far."""
        warnings = list(self.problems)
        total: int | None = self.total_bytes
        duration = self.duration_s
        if self.started_ns is not None and self.stopped_ns is None:  # still running
            duration = (self.now_ns() - self.started_ns) / 1e9
            total = self.live_bytes() if self.live_bytes is not None else None
            if total is None:
                warnings.append(
                    f"{self.kind} reports its totals only when stopped: summary() taken while running"
                )
        elif duration is None:
            duration = (
                (self.stopped_ns - self.started_ns) / 1e9
                if self.started_ns is not None and self.stopped_ns is not None
                else 0.0
            )
        nbytes = total or 0
        mean = nbytes / duration if duration and duration > 0 else 0.0
        peak = max(self.peak_bytes_per_s, mean) if nbytes else 0.0
        reached: bool | None = None
        if self.target_bytes_per_s is not None and self.started_ns is not None and total is not None:
            reached = mean >= REACHED_FRACTION * self.target_bytes_per_s
            if not reached:
                warnings.append(
                    f"noise never reached its target rate: {format_rate(mean)} of "
                    f"{format_rate(self.target_bytes_per_s)}"
                )
        if self.kind != "none" and self.started_ns is not None and total == 0:
            warnings.append("noise generator sent nothing")
        return {
            "kind": self.kind,
            "config": self.config,
            "clients": [dict(c) for c in self.clients],
            "total_bytes": nbytes,
            "duration_s": round(duration or 0.0, 3),
            "mean_bytes_per_s": round(mean, 1),
            "peak_bytes_per_s": round(peak, 1),
            "target_bytes_per_s": self.target_bytes_per_s,
            "reached_target": reached,
            "warning": "; ".join(dict.fromkeys(warnings)) or None,
        }


def format_rate(bytes_per_s: float) -> str:
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if bytes_per_s >= scale:
            return f"{bytes_per_s / scale:.3g} {unit}"
    return f"{bytes_per_s:.0f} B/s"
