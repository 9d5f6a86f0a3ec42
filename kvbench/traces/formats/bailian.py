"""Alibaba Bailian (Qwen) traces, block 16.

Field names from alibaba-edu/qwen-bailian-usagetraces-anon's README (the files
`qwen_traceA_blksz_16.jsonl`, ...), as AIPerf's "Profile with Bailian Traces" tutorial also reads
them: `chat_id`, `parent_chat_id` (-1 for a root request), `timestamp` (seconds since the trace's
start), `input_length`, `output_length`, `type` (text/search/image/file; kept out of TraceRow),
`turn`, `hash_ids` (salted SipHash of 16-token blocks).

A row's session is its conversation's root chat id, found by following parent_chat_id back to a
root seen earlier in the file (a parent the file never showed starts its own session).
"""

from __future__ import annotations

from typing import Any

from kvbench.traces.formats.base import SessionState, TraceFormat, hash_ids, ident, length, number, turn
from kvbench.traces.rows import RowError, TraceRow

BLOCK_TOKENS = 16
ROOT = "-1"


def parse(obj: dict[str, Any], line: int, block_tokens: int, state: SessionState) -> TraceRow:
    chat_id = ident(obj, "chat_id")
    parent = ident(obj, "parent_chat_id", optional=True)
    if parent == ROOT:
        parent = None
    if parent is not None and parent == chat_id:
        raise RowError("parent_chat_id", f"a chat cannot be its own parent ({chat_id})")
    timestamp_s = number(obj, "timestamp")
    input_length = length(obj, "input_length")
    output_length = length(obj, "output_length")
    ids = hash_ids(obj, "hash_ids", input_length, block_tokens)
    assert chat_id is not None
    session = chat_id if parent is None else state.roots.get(parent, parent)
    state.roots[chat_id] = session
    return TraceRow(
        line,
        timestamp_s * 1000.0,
        input_length,
        output_length,
        ids,
        session=session,
        parent=parent,
        turn=turn(obj, "turn"),
        request_id=chat_id,
    )


def write(row: TraceRow) -> dict[str, Any]:
    return {
        "chat_id": _int_if(row.request_id if row.request_id is not None else str(row.line)),
        "parent_chat_id": _int_if(row.parent) if row.parent is not None else -1,
        "timestamp": round(row.timestamp_ms / 1000.0, 3),
        "input_length": row.input_length,
        "output_length": row.output_length,
        "type": "text",
        "turn": row.turn if row.turn is not None else 1,
        "hash_ids": list(row.hash_ids),
    }


def _int_if(value: str) -> int | str:
    return int(value) if value.lstrip("-").isdigit() else value


FORMAT = TraceFormat(
    name="bailian",
    block_tokens=BLOCK_TOKENS,
    signature=("chat_id", "timestamp", "input_length"),
    time_key="timestamp",
    parse=parse,
    write=write,
    description="chat_id, parent_chat_id, timestamp (s), input_length, output_length, turn, hash_ids; 16",
)
