"""Open a trace file and stream its rows, validated, one at a time.

`open_trace` checks the file and settles the format (reading only the first rows for `auto`);
iterating the TraceFile reads the file again from the start, so a 2 GB or 1M-row trace never sits
in memory. gzip is recognised by its magic bytes, whatever the file is called. Every problem is
one line, `FILE:LINE: field: message`, raised as UsageError (exit 2).
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from kvbench.errors import UsageError
from kvbench.traces.formats import FORMATS, SessionState, TraceFormat
from kvbench.traces.rows import RowError, TraceRow

GZIP_MAGIC = b"\x1f\x8b"
# The longest row a real trace has is a few hundred KB (a 128k-token prompt at 16 tokens a block);
# a "line" longer than this is a file that is not JSONL, and reading it whole would exhaust memory.
MAX_LINE_BYTES = 32 * 1024 * 1024

__all__ = ["FORMATS", "TraceFile", "open_trace"]


class TraceFile:
    """A trace on disk in a known format; iterable many times, each pass streaming from the start."""

    def __init__(self, path: Path, fmt: TraceFormat, block_tokens: int, require_monotonic: bool) -> None:
        self.path = path
        self.format = fmt.name
        self.block_tokens = block_tokens
        self.require_monotonic = require_monotonic
        self._fmt = fmt

    def __repr__(self) -> str:
        return f"TraceFile({str(self.path)!r}, format={self.format!r}, block_tokens={self.block_tokens})"

    def __iter__(self) -> Iterator[TraceRow]:
        state = SessionState()
        last_ms = float("-inf")
        for line, obj in _objects(self.path):
            try:
                row = self._fmt.parse(obj, line, self.block_tokens, state)
            except RowError as exc:
                raise UsageError(f"{self.path}:{line}: {exc.field}: {exc.message}") from None
            if self.require_monotonic and row.timestamp_ms < last_ms:
                raise UsageError(
                    f"{self.path}:{line}: {self._fmt.time_key}: goes back in time "
                    f"({row.timestamp_ms:g} ms after {last_ms:g} ms); a fixed schedule needs arrival order"
                )
            last_ms = max(last_ms, row.timestamp_ms)
            yield row


def open_trace(
    path: str | Path,
    *,
    format: str = "auto",
    block_tokens: int | None = None,
    require_monotonic: bool = False,
) -> TraceFile:
    """The trace at `path`, its format named or detected from the first rows (`auto`)."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(
            f"{path}: {'a directory, not a trace file' if path.is_dir() else 'no such trace file'}"
        )
    if format == "auto":
        fmt = _detect(path)
    elif format in FORMATS:
        fmt = FORMATS[format]
    else:
        raise UsageError(
            f"trace.format: unknown format {format!r}; known: auto, {', '.join(sorted(FORMATS))}"
        )
    if block_tokens is not None and (isinstance(block_tokens, bool) or block_tokens < 1):
        raise UsageError(f"trace.block_tokens: must be a whole number >= 1, got {block_tokens!r}")
    return TraceFile(path, fmt, block_tokens or fmt.block_tokens, require_monotonic)


def _detect(path: Path) -> TraceFormat:
    """The format whose keys the first row has; one that has most of them (2 or more) is taken, so
    that a first row missing a field fails on that field, by name, rather than on the format."""
    first = next((obj for _line, obj in _objects(path)), None)
    if first is None:
        raise UsageError(f"{path}: no rows (empty trace)")
    overlap = {f.name: sum(key in first for key in f.signature) for f in FORMATS.values()}
    best = max(overlap.values())
    winners = [FORMATS[name] for name, n in overlap.items() if n == best]
    if best >= 2 and (len(winners) == 1 or winners[0].matches(first)):
        return winners[0]
    seen = ", ".join(sorted(first)) or "none"
    known = "; ".join(f"{f.name}: {', '.join(f.signature)}" for f in FORMATS.values())
    raise UsageError(
        f"{path}:1: format: no trace format matches the first row (keys seen: {seen}); expected {known}"
    )


def _objects(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, JSON object) for every non-blank line."""
    with _open(path) as fh:
        line = 0
        while True:
            try:
                raw = fh.readline(MAX_LINE_BYTES + 1)
            except (OSError, EOFError, UnicodeDecodeError) as exc:
                raise UsageError(
                    f"{path}:{line + 1}: row: unreadable ({type(exc).__name__}: {exc})"
                ) from None
            if not raw:
                return
            line += 1
            if len(raw) > MAX_LINE_BYTES:
                raise UsageError(
                    f"{path}:{line}: row: longer than {MAX_LINE_BYTES // 2**20} MiB; not a JSONL trace"
                )
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{path}:{line}: row: not JSON ({exc.msg} at column {exc.colno})") from None
            if not isinstance(obj, dict):
                raise UsageError(f"{path}:{line}: row: must be a JSON object, got {type(obj).__name__}")
            yield line, obj


def _open(path: Path) -> IO[str]:
    with path.open("rb") as probe:
        magic = probe.read(2)
    if magic == GZIP_MAGIC:
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return path.open("r", encoding="utf-8")
