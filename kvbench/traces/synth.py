"""`trace synth`: a seeded trace from SynthControls, streamed to a file in any format.

Every prompt is a list of segments (a system prompt, a document, a user message, an answer), each
with its own identity; a block's id is numbered from (the previous block's id, the pieces of
segments it holds), so two prompts share exactly the blocks of their common token prefix, chained
as Mooncake's ids are. Conversations interleave in arrival order (a heap of pending next turns).
One numpy Generator, seeded, draws everything, in a fixed order: the same controls give the same
bytes (gzip is written with mtime 0).
"""

from __future__ import annotations

import gzip
import heapq
import io
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import numpy as np

from kvbench.traces.controls import Lengths, SynthControls
from kvbench.traces.formats import FORMATS
from kvbench.traces.rows import TraceRow

Segment = tuple[tuple[str, int], int]  # ((kind, index), tokens)


class BlockChain:
    """Dense block ids for prompts made of segments; equal token prefixes give equal ids."""

    def __init__(self, block_tokens: int) -> None:
        self.block_tokens = block_tokens
        self._table: dict[tuple[int, tuple[tuple[str, int, int, int], ...]], int] = {}

    def ids(self, segments: list[Segment]) -> tuple[int, ...]:
        bt = self.block_tokens
        out: list[int] = []
        prev = -1
        pieces: list[tuple[str, int, int, int]] = []
        room = bt
        for (kind, index), length in segments:
            start = 0
            while start < length:
                take = min(room, length - start)
                pieces.append((kind, index, start, start + take))
                start += take
                room -= take
                if room == 0:
                    prev = self._id(prev, pieces)
                    out.append(prev)
                    pieces, room = [], bt
        if pieces:
            out.append(self._id(prev, pieces))
        return tuple(out)

    def _id(self, prev: int, pieces: list[tuple[str, int, int, int]]) -> int:
        key = (prev, tuple(pieces))
        got = self._table.get(key)
        if got is None:
            got = self._table[key] = len(self._table)
        return got


@dataclass(order=True)
class _Pending:
    time_ms: float
    seq: int
    session: str = field(compare=False)
    history: list[Segment] = field(compare=False)
    turn: int = field(compare=False)
    turns: int = field(compare=False)
    parent: str = field(compare=False)


class _Draws:
    """Every random draw, from one Generator."""

    def __init__(self, c: SynthControls) -> None:
        self.c = c
        self.rng = np.random.default_rng(c.seed)
        d = c.documents
        self.doc_tokens = [
            self._clip(x, c.max_input_tokens) for x in self._lognormal(d.mean_tokens, d.sigma, d.count)
        ]
        ranks = np.arange(1, d.count + 1, dtype=float)
        # popularity as a cumulative table: one uniform draw and a binary search per document pick
        self.doc_cdf = np.cumsum(ranks**-d.zipf_s)

    def _lognormal(self, mean: float, sigma: float, n: int) -> np.ndarray:
        return self.rng.lognormal(np.log(mean) - sigma**2 / 2, sigma, n)

    @staticmethod
    def _clip(x: float, top: int) -> int:
        return int(min(max(round(x), 1), top))

    def length(self, lengths: Lengths) -> int:
        return self._clip(self._lognormal(lengths.mean_tokens, lengths.sigma, 1)[0], lengths.max_tokens)

    def gap_ms(self) -> float:
        a = self.c.arrival
        mean_s = 1.0 / a.rate_per_s
        if a.process == "poisson":
            return float(self.rng.exponential(mean_s)) * 1000.0
        shape = 1.0 / a.cv**2
        return float(self.rng.gamma(shape, mean_s / shape)) * 1000.0

    def opening(self) -> tuple[list[Segment], int]:
        """A new conversation's shared segments and its number of turns."""
        c, rng = self.c, self.rng
        segments: list[Segment] = []
        if c.system_prompt.tokens and rng.random() < c.system_prompt.share:
            segments.append((("system", int(rng.integers(c.system_prompt.variants))), c.system_prompt.tokens))
        if c.documents.count and rng.random() < c.documents.share:
            doc = min(
                int(np.searchsorted(self.doc_cdf, rng.random() * self.doc_cdf[-1], side="right")),
                c.documents.count - 1,
            )
            segments.append((("doc", doc), self.doc_tokens[doc]))
        turns = 1
        if rng.random() < c.sessions.share:
            turns = 1 + int(rng.geometric(1.0 / (c.sessions.mean_turns - 1.0)))
        return segments, turns

    def think_ms(self) -> float:
        return (
            float(self.rng.exponential(self.c.sessions.think_time_s)) * 1000.0
            if self.c.sessions.think_time_s
            else 0.0
        )


def _cut(segments: list[Segment], limit: int) -> list[Segment]:
    out: list[Segment] = []
    left = limit
    for seg, length in segments:
        if left <= 0:
            break
        out.append((seg, min(length, left)))
        left -= length
    return out


def synthesize(c: SynthControls) -> Iterator[TraceRow]:
    """The trace's rows, in arrival order."""
    draws = _Draws(c)
    chain = BlockChain(c.block_tokens or FORMATS[c.format].block_tokens)
    pending: list[_Pending] = []
    next_new = draws.gap_ms()
    conversations = 0
    for line in range(1, c.rows + 1):
        if pending and pending[0].time_ms <= next_new:
            p = heapq.heappop(pending)
        else:
            opening, turns = draws.opening()
            p = _Pending(next_new, line, f"c{conversations}", opening, 1, turns, "")
            conversations += 1
            next_new += draws.gap_ms()
        if c.duration_s is not None and p.time_ms > c.duration_s * 1000.0:
            return
        prompt = _cut([*p.history, (("user", line), draws.length(c.user))], c.max_input_tokens)
        output = draws.length(c.output)
        request_id = str(line)
        yield TraceRow(
            line,
            float(round(p.time_ms)),
            sum(n for _, n in prompt),
            output,
            chain.ids(prompt),
            session=p.session,
            parent=p.parent or None,
            turn=p.turn,
            request_id=request_id,
        )
        if p.turn < p.turns:
            history = [*prompt, (("answer", line), output)]
            nxt = _Pending(
                p.time_ms + draws.think_ms(), line, p.session, history, p.turn + 1, p.turns, request_id
            )
            heapq.heappush(pending, nxt)


def write_trace(rows: Iterator[TraceRow], path: Path, format: str) -> int:
    """Write rows as JSONL in `format` (gzip when the name ends in .gz); returns the rows written."""
    write = FORMATS[format].write
    n = 0
    with _create(path) as fh:
        for row in rows:
            fh.write(json.dumps(write(row), separators=(",", ":")) + "\n")
            n += 1
    return n


@contextmanager
def _create(path: Path) -> Iterator[IO[str]]:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.name.endswith(".gz"):
        with path.open("w", encoding="utf-8", newline="\n") as fh:
            yield fh
        return
    # mtime 0 and no name in the header: the same rows give the same bytes
    with path.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        text = io.TextIOWrapper(gz, encoding="utf-8", newline="\n")
        yield text
        text.flush()
        text.detach()
