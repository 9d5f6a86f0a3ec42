"""AIPerf `single_turn`: JSONL, one independent request a line: `{"text": TEXT, "output_length": N}`.

Field names as AIPerf's custom dataset guide gives them: `text` (or `texts`, a list, joined by a
space here), optional `output_length` (the request's max_tokens), `timestamp` (ms) or `delay`
(ms after the previous line; a timestamp wins), `role` (ignored: kvbench sends one user turn).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kvbench.datasets.base import DatasetFormat, Ids, Request, RowError, number, obj, optional_length, text


def prompt_text(row: dict[str, Any]) -> str:
    if "text" in row:
        return text(row, "text")
    texts = row.get("texts")
    if texts is None:
        raise RowError("text", "missing (or `texts`, a list of text)")
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t.strip() for t in texts):
        raise RowError("texts", f"must be a non-empty list of non-empty text, got {texts!r}")
    return " ".join(texts)


def timestamp(row: dict[str, Any]) -> float | None:
    return number(row, "timestamp") if row.get("timestamp") is not None else None


def parse(value: Any, line: int, _ids: Ids) -> Iterator[Request]:
    row = obj(value)
    if row.get("delay") is not None:
        number(row, "delay")  # checked; when requests start is the scenario's load, not the file's
    yield Request(
        line,
        text=prompt_text(row),
        output_tokens=optional_length(row, "output_length"),
        timestamp_ms=timestamp(row),
    )


FORMAT = DatasetFormat(
    name="single_turn",
    source="AIPerf single_turn",
    block_tokens=16,
    matches=lambda v: isinstance(v, dict) and ("text" in v or "texts" in v) and "turns" not in v,
    parse=parse,
    description='JSONL: {"text": text (or "texts": [...]), "output_length": n, "timestamp": ms}',
)
