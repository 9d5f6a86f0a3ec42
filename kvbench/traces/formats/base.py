"""What a trace format is, and the field checks every format shares.

A format names its default block size, the keys that identify it (for `auto`), how one JSON object
becomes a TraceRow and how a TraceRow is written back (for `trace synth`). The checks raise
RowError(field, message); the reader adds FILE:LINE.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvbench.traces.rows import RowError, TraceRow

Parser = Callable[[dict[str, Any], int, int, "SessionState"], TraceRow]
Writer = Callable[[TraceRow], dict[str, Any]]


@dataclass(frozen=True)
class TraceFormat:
    name: str
    block_tokens: int
    signature: tuple[str, ...]  # keys whose presence identifies the format (auto detection)
    time_key: str  # the field that holds the arrival time (named in a non-monotonic error)
    parse: Parser
    write: Writer
    description: str

    def matches(self, obj: dict[str, Any]) -> bool:
        return all(key in obj for key in self.signature)


class SessionState:
    """Per-pass state a format may need (bailian: chat id -> its conversation's root)."""

    def __init__(self) -> None:
        self.roots: dict[str, str] = {}


def need(obj: dict[str, Any], key: str) -> Any:
    if key not in obj:
        raise RowError(key, "missing")
    return obj[key]


def length(obj: dict[str, Any], key: str) -> int:
    value = need(obj, key)
    # bool is an int to Python; a trace that says `true` tokens is wrong, not 1.
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise RowError(key, f"must be a whole number of tokens, got {value!r}")
    if value < 0:
        raise RowError(key, f"must be >= 0, got {value}")
    return value


def number(obj: dict[str, Any], key: str) -> float:
    value = need(obj, key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RowError(key, f"must be a finite number, got {value!r}")
    if value < 0:
        raise RowError(key, f"must be >= 0, got {value}")
    return float(value)


def hash_ids(obj: dict[str, Any], key: str, input_length: int, block_tokens: int) -> tuple[int, ...]:
    value = need(obj, key)
    if not isinstance(value, list):
        raise RowError(key, f"must be a list of integers, got {type(value).__name__}")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int):
            raise RowError(key, f"must be a list of integers, found {item!r}")
    allowed = -(-input_length // block_tokens)
    if len(value) > allowed:
        raise RowError(
            key,
            f"{len(value)} ids but input_length {input_length} at {block_tokens} tokens per block "
            f"allows at most {allowed}",
        )
    return tuple(value)


def ident(obj: dict[str, Any], key: str, *, optional: bool = False) -> str | None:
    if optional and obj.get(key) is None:
        return None
    value = need(obj, key)
    if isinstance(value, bool) or not isinstance(value, (int, str)) or value == "":
        raise RowError(key, f"must be an integer or a non-empty string, got {value!r}")
    return str(value)


def turn(obj: dict[str, Any], key: str) -> int | None:
    if obj.get(key) is None:
        return None
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RowError(key, f"must be a whole number >= 0, got {value!r}")
    return value
