"""One validated trace row, the same shape whatever the file's format.

Every format module turns its own JSON object into a TraceRow; everything downstream (analysis,
realisation, replay schedules) sees only this.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TraceRow:
    line: int  # 1-based line number in the file (for error messages)
    timestamp_ms: float  # arrival time from the trace's start, ms (weka `t` s * 1000)
    input_length: int  # tokens
    output_length: int  # tokens
    hash_ids: tuple[int, ...]  # one id per block of `block_tokens`; equal leading ids = shared prefix
    session: str | None = None  # conversation id where the format has one (bailian chat root, weka session)
    parent: str | None = None  # bailian parent_chat_id (None for a first turn)
    turn: int | None = None  # turn number where the format has it
    request_id: str | None = None  # the row's own id where the format has one (bailian chat_id)


class RowError(Exception):
    """A bad field in one row; the reader adds the file and line before it reaches the user."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
