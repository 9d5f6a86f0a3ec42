"""ShareGPT-style conversations (vLLM bench `sharegpt`): a JSON array of
`{"id": ..., "conversations": [{"from": "human", "value": TEXT}, {"from": "gpt", "value": TEXT}, ...]}`.

As vLLM's sampler reads it: the first turn is the prompt and the second the recorded answer, whose
token count is the request's answer length (counted by the server's /tokenize where it has one);
an entry with fewer than two turns is skipped, as vLLM skips it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kvbench.datasets.base import DatasetFormat, Ids, Request, RowError, need, obj, text


def parse(value: Any, line: int, _ids: Ids) -> Iterator[Request]:
    entry = obj(value)
    turns = need(entry, "conversations")
    if not isinstance(turns, list):
        raise RowError("conversations", f"must be a list of turns, got {type(turns).__name__}")
    if len(turns) < 2:
        return
    first, second = (obj(t, f"conversations[{i}]") for i, t in enumerate(turns[:2]))
    prompt = _value(first, 0)
    reply = _value(second, 1)
    session = entry.get("id")
    yield Request(line, text=prompt, reply=reply, session=None if session is None else str(session))


def _value(turn: dict[str, Any], i: int) -> str:
    try:
        return text(turn, "value")
    except RowError as exc:
        raise RowError(f"conversations[{i}].value", exc.message) from None


FORMAT = DatasetFormat(
    name="sharegpt",
    source="vLLM bench sharegpt",
    block_tokens=16,
    matches=lambda v: isinstance(v, dict) and "conversations" in v,
    parse=parse,
    description='JSON array: {"conversations": [{"from": "human", "value": text}, {"from": "gpt", ...}]}',
)
