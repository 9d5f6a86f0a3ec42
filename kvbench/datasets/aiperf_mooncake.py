"""AIPerf `mooncake_trace`: JSONL, one request a line, either text or lengths with hash ids:
`{"timestamp": MS, "input_length": N, "output_length": M, "hash_ids": [...]}` or
`{"text_input": TEXT, "output_length": M}`.

Field names as AIPerf's trace-replay and custom-prompt docs give them (512 tokens per hash id, as
Mooncake's published trace). A line with `input_length` and no `hash_ids` is a unique prompt of
that length (fresh ids); with `hash_ids`, equal leading ids are a shared prefix, realised
token-exact as `kvbench run replay` realises a trace (a file of such lines can be replayed).
`session_id` and `delay` are read and checked; `timestamp` orders a replay.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kvbench.datasets.base import (
    DatasetFormat,
    Ids,
    Request,
    hash_ids,
    length,
    number,
    obj,
    optional_length,
    text,
)

BLOCK_TOKENS = 512


def parse(value: Any, line: int, ids: Ids) -> Iterator[Request]:
    row = obj(value)
    when = number(row, "timestamp") if row.get("timestamp") is not None else None
    if row.get("delay") is not None:
        number(row, "delay")
    session = None if row.get("session_id") is None else str(row["session_id"])
    out = optional_length(row, "output_length")
    if "text_input" in row:
        yield Request(
            line, text=text(row, "text_input"), output_tokens=out, session=session, timestamp_ms=when
        )
        return
    n = length(row, "input_length")
    given = hash_ids(row, "hash_ids", n, BLOCK_TOKENS) if row.get("hash_ids") is not None else ()
    # blocks the ids do not reach are this row's own (a short list must not shorten the prompt)
    blocks = given + ids.fresh(max(0, n - len(given) * BLOCK_TOKENS), BLOCK_TOKENS)
    yield Request(
        line, input_tokens=n, hash_ids=blocks, output_tokens=out, session=session, timestamp_ms=when
    )


FORMAT = DatasetFormat(
    name="mooncake_trace",
    source="AIPerf mooncake_trace",
    block_tokens=BLOCK_TOKENS,
    matches=lambda v: isinstance(v, dict) and ("text_input" in v or "input_length" in v),
    parse=parse,
    description='JSONL: {"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [...]} '
    'or {"text_input": text, "output_length": m}',
)
