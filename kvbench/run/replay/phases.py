"""The replay test: a trace's rows sent token-exact on its own schedule; hits beside the trace's ideal.

One phase, `replay`, from a reset and a fresh per-run salt (cold by construction: the salt opens
every root's first block). The rows stream from the file twice: once for the schedule (arrival
offsets, context check; kvbench.run.replay.feed), once through kvbench.traces.realise into a
bounded feed, so memory holds `test.realise_ahead` prompts, never the trace. Requests start
through the load-backend seam (fixed and rate: the open loop, paced; concurrent: the closed loop).

Multi-turn rows (Bailian parent_chat_id, WEKA sessions) replay in trace order like any other: the
shared history is already in their hash_ids, so a later turn's reuse is the trace's prefix
structure, not something the replay has to rebuild (and the trace's think time is its timestamps).

Each request writes a replay.jsonl row (kvbench.results.replay_rows) beside its requests.jsonl row:
the trace line, the expected reusable tokens (ideal, and in the engine's blocks where known), the
scheduled offset; the run writes replay.json with the trace, the calibration and the lateness.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from kvbench.client import RequestRecord
from kvbench.load.backends import RemoteLoadBackend, load_backend
from kvbench.load.prompts import VOCAB, Prompt
from kvbench.load.schedule import WorkItem
from kvbench.results import write_json_atomic
from kvbench.results.replay_rows import REPLAY_ROWS, REPLAY_SUMMARY, ReplayRow
from kvbench.results.schema import Label
from kvbench.run.context import Run, phase_entry
from kvbench.run.replay.feed import (
    ContextFit,
    PromptFeed,
    Schedule,
    context_line,
    schedule_items,
    selected_rows,
)
from kvbench.run.replay.record import history_ideal, replay_load, rows_before_window, trace_record
from kvbench.scenario.testtypes import ReplaySection
from kvbench.traces import TraceRow, open_trace
from kvbench.traces.realise import BlockText, Calibration, Realised, calibrate, prompt_text, realise

PHASE = "replay"
Done = Callable[[RequestRecord, Realised, float, int], None]  # a request's row is in: its replay row
SAMPLE_CHECKED = 8  # realised prompts counted by the server's /tokenize before the phase


def section(run: Run) -> ReplaySection:
    assert isinstance(run.scn.test, ReplaySection), run.scn.test.kind
    return run.scn.test


def engine_block(run: Run, test: ReplaySection, block_tokens: int) -> int | None:
    """The server's own block size where known (the scenario, else the embedded mock's profile),
    when it divides the trace's blocks (else only the trace's ideal can be given)."""
    block = test.engine_block_tokens
    if block is None and run.target.mock is not None:
        from kvbench.mock.profiles import load_profile

        overrides = {**run.scn.test.mock_defaults, **run.scn.target.mock_overrides}
        block = getattr(load_profile(run.scn.target.mock_profile, overrides), "block_tokens", None)
    return block if block and block_tokens % block == 0 else None


async def check_sample(
    run: Run, rows: Iterator[TraceRow], blocks: BlockText, cal: Calibration
) -> dict[str, Any]:
    """Count the first prompts with the server's tokenizer: token-exact, or how far off."""
    if run.token_counter is None:
        return {"checked": 0, "exact": None, "source": "estimate"}
    sample: list[tuple[str, int]] = []
    for row in rows:
        sample.append(prompt_text(row, blocks, cal.special_tokens))
        if len(sample) == SAMPLE_CHECKED:
            break
    counts = await run.token_counter([t for t, _ in sample])
    off = [(c, want) for c, (_, want) in zip(counts, sample, strict=True) if c != want]
    if off:
        run.progress.log(
            f"replay: {len(off)} of {len(sample)} realised prompts are not token-exact "
            f"(server counts {off[0][0]}, expected {off[0][1]}): the tokenizer merges words across blocks"
        )
    return {"checked": len(sample), "exact": len(sample) - len(off), "source": "server"}


