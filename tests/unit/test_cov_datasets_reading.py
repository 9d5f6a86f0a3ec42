"""Dataset files read whatever their layout (JSONL, a JSON array, one object over many lines, gzip)
with each entry's line, and every problem one line naming the file, the line and what is wrong."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from kvbench.datasets import reading
from kvbench.errors import UsageError


def test_jsonl_entries_keep_their_lines_and_skip_blank_ones(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('\n{"a": 1}\n\n  \n{"a": 2}\n')
    assert reading.entries(path) == [(2, {"a": 1}), (5, {"a": 2})]


def test_an_array_names_the_line_each_element_starts_on(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text('[\n  {"a": 1},\n  {"a":\n     2}, 3\n]\n')
    assert reading.entries(path) == [(2, {"a": 1}), (3, {"a": 2}), (4, 3)]
    path.write_text("  []")
    assert reading.entries(path) == []


def test_one_object_over_many_lines_is_one_entry_at_its_first_line(tmp_path: Path) -> None:
    path = tmp_path / "spec.json"
    path.write_text('\n\n{\n  "kind": "random",\n  "n": 3\n}\n')
    assert reading.entries(path) == [(3, {"kind": "random", "n": 3})]


def test_gzip_is_known_by_its_magic_not_its_name(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"  # no .gz suffix
    path.write_bytes(gzip.compress(b'{"a": 1}\n{"a": 2}\n'))
    assert [v for _line, v in reading.entries(path)] == [{"a": 1}, {"a": 2}]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "no entries (empty file)"),
        (b"  \n\t\n", "no entries (empty file)"),
        (b'{"a": 1}\n{"a": \n', ":2: row: not JSON (Expecting value at column 7)"),
        (b'[\n{"a": 1},\n{"a" 2}\n]', ":3: entry: not JSON (Expecting ':' delimiter at column 6)"),
        (b'[\n{"a": 1},\n', ":3: entry: the JSON array is not closed"),
        (b'{\n  "a": 1,\n  "b":\n}', ":4: entry: not JSON (Expecting value at column 1)"),
        (b"\xff\xfe not utf-8", "unreadable (UnicodeDecodeError: "),
        (b"\x1f\x8b truncated gzip", "unreadable ("),
    ],
)
def test_bad_files_are_one_line_naming_file_and_line(tmp_path: Path, body: bytes, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(body)
    with pytest.raises(UsageError) as exc:
        reading.entries(path)
    assert exc.value.message.startswith(str(path)) and message in exc.value.message
    assert "\n" not in exc.value.message


def test_missing_and_oversized_files_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UsageError, match="no such dataset file"):
        reading.entries(tmp_path / "absent.jsonl")
    with pytest.raises(UsageError, match="no such dataset file"):
        reading.entries(tmp_path)  # a directory is not a dataset
    path = tmp_path / "big.jsonl"
    path.write_text(json.dumps({"text": "x" * 100}) + "\n")
    monkeypatch.setattr(reading, "MAX_BYTES", 64)  # the limit is said in whole GiB
    with pytest.raises(UsageError) as exc:
        reading.entries(path)
    assert exc.value.message == f"{path}: larger than 0 GiB; not a prompt list"


@pytest.mark.parametrize(
    "body",
    ['[{"a": 1} {"a": 2}]', '[{"a": 1},, {"a": 2}]', '[{"a": 1},]', '[, {"a": 1}]', '[{"a": 1}\n{"a": 2}\n]'],
)
def test_an_array_is_as_strict_as_json(tmp_path: Path, body: str) -> None:
    # a missing, doubled, leading or trailing comma is not JSON: json.loads refuses each one too
    with pytest.raises(json.JSONDecodeError):
        json.loads(body)
    path = tmp_path / "d.json"
    path.write_text(body)
    with pytest.raises(UsageError, match=r"d\.json:\d+: entry: not JSON"):
        reading.entries(path)


def test_an_empty_array_and_spaced_commas_read_as_json_does(tmp_path: Path) -> None:
    for body in ["[]", "[ ]", '[ {"a": 1} ,\n {"a": 2} ]']:
        path = tmp_path / "d.json"
        path.write_text(body)
        assert [v for _, v in reading.entries(path)] == json.loads(body)
