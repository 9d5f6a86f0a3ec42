"""What a dataset format is, the one request shape every format yields, and the field checks they share.

A format turns one entry of the user's file (a JSONL line, an element of a JSON array, or the
whole document for the synthetic specs) into Requests. A request is either TEXT (the prompt as the
user wrote it, sent after the run's salt) or LENGTHS (input tokens with one hash id per
`block_tokens`, realised token-exact by kvbench.traces.realise, the way a trace row is). Checks
raise kvbench.traces.rows.RowError(field, message); the reader adds FILE:LINE.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from kvbench.traces.formats.base import hash_ids, length, need, number
from kvbench.traces.rows import RowError, TraceRow

__all__ = ["DatasetFormat", "Ids", "Request", "RowError", "hash_ids", "length", "need", "number", "text"]

Parser = Callable[[Any, int, "Ids"], Iterable["Request"]]  # (JSON value, its 1-based line, fresh ids)


@dataclass(frozen=True, slots=True)
class Request:
    """One request of a dataset, whatever the file's format."""

    line: int  # where it came from in the file (for errors and dataset.jsonl)
    text: str | None = None  # TEXT: the prompt as written
    input_tokens: int | None = None  # LENGTHS: tokens asked (hash_ids cover them)
    hash_ids: tuple[int, ...] = ()  # LENGTHS: one id per block; equal leading ids = shared prefix
    output_tokens: int | None = None  # answer tokens asked; None = output.max_tokens
    reply: str | None = None  # ShareGPT: the recorded answer, whose token count is the answer length
    session: str | None = None
    turn: int | None = None
    timestamp_ms: float | None = None
    block_tokens: int | None = None  # LENGTHS: a synthetic spec's own block; None = the format's

    @property
    def kind(self) -> Literal["text", "lengths"]:
        return "text" if self.text is not None else "lengths"

    def trace_row(self) -> TraceRow:
        """A LENGTHS request as the trace machinery's row (timestamps default to arrival order)."""
        assert self.input_tokens is not None, self
        return TraceRow(
            self.line,
            self.timestamp_ms or 0.0,
            self.input_tokens,
            self.output_tokens or 0,
            self.hash_ids,
            session=self.session,
            turn=self.turn,
        )


@dataclass(frozen=True)
class DatasetFormat:
    name: str
    source: str  # whose format it is, as its users call it ("vLLM bench custom")
    block_tokens: int  # LENGTHS requests: tokens per hash id (a synthetic spec may choose its own)
    matches: Callable[[Any], bool]  # does this first entry look like the format (auto detection)
    parse: Parser
    description: str


def text(obj: dict[str, Any], key: str) -> str:
    value = need(obj, key)
    if not isinstance(value, str) or not value.strip():
        raise RowError(key, f"must be non-empty text, got {value!r}")
    return value


def optional_length(obj: dict[str, Any], key: str) -> int | None:
    return None if obj.get(key) is None else length(obj, key)


def obj(value: Any, what: str = "entry") -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RowError(what, f"must be a JSON object, got {type(value).__name__}")
    return value


class Ids:
    """Hash ids no request of the file shares (unique prompts, fresh suffixes), above any id a
    trace would write, so they never collide with the file's own."""

    def __init__(self, start: int = 2**62) -> None:
        self.next = start

    def fresh(self, n_tokens: int, block_tokens: int) -> tuple[int, ...]:
        n = -(-n_tokens // block_tokens)
        out = tuple(range(self.next, self.next + n))
        self.next += n
        return out


def spec(value: Any, known: dict[str, int | float]) -> dict[str, int | float]:
    """A synthetic dataset's settings (vLLM's flag names, `--random-input-len` as `random_input_len`),
    defaults filled; an unknown key is an error, as a typo must not fall back to a default."""
    given = obj(value, "spec")
    for key in given:
        if key not in known and key != "dataset_name":
            raise RowError(key, f"unknown setting; known: {', '.join(sorted(known))}")
    out: dict[str, int | float] = {}
    for key, default in known.items():
        if key not in given:
            out[key] = default
        elif isinstance(default, float):
            out[key] = number(given, key)
        else:
            out[key] = length(given, key)
    return out


def named(name: str, *keys: str) -> Callable[[Any], bool]:
    """Detection of a synthetic spec: `dataset_name` says it, or one of its own keys is there."""
    return lambda v: isinstance(v, dict) and (v.get("dataset_name") == name or any(k in v for k in keys))