async def run_replay(run: Run, prompts: list[Prompt]) -> None:
    """The replay plan (`prompts`, the small set every run builds, is not used: the trace is the set)."""
    scn, test = run.scn, section(run)
    src = test.trace
    trace = open_trace(
        src.resolved(),
        format=src.format,
        block_tokens=src.block_tokens,
        require_monotonic=test.schedule == "fixed",
    )

    def answer(row: TraceRow) -> int:
        return row.output_length if test.output_tokens == "trace" else scn.output.max_tokens

    def fit() -> ContextFit:
        return ContextFit(run.target.max_model_len, src.over_context, trace.block_tokens, str(trace.path))

    def rows() -> Iterator[TraceRow]:  # every later pass over the trace sees the rows the schedule did
        return fit().rows(selected_rows(trace, test), answer)

    counted = fit()
    sched = schedule_items(
        counted.rows(selected_rows(trace, test), answer), test, str(trace.path), scn.output.max_tokens
    )
    before = rows_before_window(trace, src)
    history = history_ideal(before, rows(), trace.block_tokens) if src.start_ms > 0 else None
    run.rd.update(load=replay_load(sched, test), trace=trace_record(trace, test, counted, sched, history))
    if (fitted := context_line(counted.record())) is not None:  # once, with the reasons; the end line counts
        run.progress.log(fitted)
    cal = await calibrate(VOCAB, run.token_counter)
    if cal.dropped_words:
        run.progress.log(
            f"replay: {len(cal.dropped_words)} vocabulary words are not one token here; not used"
        )
    await run.reset()
    salt = run.new_salt()
    blocks = BlockText(cal.words, trace.block_tokens, test.seed, salt)
    sample = await check_sample(run, rows(), blocks, cal)
    eblock = engine_block(run, test, trace.block_tokens)
    if test.workers:  # load workers for this test's own schedule; finish() records where they ran
        run.load_backend = load_backend(
            "ray" if run.scn.cluster.backend == "ray" else "processes", workers=test.workers
        )
    realised = realise(rows(), blocks, cal, eblock)
    # a closed loop has no schedule to fall behind: its lateness (worker free -> sent) is reported only
    late = Lateness(test.late_warn_ms if test.schedule != "concurrent" else float("inf"), run)
    with run.rd.writer(REPLAY_ROWS) as out:

        def done(rec: RequestRecord, r: Realised, offset_s: float, max_tokens: int) -> None:
            out.write(replay_row(rec.request_id, r, offset_s, max_tokens).model_dump())
            late.saw(rec.sent_ns, rec.scheduled_ns)

        try:
            prime_s = await send_phase(run, test, sched, realised, done, cal.source)
        finally:
            if test.workers:
                await run.load_backend.aclose()  # type: ignore[attr-defined]
    summary = {
        "trace": {"path": str(trace.path), "format": trace.format, "block_tokens": trace.block_tokens},
        "selection": src.model_dump(exclude={"path"}),
        "schedule": test.schedule,
        "requests": len(sched.items),
        "context": counted.record(),
        "span_s": sched.span_s,
        "engine_block_tokens": eblock,
        "salt": "per_run" if salt else "none",
        "calibration": {
            "special_tokens": cal.special_tokens,
            "source": cal.source,
            "dropped_words": list(cal.dropped_words),
        },
        "token_exact_sample": sample,
        "load_backend": run.load_backend.name,
        "realise_ahead": test.realise_ahead,
        "prime_s": round(prime_s, 3),
        "lateness": late.summary(),
    }
    write_json_atomic(run.rd.path / REPLAY_SUMMARY, summary)
    run.summary_lines = replay_lines(run, summary)


async def send_phase(
    run: Run, test: ReplaySection, sched: Schedule, realised: Iterator[Realised], done: Done, source: str
) -> float:
    """The one phase: locally through the bounded feed, or prepared for a remote backend; returns
    the seconds spent priming the feed (before the phase's clock)."""
    scn = run.scn
    label = Label.CACHED  # reuse inside the run is the point; the salt keeps what came before out

    def max_tokens(r: Realised) -> int:
        return max(1, r.row.output_length) if test.output_tokens == "trace" else scn.output.max_tokens

    backend = run.load_backend
    feed: PromptFeed | None = None
    t0 = time.perf_counter()
    work: Any
    if isinstance(backend, RemoteLoadBackend):
        from kvbench.run.replay.remote import ReplayRemotePhase

        work = ReplayRemotePhase(
            run,
            name=PHASE,
            label=label,
            realised=realised,
            max_tokens=max_tokens,
            done=done,
            count_source=source,
        )
        await backend.ready(work, run.origin_ns)
    else:
        feed = PromptFeed(realised, test.realise_ahead)
        await feed.start()

        async def issue(item: WorkItem, scheduled_ns: int) -> None:
            assert feed is not None
            r = await feed.take(item.index)
            rec = await run.issue(
                phase=PHASE,
                label=label,
                rep=0,
                prompt=Prompt(r.index, r.row.input_length, "", r.tokens, source),
                text=r.text,
                scheduled_ns=scheduled_ns,
                max_tokens=max_tokens(r),
            )
            done(rec, r, item.scheduled_offset_s, max_tokens(r))

        work = issue

    prime_s = time.perf_counter() - t0
    run.progress.start_phase(PHASE, len(sched.items))
    before = await run.phase_boundary(PHASE)
    started = run.client.now()
    run.progress.sending()
    try:
        async with run.scraper.during(PHASE, scn.telemetry.interval_s):
            await backend.run(sched.load, sched.items, work)
            ended = run.client.now()  # before the sampler's closing read, which is not phase time
    finally:
        run.progress.end_phase()
        if feed is not None:
            await feed.aclose()
    run.end_metrics(PHASE, before, await run.scraper.scrape(PHASE))
    remote = backend.phases if isinstance(backend, RemoteLoadBackend) else None
    if remote:  # the span the workers sent in, as the throughput test counts it
        started = remote[-1].get("started_ns") or started
        ended = remote[-1].get("ended_ns") or ended
    entry = phase_entry(
        run, PHASE, label, 0, started, ended=ended, load_backend=remote[-1] if remote else None
    )
    run.add_phase(entry)
    return prime_s


