"""Streaming accumulators for the analysis: reuse distances and the working set over time.

Both keep memory bounded by the trace's unique blocks, never by its rows: reuse distances go
straight into power-of-two bins; the working set keeps only the window being filled.

Reuse distance of a block access = how many requests (rows) since the same block (the same chain
key) was last used, and how long since then in trace time. The LRU capacity question itself is
answered by the simulation (lru.py), which follows the prefix rule that a plain stack-distance
curve would miss.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ReuseHistogram:
    """Counts of block reuses by distance in requests, in bins [2^k, 2^(k+1))."""

    bins: dict[int, int] = field(default_factory=dict)  # k -> count; k = bit_length(distance) - 1
    first_use: int = 0  # accesses to a block never used before (no reuse distance)
    seconds_sum: float = 0.0
    reuses: int = 0
    _last: dict[int, tuple[int, float]] = field(default_factory=dict, repr=False)

    def add(self, keys: list[int], row_index: int, t_ms: float) -> None:
        last = self._last
        bins = self.bins
        for key in keys:
            prev = last.get(key)
            last[key] = (row_index, t_ms)
            if prev is None:
                self.first_use += 1
                continue
            distance = row_index - prev[0]
            k = max(distance, 1).bit_length() - 1
            bins[k] = bins.get(k, 0) + 1
            self.reuses += 1
            self.seconds_sum += max(t_ms - prev[1], 0.0) / 1000.0

    def table(self) -> list[dict[str, int]]:
        """Rows of {lo, hi, reuses}: distance in requests from lo to hi - 1."""
        return [{"lo": 1 << k, "hi": 1 << (k + 1), "reuses": self.bins[k]} for k in sorted(self.bins)]

    def quantile(self, q: float) -> int | None:
        """The bin (its upper edge) holding the q-th reuse; None with no reuse."""
        if not self.reuses:
            return None
        target = q * self.reuses
        run = 0
        for k in sorted(self.bins):
            run += self.bins[k]
            if run >= target:
                return 1 << (k + 1)
        return None


@dataclass
class WorkingSet:
    """Unique blocks per window of trace time, and the cumulative footprint at each window's end.

    Rows are expected in arrival order; a row earlier than the window being filled counts in it.
    """

    window_ms: float
    windows: list[dict[str, float]] = field(default_factory=list)
    _index: int | None = None
    _blocks: set[int] = field(default_factory=set, repr=False)
    _requests: int = 0
    _new: int = 0
    _total: int = 0
    _accesses: int = 0
    _ideal: int = 0
    _lru: int = 0

    def add(self, keys: list[int], new_blocks: int, t_ms: float, ideal_hit: int, lru_hit: int) -> None:
        index = int(t_ms // self.window_ms)
        if self._index is None:
            self._index = index
        elif index > self._index:
            self._flush()
            self._index = index
        self._blocks.update(keys)
        self._requests += 1
        self._new += new_blocks
        self._total += new_blocks
        self._accesses += len(keys)
        self._ideal += ideal_hit
        self._lru += lru_hit

    def _flush(self) -> None:
        if self._index is None or not self._requests:
            return
        self.windows.append(
            {
                "start_s": self._index * self.window_ms / 1000.0,
                "requests": self._requests,
                "unique_blocks": len(self._blocks),
                "new_blocks": self._new,
                "cumulative_blocks": self._total,
                "blocks": self._accesses,
                "ideal_hit_blocks": self._ideal,
                "lru_hit_blocks": self._lru,
            }
        )
        self._blocks = set()
        self._requests = self._new = self._accesses = self._ideal = self._lru = 0

    def close(self) -> list[dict[str, float]]:
        self._flush()
        return self.windows
