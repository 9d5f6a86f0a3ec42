"""The run directory's files: rows appended whole and read back, a refused row cut off again so
the file ends at a whole row, torn last lines, the space reserve, and run ids."""

from __future__ import annotations

import errno
import json
import math
import re
import warnings
from pathlib import Path
from typing import Any

import pytest

from kvbench.results.files import (
    RESERVE,
    RESERVE_BYTES,
    JsonlWriter,
    RunDir,
    WriteFailed,
    new_run_dir,
    read_jsonl,
    read_manifest,
    utc_now_iso,
    write_json_atomic,
    write_text_atomic,
)


def test_rows_round_trip_and_nan_becomes_null(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    rows = [{"i": i, "text": "é\nline", "x": i / 3} for i in range(50)]
    with JsonlWriter(path) as w:
        for r in rows:
            w.write(r)
        w.write({"bad": math.nan, "inf": math.inf})
        assert w.rows == 51
    back = read_jsonl(path)
    assert back[:50] == rows
    assert back[50] == {"bad": None, "inf": None}  # strict JSON: no NaN literal in the file
    assert path.read_text().count("\n") == 51  # one line per row


def test_a_writer_appends_to_rows_already_there(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    with JsonlWriter(path) as w:
        w.write({"a": 1})
    with JsonlWriter(path) as w:
        w.write({"a": 2})
    assert read_jsonl(path) == [{"a": 1}, {"a": 2}]


class _HalfThenFull:
    """A file handle whose disk fills after `room` bytes: a partial write, then ENOSPC."""

    def __init__(self, fh: Any, room: int) -> None:
        self.fh, self.room = fh, room

    def write(self, data: memoryview) -> int:
        if self.room <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = self.fh.write(data[: self.room])
        self.room -= n
        return n

    def fileno(self) -> int:
        return int(self.fh.fileno())

    def close(self) -> None:
        self.fh.close()


def test_a_row_the_disk_refuses_is_cut_off_and_the_writer_stays_failed(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    w = JsonlWriter(path)
    w.write({"whole": 1})
    size = path.stat().st_size
    w._fh = _HalfThenFull(w._fh, room=5)  # type: ignore[assignment]
    with pytest.raises(WriteFailed) as err:
        w.write({"torn": "x" * 100})
    assert err.value.disk and "No space left" in str(err.value) and str(path) in str(err.value)
    assert path.stat().st_size == size  # the partial row was cut back
    with pytest.raises(WriteFailed):  # later rows are refused at once
        w.write({"later": 1})
    w.close()
    assert read_jsonl(path) == [{"whole": 1}]
    with pytest.raises(RuntimeError, match="is closed"):
        w.write({"after": 1})


def test_an_unopenable_file_is_write_failed_not_a_traceback(tmp_path: Path) -> None:
    with pytest.raises(WriteFailed, match="cannot write"):
        JsonlWriter(tmp_path / "no-such-dir" / "rows.jsonl")
    err = WriteFailed(tmp_path, OSError(errno.EACCES, "Permission denied"))
    assert not err.disk  # a permission problem is not the disk's fault


def test_read_jsonl_skips_only_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    assert read_jsonl(path) == []  # absent: no rows
    path.write_text('{"a": 1}\n\n{"a": 2}\n{"a": 3, "b"')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert read_jsonl(path) == [{"a": 1}, {"a": 2}]
    assert any("torn last line" in str(w.message) for w in caught)
    path.write_text('{"a": 1}\n{"a": \n{"a": 3}\n')
    with pytest.raises(ValueError, match="line 2 is not JSON"):
        read_jsonl(path)


def test_atomic_writes_replace_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "m.json"
    write_json_atomic(target, {"v": 1})
    assert json.loads(target.read_text()) == {"v": 1}
    write_text_atomic(target, "new")
    assert target.read_text() == "new"
    assert not list(tmp_path.glob("*.tmp"))
    with pytest.raises(WriteFailed):
        write_text_atomic(tmp_path / "missing" / "x.txt", "x")


def test_run_dirs_have_unique_ids_with_a_safe_slug(tmp_path: Path) -> None:
    ids = {new_run_dir(tmp_path, "my test/../x y")[0] for _ in range(5)}
    assert len(ids) == 5
    for run_id in ids:
        assert re.fullmatch(r"\d{8}T\d{6}Z-my-test----x-y-[0-9a-f]{6}", run_id), run_id
        assert (tmp_path / run_id).is_dir()
    run_id, _ = new_run_dir(tmp_path, "")
    assert "-run-" in run_id  # an empty name still gives a readable id
    long_id, _ = new_run_dir(tmp_path, "n" * 100)
    assert "n" * 40 in long_id and "n" * 41 not in long_id


def test_run_dir_reserves_space_and_gives_it_back(tmp_path: Path) -> None:
    rd = RunDir(tmp_path, "r")
    assert (tmp_path / RESERVE).stat().st_size == RESERVE_BYTES
    with pytest.raises(RuntimeError, match="not built yet"):
        rd.update(test="ttft")
    rd.save_manifest()  # nothing to save yet: no file
    assert not (tmp_path / "manifest.json").exists()
    rd.requests.write({"request_id": 1})
    extra = rd.writer("noise.jsonl")
    extra.write({"bytes": 3})
    extra.close()
    rd.close()
    assert not (tmp_path / RESERVE).exists()
    assert read_jsonl(tmp_path / "requests.jsonl") == [{"request_id": 1}]
    assert read_jsonl(tmp_path / "noise.jsonl") == [{"bytes": 3}]


def test_read_manifest_and_timestamps(tmp_path: Path) -> None:
    write_json_atomic(tmp_path / "manifest.json", {"run_id": "x"})
    assert read_manifest(tmp_path) == {"run_id": "x"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", utc_now_iso())
