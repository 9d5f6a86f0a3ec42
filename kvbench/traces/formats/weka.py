"""WEKA's agentic traces, block 64: `{"t": seconds, "in", "out", "hash_ids"}` (+ a session id).

No public copy of WEKA's trace or of a reader for it could be found (searched public code, docs and
issue threads); the field names `t` (seconds), `in`, `out`, `hash_ids` and the 64-token block are
the ones kvbench's issue #23 gives. The session key is read from `session` or `session_id` when a
row carries one, since agentic traces group turns by session.
"""

from __future__ import annotations

from typing import Any

from kvbench.traces.formats.base import SessionState, TraceFormat, hash_ids, ident, length, number, turn
from kvbench.traces.rows import TraceRow

BLOCK_TOKENS = 64
SESSION_KEYS = ("session", "session_id")


def parse(obj: dict[str, Any], line: int, block_tokens: int, _state: SessionState) -> TraceRow:
    t_s = number(obj, "t")
    input_length = length(obj, "in")
    output_length = length(obj, "out")
    ids = hash_ids(obj, "hash_ids", input_length, block_tokens)
    session = next((ident(obj, k) for k in SESSION_KEYS if obj.get(k) is not None), None)
    return TraceRow(
        line, t_s * 1000.0, input_length, output_length, ids, session=session, turn=turn(obj, "turn")
    )


def write(row: TraceRow) -> dict[str, Any]:
    out: dict[str, Any] = {
        "t": round(row.timestamp_ms / 1000.0, 3),
        "in": row.input_length,
        "out": row.output_length,
    }
    if row.session is not None:
        out["session"] = row.session
    if row.turn is not None:
        out["turn"] = row.turn
    out["hash_ids"] = list(row.hash_ids)
    return out


FORMAT = TraceFormat(
    name="weka",
    block_tokens=BLOCK_TOKENS,
    signature=("t", "in", "out"),
    time_key="t",
    parse=parse,
    write=write,
    description="t (s), in, out, hash_ids, optional session; 64 tokens per block",
)
