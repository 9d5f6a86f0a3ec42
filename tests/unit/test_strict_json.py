"""Every JSON kvbench writes is strict JSON: `null`, never NaN or Infinity (jq, most parsers refuse those)."""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kvbench.results import JsonlWriter, read_jsonl, write_json_atomic
from kvbench.strict_json import dumps, to_strict

ROOT = Path(__file__).resolve().parents[2]


def strict_loads(text: str):
    def refuse(constant: str):
        raise ValueError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


NON_FINITE = {
    "mean": float("nan"),
    "p99": float("inf"),
    "low": -float("inf"),
    "ok": 1.5,
    "nested": [{"x": np.float64("nan"), "y": np.float32(2.5)}, (float("nan"), 3)],
    "count": np.int64(7),
    "path": Path("/tmp/x"),
}


def test_non_finite_floats_become_null_and_finite_values_survive():
    data = strict_loads(dumps(NON_FINITE, indent=2))
    assert data == {
        "mean": None,
        "p99": None,
        "low": None,
        "ok": 1.5,
        "nested": [{"x": None, "y": 2.5}, [None, 3]],
        "count": 7,
        "path": "/tmp/x",
    }
    # the plain json module writes NaN here: the check above can fail
    with pytest.raises(ValueError):
        strict_loads(json.dumps({"mean": float("nan")}))


def test_compact_and_clean_data_is_written_as_json_dumps_would():
    row = {"a": 1, "b": [1.0, 2.5], "c": "é"}
    assert dumps(row, compact=True) == json.dumps(row, separators=(",", ":"))
    assert to_strict([math.nan, {"k": math.inf}]) == [None, {"k": None}]


def test_a_circular_reference_is_still_an_error():
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular"):
        dumps(loop)


def test_run_directory_writers_are_strict(tmp_path):
    with JsonlWriter(tmp_path / "rows.jsonl") as w:
        w.write({"ttft_ms": float("nan"), "ok": True})
        w.write({"ttft_ms": 12.5, "ok": True})
    text = (tmp_path / "rows.jsonl").read_text()
    assert [strict_loads(line) for line in text.splitlines()] == [
        {"ttft_ms": None, "ok": True},
        {"ttft_ms": 12.5, "ok": True},
    ]
    assert read_jsonl(tmp_path / "rows.jsonl")[0]["ttft_ms"] is None
    write_json_atomic(tmp_path / "deltas.json", {"hit_rate": float("nan"), "tokens": 10})
    assert strict_loads((tmp_path / "deltas.json").read_text()) == {"hit_rate": None, "tokens": 10}


def test_the_committed_benchmark_results_are_strict_json():
    files = sorted((ROOT / "benchmarks" / "results").glob("*.json"))
    assert files, "benchmarks/results/*.json is missing"
    for path in files:
        strict_loads(path.read_text(encoding="utf-8"))


@pytest.mark.slow
def test_every_json_file_of_a_run_is_strict(tmp_path):
    args = ["run", "ttft", "--lengths", "300", "--max-tokens", "4", "--output-dir", str(tmp_path), "-q"]
    done = subprocess.run(
        [sys.executable, "-m", "kvbench", *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    (run_dir,) = tmp_path.iterdir()
    seen = 0
    for path in sorted(run_dir.rglob("*.json*")):
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines() if path.suffix == ".jsonl" else [text]
        for line in filter(str.strip, lines):
            strict_loads(line)
        seen += 1
    assert seen >= 4  # manifest, metrics deltas, requests, summary at least
