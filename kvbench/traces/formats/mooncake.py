"""Mooncake (FAST'25) traces: `{"timestamp": ms, "input_length", "output_length", "hash_ids"}`.

Field names and the 512-token block are those of kvcache-ai/Mooncake's published
`mooncake_trace.jsonl` as AIPerf, SGLang and vLLM read it (AIPerf's docs: timestamp in
milliseconds, hash_ids optional there; kvbench requires them, because the sharing structure is what
a replay reproduces). Ids are chained: equal leading ids mean a shared prefix.
"""

from __future__ import annotations

from typing import Any

from kvbench.traces.formats.base import SessionState, TraceFormat, hash_ids, length, number
from kvbench.traces.rows import TraceRow

BLOCK_TOKENS = 512


def parse(obj: dict[str, Any], line: int, block_tokens: int, _state: SessionState) -> TraceRow:
    timestamp = number(obj, "timestamp")
    input_length = length(obj, "input_length")
    output_length = length(obj, "output_length")
    ids = hash_ids(obj, "hash_ids", input_length, block_tokens)
    return TraceRow(line, timestamp, input_length, output_length, ids)


def write(row: TraceRow) -> dict[str, Any]:
    return {
        "timestamp": _ms(row.timestamp_ms),
        "input_length": row.input_length,
        "output_length": row.output_length,
        "hash_ids": list(row.hash_ids),
    }


def _ms(value: float) -> int | float:
    # The published trace writes whole milliseconds; keep that when nothing is lost.
    return int(value) if float(value).is_integer() else round(value, 3)


FORMAT = TraceFormat(
    name="mooncake",
    block_tokens=BLOCK_TOKENS,
    signature=("timestamp", "input_length", "output_length"),
    time_key="timestamp",
    parse=parse,
    write=write,
    description="timestamp (ms), input_length, output_length, hash_ids; 512 tokens per block",
)
