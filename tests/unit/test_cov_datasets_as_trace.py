"""A lengths dataset turned into a replay's trace: the file it writes (arrival order kept, output
lengths defaulted, hash ids as the dataset made them), read back by the trace reader, its name
following the dataset's bytes, and text datasets refused naming the line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbench.datasets import open_dataset
from kvbench.datasets.as_trace import replay_overrides
from kvbench.errors import UsageError
from kvbench.traces.reader import open_trace

ROWS = [
    {"timestamp": 100, "input_length": 1024, "output_length": 16, "hash_ids": [7, 8]},
    {"input_length": 600, "hash_ids": [7]},  # no time of its own, no output length
    {"timestamp": 250.5, "input_length": 512, "output_length": 4},
    {"timestamp": 50, "input_length": 300},  # earlier than the one before: arrives after it
]


def _write(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_trace_keeps_arrival_order_and_the_datasets_blocks(tmp_path: Path) -> None:
    data = _write(tmp_path / "mine.v1.jsonl", ROWS)
    got = replay_overrides(str(data), "mooncake_trace", tmp_path / "out", max_tokens=32)
    out = Path(got["test.trace.path"])
    assert got["test.trace.format"] == "mooncake" and got["test.trace.block_tokens"] == 512
    assert out.parent == (tmp_path / "out" / "datasets").resolve()
    assert out.name.startswith("mine-mooncake_trace-") and out.suffix == ".jsonl"
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert [w["timestamp"] for w in written] == [100, 100, 250.5, 250.5]
    assert [w["output_length"] for w in written] == [16, 32, 4, 32]
    assert [w["input_length"] for w in written] == [r["input_length"] for r in ROWS]
    ds = open_dataset(data, "mooncake_trace")
    assert [w["hash_ids"] for w in written] == [list(r.hash_ids) for r in ds.requests]
    assert written[1]["hash_ids"][0] == 7 and len(written[1]["hash_ids"]) == 2  # 600 tokens: 2 blocks
    # the replay reads it back as the same rows, in order (a time going back would raise here)
    rows = list(open_trace(out, format="mooncake", require_monotonic=True))
    assert [(r.timestamp_ms, r.input_length, r.output_length) for r in rows] == [
        (w["timestamp"], w["input_length"], w["output_length"]) for w in written
    ]
    assert [list(r.hash_ids) for r in rows] == [w["hash_ids"] for w in written]


def test_the_file_name_follows_the_datasets_bytes(tmp_path: Path) -> None:
    data = _write(tmp_path / "d.jsonl", ROWS)
    first = replay_overrides(str(data), "auto", tmp_path, max_tokens=8)["test.trace.path"]
    assert replay_overrides(str(data), "auto", tmp_path, max_tokens=8)["test.trace.path"] == first
    _write(data, ROWS[:2])
    assert replay_overrides(str(data), "auto", tmp_path, max_tokens=8)["test.trace.path"] != first


def test_a_text_request_is_refused_naming_its_line(tmp_path: Path) -> None:
    data = _write(tmp_path / "t.jsonl", [ROWS[0], {"text_input": "hello there", "output_length": 3}])
    with pytest.raises(UsageError) as exc:
        replay_overrides(str(data), "mooncake_trace", tmp_path, max_tokens=8)
    assert exc.value.message.startswith(f"{data}:2: mooncake_trace: a replay needs lengths or hash ids")
    assert not (tmp_path / "datasets").exists()  # refused before writing anything
