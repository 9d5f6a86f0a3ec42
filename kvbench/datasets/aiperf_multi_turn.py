"""AIPerf `multi_turn`: JSONL, one conversation a line:
`{"session_id": ID, "turns": [{"text": TEXT, "output_length": N}, ...]}`.

As a prompt list (the throughput test sends prompts, not live conversations), turn k is the
conversation so far: turns 1..k of the user's text, one a line, after a leading `"role": "system"`
turn where there is one (AIPerf hoists that into every turn too). The answers are not in the
history, since none has been generated when the list is built; so turn k's prompt starts with turn
k-1's whole prompt, and a prefix cache can reuse it the way it would in the conversation.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kvbench.datasets.aiperf_single_turn import prompt_text, timestamp
from kvbench.datasets.base import DatasetFormat, Ids, Request, RowError, need, obj, optional_length


def parse(value: Any, line: int, _ids: Ids) -> Iterator[Request]:
    conv = obj(value)
    turns = need(conv, "turns")
    if not isinstance(turns, list) or not turns:
        raise RowError("turns", f"must be a non-empty list of turns, got {turns!r}")
    session = conv.get("session_id")
    session = f"line-{line}" if session is None else str(session)
    history: list[str] = []
    number = 0
    for i, raw in enumerate(turns):
        try:
            turn = obj(raw, "turn")
            said = prompt_text(turn)
            out = optional_length(turn, "output_length")
            when = timestamp(turn)
        except RowError as exc:
            raise RowError(f"turns[{i}].{exc.field}", exc.message) from None
        history.append(said)
        if i == 0 and turn.get("role") == "system" and len(turns) > 1:
            continue  # the system prompt opens every turn, and is no request of its own
        number += 1
        yield Request(
            line,
            text="\n".join(history),
            output_tokens=out,
            session=session,
            turn=number,
            timestamp_ms=when,
        )


FORMAT = DatasetFormat(
    name="multi_turn",
    source="AIPerf multi_turn",
    block_tokens=16,
    matches=lambda v: isinstance(v, dict) and "turns" in v,
    parse=parse,
    description='JSONL: {"session_id": id, "turns": [{"text": text, "output_length": n}, ...]}',
)
