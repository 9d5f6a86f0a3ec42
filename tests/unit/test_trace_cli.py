"""`kvbench trace analyze|synth` from the command line: tables, files, and bad input as one line, exit 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "traces"
CI = ROOT / "scenarios" / "traces" / "ci.jsonl"


@pytest.fixture
def run_ok(monkeypatch, capsys):
    """`kvbench ARGS...` in this process for a command that succeeds (main returns): its stdout."""

    def run(*args: str) -> str:
        from kvbench.cli import main

        monkeypatch.setattr(sys, "argv", ["kvbench", *args])
        main()
        out = capsys.readouterr()
        assert "Traceback" not in out.err
        return out.out

    return run


def _one_line_exit_2(code: object, err: str) -> str:
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    "name,where",
    [
        ("bad-missing-field.jsonl", ":2: output_length: missing"),
        ("bad-negative-length.jsonl", ":3: output_length: must be >= 0"),
        ("bad-hash-ids-too-long.jsonl", ":2: hash_ids: 3 ids"),
        ("bad-not-json.jsonl", ":2: row: not JSON"),
        ("bad-unknown-format.jsonl", ":1: format: no trace format matches"),
        ("bad-wrong-type.jsonl", ":1: input_length: must be a whole number"),
    ],
)
def test_bad_trace_is_one_line_and_exit_2(run_cli, name: str, where: str) -> None:
    code, _out, err = run_cli("trace", "analyze", str(DATA / name))
    assert _one_line_exit_2(code, err).startswith(f"kvbench: {DATA / name}{where}")


@pytest.mark.parametrize(
    "args,words",
    [
        (["--tiers", "G1=80GB"], "--tiers: needs --model"),
        (["--tiers", "G9=1GB", "--model", "llama-3.1-8b"], "--tiers: 'G9=1GB'"),
        (["--model", "no-such-model"], "model: 'no-such-model'"),
        (["--mock-profile", "fixed-delay"], "no cache tiers"),
        (["--mock-profile", "laptop", "--model", "llama-3.1-8b"], "drop --tiers and --model"),
        (["--format", "csv"], "unknown format 'csv'"),
        (["--window-s", "0"], "--window-s"),
    ],
)
def test_bad_analyze_flags(run_cli, args: list[str], words: str) -> None:
    code, _out, err = run_cli("trace", "analyze", str(CI), *args)
    assert words in _one_line_exit_2(code, err)


def test_analyze_prints_the_table_and_writes_json_and_plots(run_ok, tmp_path: Path) -> None:
    out = tmp_path / "ana"
    text = run_ok(
        "trace",
        "analyze",
        str(DATA / "mooncake.jsonl"),
        "--model",
        "llama-3.1-8b",
        "--tiers",
        "G1=1GB",
        "--out",
        str(out),
    )
    assert "ideal hit rate   50.0% of blocks" in text
    assert "blocks           14, unique 7" in text
    doc = json.loads((out / "analysis.json").read_text())
    assert doc["ideal_hit_blocks"] == 7 and doc["lru"]["capacity_blocks"]["G1"] == int(
        1e9 // doc["block_bytes"]
    )
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == ["hit-rate-over-time.png", "lru-tiers.png", "reuse-distance.png", "working-set.png"]
    assert all((out / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)


def test_analyze_json_with_a_mock_profile(run_ok) -> None:
    text = run_ok("trace", "analyze", str(CI), "--mock-profile", "laptop", "--json")
    doc = json.loads(text)
    assert doc["rows"] == 300 and doc["lru"]["source"] == "mock profile laptop"
    assert 0 < doc["lru"]["block_hit_rate"] <= doc["ideal_block_hit_rate"]


def test_synth_writes_what_analyze_reads(run_ok, tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl.gz"
    text = run_ok(
        "trace",
        "synth",
        "-o",
        str(path),
        "--controls",
        "ci",
        "--rows",
        "50",
        "--set",
        "documents.zipf_s=2",
        "--format",
        "weka",
    )
    assert "wrote 50 rows" in text
    text = run_ok("trace", "analyze", str(path), "--json")
    doc = json.loads(text)
    assert (doc["rows"], doc["format"], doc["block_tokens"]) == (50, "weka", 64)


@pytest.mark.parametrize(
    "args,words",
    [
        (["--set", "documents.zipf=1"], "documents.zipf"),
        (["--set", "arrival.cv=3"], "arrival"),
        (["--rows", "0"], "rows"),
        (["--controls", "no-such-set"], "--controls: 'no-such-set'"),
        (["--set", "noequals"], "expected KEY=VALUE"),
    ],
)
def test_bad_synth_controls(run_cli, tmp_path: Path, args: list[str], words: str) -> None:
    code, _out, err = run_cli("trace", "synth", "-o", str(tmp_path / "x.jsonl"), *args)
    assert words in _one_line_exit_2(code, err)
    assert not (tmp_path / "x.jsonl").exists()
