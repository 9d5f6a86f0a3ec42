"""A replay's rows of the report's Run table, from the manifest's trace (never the run's probe):
which file, which of its rows were sent and why the others were not, and at what pace."""

from __future__ import annotations

from kvbench.report.core.formats import fmt
from kvbench.results.schema import TraceRecord

PACE = {
    "fixed": "fixed: the trace's own timestamps",
    "rate": "rate: seeded arrivals at test.rate",
    "concurrent": "concurrent: a closed loop, in trace order",
}


def trace_rows(trace: TraceRecord | None) -> list[list[str]]:
    """Rows "trace", "trace rows replayed" and "trace pace" (none for a run without a trace)."""
    if trace is None:
        return []
    return [
        ["trace", f"{trace.path} ({trace.format}, {fmt(trace.block_tokens)} tokens a block)"],
        ["trace rows replayed", _rows_text(trace)],
        ["trace pace", _pace_text(trace)],
    ]


def _rows_text(t: TraceRecord) -> str:
    text = f"{fmt(t.rows)} of {fmt(t.rows + t.skipped)} selected"
    if t.skipped or t.clipped:
        text += (
            f"; {fmt(t.skipped)} skipped{why_text(t.skipped_why)}, {fmt(t.clipped)} clipped: longer "
            f"than the model's context {fmt(t.max_model_len)} with their answer "
            f"(trace.over_context={t.over_context})"
        )
    if t.limit is not None:
        text += f"; at most {fmt(t.limit)} rows (trace.limit)"
    return text


def why_text(why: dict[str, int]) -> str:
    """` (3 over the context, 1 answer alone fills the context)`; empty when no reason is recorded."""
    return f" ({', '.join(f'{fmt(n)} {k}' for k, n in why.items())})" if why else ""


def _pace_text(t: TraceRecord) -> str:
    text = PACE.get(t.schedule, t.schedule)
    if t.schedule == "fixed":
        text += f" at {t.speedup:g}x"
    if t.start_ms or t.window_ms is not None:
        span = f"for {t.window_ms:g} ms of trace time" if t.window_ms is not None else "to the trace's end"
        text += f"; window from {t.start_ms:g} ms {span}"
        if t.starts_cold:
            text += f", from an empty cache ({fmt(t.rows_before)} earlier rows not cached)"
    else:
        text += "; the whole trace"
    return text
