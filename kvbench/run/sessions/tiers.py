"""Which tier served a turn: the mock's ground truth, or the engine's per-tier counters.

A conversation turn is only interesting with its tier: a returning user served from G3/G4 in a
fraction of a second is what an offload tier is for. Two sources, both exact or nothing:
- the embedded mock's ground truth (one JSON line per request, written by the mock process when
  the request ends, flushed line by line): `GroundTruthTail` reads new lines as they come and
  looks a request up by its X-Request-Id;
- an engine's per-tier counter (`EngineAdapter.tier_counter`, e.g. vLLM's
  prompt_tokens_by_source): scraped around a turn, its delta is the turn's only when no other
  timed request was sent between the first scrape and the second (`CounterWindow`); otherwise
  the turn is `overlapped` and no tier is claimed.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

GT_WAIT_S = 0.5  # the mock writes a request's line just after its last byte: wait this long at most


class _Adapter(Protocol):
    @property
    def tier_counter(self) -> tuple[str, str] | None: ...

    def tier_hits(self, deltas: Any) -> dict[str, float]: ...


class GroundTruthTail:
    """Incremental reader of the mock's ground-truth JSONL; request id -> its last line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""
        self.by_id: dict[str, dict[str, Any]] = {}

    def _read_new(self) -> None:
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return
        self._offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()  # an unfinished last line waits for the next read
        for line in lines:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and "request_id" in row:
                self.by_id[str(row["request_id"])] = row

    async def lookup(self, request_id: str, wait_s: float = GT_WAIT_S) -> dict[str, Any] | None:
        """The request's ground-truth line, waiting briefly for the mock to write it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            self._read_new()
            row = self.by_id.get(request_id)
            if row is not None or loop.time() >= deadline:
                return row
            await asyncio.sleep(0.005)


@dataclass
class SendCounter:
    """Counts timed sends and requests in flight, to tell a turn that had the server to itself."""

    sends: int = 0
    in_flight: int = 0
    max_in_flight: int = 0

    def started(self) -> int:
        self.sends += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        return self.in_flight

    def ended(self) -> None:
        self.in_flight -= 1


class Scrape(Protocol):
    async def __call__(self) -> dict[Any, float] | None: ...


@dataclass
class CounterWindow:
    """Per-tier counter deltas around one turn, kept only when nothing else was sent meanwhile."""

    adapter: _Adapter
    scrape: Scrape
    sends: SendCounter
    _before: dict[Any, float] | None = None
    _sends_at_start: int = 0

    @property
    def usable(self) -> bool:
        return self.adapter.tier_counter is not None

    async def open(self) -> None:
        if self.usable and self.sends.in_flight == 0:
            self._sends_at_start = self.sends.sends
            self._before = await self.scrape()
        else:
            self._before = None

    async def close(self) -> tuple[dict[str, float], str]:
        """(tokens by tier, source): source `counters` when exact, else overlapped/unavailable."""
        if not self.usable:
            return {}, "unavailable"
        if self._before is None or self.sends.sends != self._sends_at_start + 1:
            return {}, "overlapped"
        after = await self.scrape()
        if after is None or self.sends.sends != self._sends_at_start + 1:
            return {}, "overlapped"
        from kvbench.engines.telemetry import counter_deltas

        hits = self.adapter.tier_hits(counter_deltas(self._before, after))
        return {k: v for k, v in hits.items() if v}, "counters"