def replay_row(request_id: str, r: Realised, offset_s: float, max_tokens: int) -> ReplayRow:
    row = r.row
    return ReplayRow(
        request_id=request_id,
        phase=PHASE,
        index=r.index,
        trace_line=row.line,
        session=row.session,
        timestamp_ms=row.timestamp_ms,
        scheduled_offset_s=offset_s,
        input_length=row.input_length,
        output_length=row.output_length,
        max_tokens=max_tokens,
        blocks=len(row.hash_ids),
        prompt_tokens=r.tokens,
        expected_blocks=r.expected_blocks,
        expected_cached_tokens=r.expected_cached_tokens,
        engine_expected_tokens=r.engine_expected_tokens,
    )


class Lateness:
    """Dispatch lateness (sent - scheduled) as requests go: one warning the first time the client is
    behind by more than the threshold, the distribution at the end."""

    def __init__(self, warn_ms: float, run: Run) -> None:
        self.warn_ms, self.run = warn_ms, run
        self.ms: list[float] = []
        self.warned = False

    def saw(self, sent_ns: int | None, scheduled_ns: int | None) -> None:
        if sent_ns is None or scheduled_ns is None:
            return
        ms = (sent_ns - scheduled_ns) / 1e6
        self.ms.append(ms)
        if ms > self.warn_ms and not self.warned:
            self.warned = True
            self.run.progress.log(
                f"replay: warning: the client is {ms:.1f} ms behind the schedule (request {len(self.ms)}); "
                "lateness is recorded per request (dispatch_delay_ms)"
            )

    def summary(self) -> dict[str, Any]:
        if not self.ms:
            return {"n": 0}
        arr = np.asarray(self.ms)
        p50, p99 = np.percentile(arr, [50, 99]).tolist()
        out: dict[str, Any] = {"n": len(arr), "p50_ms": p50, "p99_ms": p99, "max_ms": float(arr.max())}
        out["behind"] = p99 > self.warn_ms
        if out["behind"]:
            out["warning"] = (
                f"dispatch lateness p99 {p99:.1f} ms > {self.warn_ms:g} ms: the client fell behind"
            )
        return out


def replay_lines(run: Run, summary: dict[str, Any]) -> list[str]:
    """The console lines at the end of a replay: requests, ideal vs reported reuse, lateness."""
    recs = [r for r in run.records if r.phase == PHASE]
    ok = [r for r in recs if r.ok]
    prompt = sum(r.prompt_tokens for r in ok)
    cached = sum(r.cached_tokens or 0 for r in ok)
    trace, ctx = summary["trace"], summary["context"]
    left_out = (
        f"; {ctx['skipped']} row(s) skipped, {ctx['clipped']} clipped over the context "
        f"{ctx['max_model_len']} (trace.over_context={ctx['policy']})"
        if ctx["skipped"] or ctx["clipped"]
        else ""
    )
    lines = [
        f"replay: {len(recs)} requests ({len(recs) - len(ok)} failed) from {trace['path']} "
        f"({trace['format']}, {trace['block_tokens']} tokens a block, {summary['schedule']}){left_out}",
        f"replay: server-reported cached share {cached / prompt:.1%} of {prompt:,} prompt tokens"
        if prompt
        else "replay: no successful request",
    ]
    late = summary["lateness"]
    if late.get("n"):
        lines.append(f"replay: dispatch lateness p50 {late['p50_ms']:.2f} ms, p99 {late['p99_ms']:.2f} ms")
        if late.get("warning"):
            lines.append(f"replay: warning: {late['warning']}")
    return lines
