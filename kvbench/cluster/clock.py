"""A remote process's clock offset to the driver, estimated the NTP way: round trips, midpoint.

Durations (TTFT, inter-token gaps, bytes per second) are measured on one machine's monotonic
clock and need no offset. Placing a remote event on the run's timeline does: the driver asks the
remote side for its `perf_counter_ns` a few times; for each round trip (sent at t0, answered at
t1, remote reading r), the remote reading is taken to have happened at the midpoint, so
offset = (t0 + t1) / 2 - r, wrong by at most half the round trip. The round with the shortest
round trip wins; its half round trip is the recorded uncertainty.

    driver_ns = remote_ns + offset_ns
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

ROUNDS = 5


@dataclass(frozen=True)
class ClockOffset:
    """driver perf_counter_ns = remote perf_counter_ns + offset_ns, within +- uncertainty_ns."""

    offset_ns: int
    rtt_ns: int
    rounds: int

    @property
    def uncertainty_ns(self) -> int:
        return self.rtt_ns // 2

    def to_driver(self, remote_ns: int) -> int:
        return remote_ns + self.offset_ns

    def record(self) -> dict[str, Any]:
        return {
            "clock_offset_ns": self.offset_ns,
            "clock_rtt_ns": self.rtt_ns,
            "clock_uncertainty_ns": self.uncertainty_ns,
            "clock_rounds": self.rounds,
        }


def estimate_offset(samples: Sequence[tuple[int, int, int]]) -> ClockOffset:
    """From (t0_driver, remote, t1_driver) round trips: the midpoint of the shortest one."""
    if not samples:
        raise ValueError("no round trip to estimate a clock offset from")
    t0, remote, t1 = min(samples, key=lambda s: s[2] - s[0])
    return ClockOffset(offset_ns=(t0 + t1) // 2 - remote, rtt_ns=t1 - t0, rounds=len(samples))


async def measure_offset(read_remote: Callable[[], Awaitable[int]], rounds: int = ROUNDS) -> ClockOffset:
    """Round trips to `read_remote` (an awaitable of the remote perf_counter_ns), one at a time."""
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        remote = await read_remote()
        t1 = time.perf_counter_ns()
        samples.append((t0, int(remote), t1))
    return estimate_offset(samples)
