"""A dataset file read into (line, JSON value) entries, whatever its layout.

JSONL (one value a line), a JSON array (each element with the line it starts on), or one JSON
object (a synthetic spec, however it is indented). The whole file is read at once: datasets are
prompt lists, not 2 GB traces (those stream through kvbench.traces). gzip is recognised by its
magic bytes. Every problem is one line, `FILE:LINE: field: message`, raised as UsageError.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from kvbench.errors import UsageError

MAX_BYTES = 4 * 2**30  # a file past this is not a prompt list kvbench should hold in memory
_DECODER = json.JSONDecoder()


def entries(path: Path) -> list[tuple[int, Any]]:
    """(1-based line, value) for every entry of the file."""
    text = _read(path)
    start = len(text) - len(text.lstrip())
    if start == len(text):
        raise UsageError(f"{path}: no entries (empty file)")
    if text[start] == "[":
        return _array(path, text, start)
    first_line = text[start:].split("\n", 1)[0]
    try:
        json.loads(first_line)
    except json.JSONDecodeError:
        return [(_line_of(text, start), _whole(path, text))]  # one object over many lines
    return _jsonl(path, text)


def _read(path: Path) -> str:
    if not path.is_file():
        raise UsageError(f"{path}: no such dataset file")
    try:
        if path.stat().st_size > MAX_BYTES:
            raise UsageError(f"{path}: larger than {MAX_BYTES // 2**30} GiB; not a prompt list")
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        return raw.decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: unreadable ({type(exc).__name__}: {exc})") from None


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _whole(path: Path, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}:{exc.lineno}: entry: not JSON ({exc.msg} at column {exc.colno})") from None


def _jsonl(path: Path, text: str) -> list[tuple[int, Any]]:
    out = []
    for i, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        try:
            out.append((i, json.loads(raw)))
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}:{i}: row: not JSON ({exc.msg} at column {exc.colno})") from None
    return out


def _array(path: Path, text: str, start: int) -> list[tuple[int, Any]]:
    """A JSON array's elements, each with the line it starts on (so an error names the line).

    As strict as json.loads: one comma between elements, none before the first or after the last.
    """
    out: list[tuple[int, Any]] = []
    pos, n = _skip_space(text, start + 1), len(text)
    if pos < n and text[pos] == "]":
        return out
    while True:
        if pos >= n:
            raise UsageError(f"{path}:{_line_of(text, pos)}: entry: the JSON array is not closed")
        try:
            value, end = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise UsageError(
                f"{path}:{exc.lineno}: entry: not JSON ({exc.msg} at column {exc.colno})"
            ) from None
        out.append((_line_of(text, pos), value))
        pos = _skip_space(text, end)
        if pos < n and text[pos] == "]":
            return out
        if pos < n and text[pos] != ",":
            raise UsageError(f"{path}:{_line_of(text, pos)}: entry: not JSON (expected ',' or ']')")
        pos = _skip_space(text, pos + 1)
