"""One row per replayed trace request (replay.jsonl): what the trace says beside what was sent.

A replayed request is also a row of requests.jsonl (same `request_id`: its times, dispatch
lateness and the cached tokens the server reported); replay.jsonl adds what only the trace knows:
which row it was, when the trace scheduled it, and how much of it an unbounded prefix cache could
reuse given the rows before it (the trace's ideal), in the trace's blocks and in the engine's.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

REPLAY_ROWS = "replay.jsonl"
REPLAY_SUMMARY = "replay.json"


class ReplayRow(BaseModel):
    """One replayed request (a line of replay.jsonl)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    request_id: str = Field(description="The timed request's id in requests.jsonl.")
    phase: str = Field(description="Phase name (replay).")
    index: int = Field(description="Position in the replay, 0-based (trace order).")
    trace_line: int = Field(description="Line of the trace file the row came from (1-based).")
    session: str | None = Field(description="Conversation id where the format has one (bailian, weka).")
    timestamp_ms: float = Field(description="The row's arrival time in the trace, ms from its start.")
    scheduled_offset_s: float = Field(
        description="When the schedule meant to send it, s from the phase start (0 for a closed loop)."
    )
    input_length: int = Field(description="The row's input_length, tokens.")
    output_length: int = Field(description="The row's output_length, tokens.")
    max_tokens: int = Field(description="Answer tokens asked for (output_length, or output.max_tokens).")
    blocks: int = Field(description="Hash ids of the row.")
    prompt_tokens: int = Field(description="Tokens of the realised prompt as the server counts them.")
    expected_blocks: int = Field(
        description="Leading blocks an unbounded prefix cache already holds after the rows before it."
    )
    expected_cached_tokens: int = Field(
        description="expected_blocks * block_tokens, capped at input_length: the trace's ideal reuse."
    )
    engine_expected_tokens: int | None = Field(
        description="The same in the engine's own blocks (whole blocks, at least one token computed); "
        "null when the engine's block size is unknown or does not divide block_tokens."
    )
