"""The trace reader: every format, auto detection, gzip, streaming, and one line per bad row."""

from __future__ import annotations

import gzip
import shutil
import tracemalloc
from pathlib import Path

import pytest

from kvbench.errors import UsageError
from kvbench.traces import FORMATS, open_trace
from kvbench.traces import reader as reader_mod

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"

# file -> (line, field, words of the message); each bad fixture fails on exactly one row
BAD = {
    "bad-missing-field.jsonl": (2, "output_length", "missing"),
    "bad-wrong-type.jsonl": (1, "input_length", "whole number"),
    "bad-negative-length.jsonl": (3, "output_length", ">= 0"),
    "bad-hash-ids-too-long.jsonl": (2, "hash_ids", "3 ids but input_length 600"),
    "bad-hash-ids-type.jsonl": (1, "hash_ids", "list of integers"),
    "bad-not-json.jsonl": (2, "row", "not JSON"),
    "bad-not-object.jsonl": (1, "row", "JSON object"),
    "bad-unknown-format.jsonl": (1, "format", "keys seen: completion_len, prompt_len, time"),
    "bad-bailian-self-parent.jsonl": (1, "parent_chat_id", "own parent"),
    "bad-weka-negative-t.jsonl": (1, "t", ">= 0"),
}


def test_every_bad_fixture_is_listed() -> None:
    on_disk = {p.name for p in DATA.glob("bad-*.jsonl")} - {"bad-non-monotonic.jsonl"}
    assert on_disk == set(BAD)


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_row_is_one_line_naming_file_line_and_field(name: str) -> None:
    line, field, words = BAD[name]
    with pytest.raises(UsageError) as exc:
        list(open_trace(DATA / name))
    msg = exc.value.message
    assert "\n" not in msg
    assert msg.startswith(f"{DATA / name}:{line}: {field}: "), msg
    assert words in msg


def test_non_monotonic_timestamps_fail_only_when_asked() -> None:
    path = DATA / "bad-non-monotonic.jsonl"
    assert [r.timestamp_ms for r in open_trace(path)] == [0.0, 300.0, 200.0]
    with pytest.raises(UsageError) as exc:
        list(open_trace(path, require_monotonic=True))
    assert exc.value.message.startswith(f"{path}:3: timestamp: goes back in time")


def test_mooncake_rows() -> None:
    trace = open_trace(DATA / "mooncake.jsonl")
    assert (trace.format, trace.block_tokens) == ("mooncake", 512)
    rows = list(trace)
    assert [r.line for r in rows] == [1, 2, 3, 4, 5, 6]
    assert rows[1].timestamp_ms == 100.0 and rows[1].input_length == 1500 and rows[1].hash_ids == (1, 2, 3)
    assert all(r.session is None for r in rows)


def test_bailian_rows_seconds_to_ms_and_sessions_follow_parents() -> None:
    trace = open_trace(DATA / "bailian.jsonl")
    assert (trace.format, trace.block_tokens) == ("bailian", 16)
    rows = list(trace)
    assert [r.timestamp_ms for r in rows] == [0.0, 1500.0, 2000.0, 3250.0]
    # chat 4's parent is 2, whose parent is 1: all three are one conversation rooted at 1
    assert [r.session for r in rows] == ["1", "1", "3", "1"]
    assert [r.parent for r in rows] == [None, "1", None, "2"]
    assert [r.turn for r in rows] == [1, 2, 1, 3]
    assert [r.request_id for r in rows] == ["1", "2", "3", "4"]


def test_weka_rows() -> None:
    trace = open_trace(DATA / "weka.jsonl")
    assert (trace.format, trace.block_tokens) == ("weka", 64)
    rows = list(trace)
    assert [(r.timestamp_ms, r.input_length, r.output_length, r.session) for r in rows] == [
        (0.0, 100, 10, "s1"),
        (500.0, 200, 10, "s1"),
        (1250.0, 64, 5, "s2"),
    ]


def test_named_format_and_block_override() -> None:
    smaller = open_trace(DATA / "mooncake.jsonl", format="mooncake", block_tokens=256)
    assert smaller.block_tokens == 256 and len(list(smaller)) == 6  # fewer ids than 256-token blocks: fine
    bigger = open_trace(DATA / "mooncake.jsonl", block_tokens=1024)
    with pytest.raises(UsageError) as exc:
        list(bigger)
    assert exc.value.message == (
        f"{DATA / 'mooncake.jsonl'}:1: hash_ids: "
        "2 ids but input_length 1024 at 1024 tokens per block allows at most 1"
    )
    with pytest.raises(UsageError, match="unknown format 'csv'"):
        open_trace(DATA / "mooncake.jsonl", format="csv")
    with pytest.raises(UsageError, match="block_tokens"):
        open_trace(DATA / "mooncake.jsonl", block_tokens=0)


def test_a_weka_file_read_as_mooncake_names_the_missing_field() -> None:
    with pytest.raises(UsageError) as exc:
        list(open_trace(DATA / "weka.jsonl", format="mooncake"))
    assert exc.value.message == f"{DATA / 'weka.jsonl'}:1: timestamp: missing"


def test_gzip_is_read_directly_whatever_its_name(tmp_path: Path) -> None:
    plain = list(open_trace(DATA / "bailian.jsonl"))
    for name in ("trace.jsonl.gz", "trace.jsonl"):
        path = tmp_path / name
        with (DATA / "bailian.jsonl").open("rb") as src, gzip.open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)
        trace = open_trace(path)
        assert trace.format == "bailian"
        assert list(trace) == plain


def test_truncated_gzip_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "cut.jsonl.gz"
    whole = gzip.compress((DATA / "mooncake.jsonl").read_bytes() * 50)
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(UsageError) as exc:
        list(open_trace(path))
    assert exc.value.message.startswith(f"{path}:") and ": row: unreadable" in exc.value.message


def test_missing_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such trace file"):
        open_trace(tmp_path / "nope.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(UsageError, match="no rows"):
        open_trace(tmp_path / "empty.jsonl")


def test_a_line_that_never_ends_is_refused_without_reading_it_whole(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(reader_mod, "MAX_LINE_BYTES", 1000)
    path = tmp_path / "one-line.jsonl"
    path.write_text(
        '{"timestamp": 0, "input_length": 99999999, "output_length": 1, "hash_ids": [' + "1, " * 2000
    )
    with pytest.raises(UsageError) as exc:
        open_trace(path)
    assert exc.value.message.startswith(f"{path}:1: row: longer than")


def test_iteration_streams(tmp_path: Path) -> None:
    """Reading 60,000 rows holds about one row at a time, not the file."""
    path = tmp_path / "big.jsonl"
    row = '{"timestamp": %d, "input_length": 8000, "output_length": 100, "hash_ids": [%s]}\n'
    with path.open("w") as fh:
        for i in range(60_000):
            fh.write(row % (i, ", ".join(str(i * 16 + k) for k in range(16))))
    size = path.stat().st_size
    trace = open_trace(path)
    tracemalloc.start()
    try:
        n = sum(1 for _ in trace)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert n == 60_000
    assert peak < size / 20, (peak, size)


def test_registry() -> None:
    assert {name: f.block_tokens for name, f in FORMATS.items()} == {
        "bailian": 16,
        "weka": 64,
        "mooncake": 512,
    }
