"""What a replay's manifest says it ran: the trace as run (`trace_record`), the load it was
(`replay_load`), and for a window the ideal it would have had with the trace's history cached.

A window (`trace.start_ms` > 0) replays from an empty cache, so a prefix that rows before it
shared is a miss inside it: its own ideal can be far below the whole trace's (a 20 s slice of a
conversation trace: 3.8% against 37.4%). `history_ideal` gives both figures from one pass over
the rows before the window and the window's rows as replayed, in the trace's view (every id may
hit and is stored: the rule of kvbench.traces.lru.expected_reusable_blocks, which the replay's
own ideal uses, so the two agree on a window with nothing before it).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from kvbench.results.schema import LengthRangeInfo, LoadShape, TraceRecord
from kvbench.run.replay.feed import ContextFit, Schedule
from kvbench.scenario.replay import TraceSource
from kvbench.scenario.testtypes import ReplaySection
from kvbench.traces import TraceFile, TraceRow
from kvbench.traces.lru import BlockKeys


def rows_before_window(trace: TraceFile, src: TraceSource) -> Iterator[TraceRow]:
    """The trace's rows before the window (timestamp < start_ms), in file order."""
    if src.start_ms <= 0:
        return
    for row in trace:
        if row.timestamp_ms < src.start_ms:
            yield row
        elif trace.require_monotonic:
            return  # arrival order: nothing later is before the window


@dataclass(frozen=True)
class HistoryIdeal:
    rows_before: int  # rows of the trace before the window
    own: float | None  # the window's ideal from an empty cache (share of prompt tokens)
    with_history: float | None  # the same with every row before it already cached


def _prefix_held(keys: list[int], held: set[int]) -> int:
    hit = 0
    while hit < len(keys) and keys[hit] in held:
        hit += 1
    return hit


def history_ideal(before: Iterable[TraceRow], window: Iterable[TraceRow], block_tokens: int) -> HistoryIdeal:
    """The window's ideal hit ratio from an empty cache and with `before` already cached."""
    keys_of = BlockKeys()  # one numbering: a chain names the same key in both caches
    history: set[int] = set()
    n_before = 0
    for row in before:
        n_before += 1
        history.update(keys_of.of(row.hash_ids))
    own: set[int] = set()
    tokens = alone = with_history = 0
    for row in window:
        keys = keys_of.of(row.hash_ids)
        tokens += row.input_length
        alone += min(_prefix_held(keys, own) * block_tokens, row.input_length)
        with_history += min(_prefix_held(keys, history) * block_tokens, row.input_length)
        own.update(keys)
        history.update(keys)
    if not tokens:
        return HistoryIdeal(n_before, None, None)
    return HistoryIdeal(n_before, alone / tokens, with_history / tokens)


def trace_record(
    trace: TraceFile, test: ReplaySection, fit: ContextFit, sched: Schedule, history: HistoryIdeal | None
) -> TraceRecord:
    """manifest.trace: the file, the rows replayed and left out (and why), the pace, the window."""
    src = test.trace
    before = history.rows_before if history is not None else 0
    return TraceRecord(
        path=str(trace.path),
        format=trace.format,
        block_tokens=trace.block_tokens,
        rows=len(sched.items),
        skipped=fit.skipped,
        skipped_why=fit.skipped_why(),
        clipped=fit.clipped,
        over_context=src.over_context,
        max_model_len=fit.max_model_len,
        schedule=test.schedule,
        speedup=src.speedup,
        start_ms=src.start_ms,
        window_ms=src.window_ms,
        limit=src.limit,
        rows_before=before,
        starts_cold=before > 0,  # nothing primes the cache with the rows before the window (yet)
        ideal_with_history=history.with_history if history is not None and before else None,
    )


def replay_load(sched: Schedule, test: ReplaySection) -> LoadShape:
    """The manifest's load: the trace as run (its rows, schedule, lengths), not the run's probe."""
    load = sched.load
    kinds = {"fixed": "replay-fixed", "concurrent": "replay-concurrent", "rate": "replay-rate"}
    n = len(sched.items)
    return LoadShape(
        kind=kinds[test.schedule],
        concurrency=getattr(load, "concurrency", None) or getattr(load, "max_concurrency", 1),
        rate=getattr(load, "rate", None),
        requests=n,
        prompt_count=n,
        lengths=LengthRangeInfo(
            min=sched.min_prompt_tokens, max=sched.max_prompt_tokens, distribution="trace"
        ),
        max_tokens=sched.max_answer_tokens,
    )
