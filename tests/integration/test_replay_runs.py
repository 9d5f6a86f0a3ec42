"""The replay test against the embedded mock: its ground truth agrees with the trace analysis.

Alignment: the mock caches 16-token blocks and the traces here have 512 (mooncake) or 64 (weka)
token blocks, a multiple, so kvbench.traces.realise.engine_rows restates each row in the mock's
blocks and kvbench.traces.lru's rules (with block_tokens=16: whole blocks stored, at least one
token computed) give what the mock can reuse exactly, not only within one trace block. The
trace's own ideal (every id reusable) then differs from it only inside one trace block a row.
The schedule is one request at a time in trace order, so every row sees all rows before it
committed, as the analysis assumes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kvbench.mock.costs.timing import derive_params
from kvbench.mock.profiles import load_profile
from kvbench.results import read_jsonl
from kvbench.run.runner import RunOptions, run_scenario
from kvbench.scenario import load_scenario
from kvbench.traces import open_trace
from kvbench.traces.lru import expected_reusable_blocks, lru_hits
from kvbench.traces.realise import engine_rows

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "tests" / "data" / "replay" / "mooncake-small.jsonl"
MOCK_BLOCK = 16


async def replay(tmp_path: Path, trace: Path, **overrides: object):
    settings = {"test.trace.path": str(trace), "test.schedule": "concurrent", "test.concurrency": 1}
    scn, _ = load_scenario("replay", {**settings, **overrides})
    outcome = await run_scenario(scn, RunOptions(output_dir=tmp_path, quiet=True, report=False))
    assert outcome.status == "complete" and outcome.exit_code == 0
    run_dir = outcome.run_dir
    reqs = {r["request_id"]: r for r in read_jsonl(run_dir / "requests.jsonl") if r["phase"] == "replay"}
    truth = {t["request_id"]: t for t in read_jsonl(run_dir / "mock_ground_truth.jsonl")}
    rows = sorted(read_jsonl(run_dir / "replay.jsonl"), key=lambda r: r["index"])
    assert len(rows) == len(reqs) and all(reqs[r["request_id"]]["status"] == "ok" for r in rows)
    mock_hits = [truth[r["request_id"]]["cached_tokens"] for r in rows]
    return run_dir, rows, reqs, mock_hits


async def test_unbounded_mock_hits_equal_the_ideal(tmp_path):
    run_dir, rows, reqs, mock_hits = await replay(tmp_path, SMALL)
    trace = list(open_trace(SMALL))
    aligned = [
        h * MOCK_BLOCK for h in expected_reusable_blocks(engine_rows(trace, 512, MOCK_BLOCK), block_tokens=16)
    ]
    assert mock_hits == aligned == [r["engine_expected_tokens"] for r in rows]
    assert sum(mock_hits) > 0.3 * sum(r.input_length for r in trace)  # the trace shares a lot
    ideal = [
        min(h * 512, r.input_length) for h, r in zip(expected_reusable_blocks(trace), trace, strict=True)
    ]
    assert [r["expected_cached_tokens"] for r in rows] == ideal
    for got, want in zip(mock_hits, ideal, strict=True):
        assert want - 512 < got <= want  # the trace's ideal, within one trace block
    # what the client saw is what the mock did, and every prompt is token-exact
    assert [reqs[r["request_id"]]["cached_tokens"] for r in rows] == mock_hits
    assert [reqs[r["request_id"]]["prompt_tokens_server"] for r in rows] == [r.input_length for r in trace]
    # the per-run salt: the first request of the run found nothing cached
    assert mock_hits[0] == 0
    summary = json.loads((run_dir / "replay.json").read_text())
    assert summary["token_exact_sample"]["exact"] == summary["token_exact_sample"]["checked"] > 0
    assert summary["engine_block_tokens"] == MOCK_BLOCK


async def test_replay_from_two_local_worker_processes(tmp_path):
    # test.workers without a cluster: K processes on this machine, as load.workers does
    trace = list(open_trace(SMALL))
    run_dir, rows, reqs, mock_hits = await replay(
        tmp_path, SMALL, **{"test.workers": 2, "test.concurrency": 2, "test.trace.speedup": 10}
    )
    assert [r["trace_line"] for r in rows] == [t.line for t in trace]  # every row once
    sent = [reqs[r["request_id"]] for r in rows]
    assert {s["worker"] for s in sent} == {"load-0", "load-1"}
    assert [s["prompt_tokens_server"] for s in sent] == [t.input_length for t in trace]  # token-exact
    assert [s["cached_tokens"] for s in sent] == mock_hits and sum(mock_hits) > 0
    summary = json.loads((run_dir / "replay.json").read_text())
    assert summary["load_backend"] == "processes" and summary["lateness"]["n"] == len(trace)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    (phase,) = [ph for ph in manifest["phases"] if ph["name"] == "replay"]
    assert phase["load_backend"]["backend"] == "processes" and phase["load_backend"]["sent"] == len(trace)


async def test_bounded_mock_hits_equal_the_lru_simulation(tmp_path):
    capacity_blocks = 120  # well under the trace's ~4,700 mock blocks: eviction decides the hits
    profile = load_profile("ci")
    assert [n for n in ("G1", "G2", "G3", "G4") if profile.tiers.by_name(n).enabled] == ["G4"]
    params = derive_params(profile)
    assert params.block_tokens == MOCK_BLOCK
    capacity = (capacity_blocks + 0.5) * params.block_bytes
    _, rows, _, mock_hits = await replay(
        tmp_path, SMALL, **{"target.mock_overrides": {"tiers.G4.capacity_bytes": capacity}}
    )
    trace = list(open_trace(SMALL))
    sim = lru_hits(engine_rows(trace, 512, MOCK_BLOCK), [0, 0, 0, capacity_blocks], block_tokens=MOCK_BLOCK)
    expected = [h.blocks * MOCK_BLOCK for h in sim]
    assert mock_hits == expected
    unbounded = [r["engine_expected_tokens"] for r in rows]
    assert sum(mock_hits) < sum(unbounded)  # the capacity cost hits: the test can tell the two apart


async def test_weka_rows_realised_in_their_own_blocks(tmp_path):
    # WEKA: 64-token blocks, `t` in seconds, sessions; a hand-written shared prefix and a new turn
    trace = tmp_path / "weka.jsonl"
    rows = [
        {"t": 0.0, "in": 150, "out": 3, "hash_ids": [1, 2, 3], "session": "a"},
        {"t": 0.01, "in": 200, "out": 3, "hash_ids": [1, 2, 4, 5], "session": "a"},
        {"t": 0.02, "in": 100, "out": 3, "hash_ids": [6, 7], "session": "b"},
        {"t": 0.03, "in": 256, "out": 3, "hash_ids": [1, 2, 4, 5], "session": "a"},
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _, got, _, mock_hits = await replay(tmp_path, trace)
    parsed = list(open_trace(trace))
    assert open_trace(trace).format == "weka"
    aligned = [
        h * MOCK_BLOCK for h in expected_reusable_blocks(engine_rows(parsed, 64, MOCK_BLOCK), block_tokens=16)
    ]
    assert mock_hits == aligned == [0, 128, 0, 192]
    assert [r["expected_cached_tokens"] for r in got] == [0, 128, 0, 256]  # the trace's view: every id


def cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """`kvbench ARGS...` in this process; a command that succeeds returns instead of exiting."""
    from kvbench.cli import main

    monkeypatch.setattr(sys, "argv", ["kvbench", *args])
    code: int = 0
    try:
        main()
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_replay_writes_the_report(tmp_path, monkeypatch, capsys):
    code, out, err = cli(
        monkeypatch,
        capsys,
        "run",
        "replay",
        "--trace",
        str(SMALL),
        "--output-dir",
        str(tmp_path),
        "-q",
        "--set",
        "test.trace.speedup=20",
        "--set",
        "test.trace.limit=25",
    )
    assert code == 0, err
    assert "replay: 25 requests (0 failed)" in out
    (run_dir,) = tmp_path.iterdir()
    report = (run_dir / "report.md").read_text()
    assert "## Replay: hits vs the trace" in report and "| replay | 25 |" in report
    for png in ("replay_ttft_vs_reuse.png", "replay_hits_over_time.png"):
        assert (run_dir / png).stat().st_size > 10_000
    summary = json.loads((run_dir / "replay.json").read_text())
    assert summary["requests"] == 25 and summary["lateness"]["n"] == 25
    # the fixed schedule: each request's planned time is the trace's, 20 times faster
    rows = sorted(read_jsonl(run_dir / "replay.jsonl"), key=lambda r: r["index"])
    t0 = rows[0]["timestamp_ms"]
    for r in rows:
        assert r["scheduled_offset_s"] == pytest.approx((r["timestamp_ms"] - t0) / 1000 / 20)


def test_cli_bad_trace_row_is_one_line(tmp_path, run_cli):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"timestamp": 0, "input_length": 100, "output_length": 2, "hash_ids": [1]}\n'
        '{"timestamp": 5, "input_length": -3, "output_length": 2, "hash_ids": [1]}\n'
    )
    code, _, err = run_cli("run", "replay", "--trace", str(bad), "--output-dir", str(tmp_path / "r"), "-q")
    assert code == 2
    (line,) = [x for x in err.splitlines() if x.strip()]
    assert f"{bad}:2: input_length" in line and "Traceback" not in err


async def test_bailian_turns_replay_in_trace_order(tmp_path):
    # Bailian: 16-token blocks (the mock's own), parent_chat_id chains; a later turn carries the
    # earlier turn's ids first, so its reuse is the trace's structure with nothing rebuilt. The turns
    # are 200 ms apart: each has ended (and its blocks are cached) before the next arrives, however
    # busy the machine (10 ms apart, a loaded 2-core machine let turn 4 arrive before turn 3 ended)
    trace = tmp_path / "bailian.jsonl"
    rows = [
        {"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.0, "input_length": 40, "output_length": 2,
         "type": "text", "turn": 1, "hash_ids": [11, 12, 13]},
        {"chat_id": 2, "parent_chat_id": -1, "timestamp": 0.2, "input_length": 20, "output_length": 2,
         "type": "text", "turn": 1, "hash_ids": [21, 22]},
        {"chat_id": 3, "parent_chat_id": 1, "timestamp": 0.4, "input_length": 70, "output_length": 2,
         "type": "text", "turn": 2, "hash_ids": [11, 12, 14, 15, 16]},
        {"chat_id": 4, "parent_chat_id": 3, "timestamp": 0.6, "input_length": 90, "output_length": 2,
         "type": "text", "turn": 3, "hash_ids": [11, 12, 14, 15, 16, 17]},
    ]  # fmt: skip
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _, got, _, mock_hits = await replay(tmp_path, trace, **{"test.schedule": "fixed"})
    assert [r["session"] for r in got] == ["1", "2", "1", "1"]
    # chat 3 reuses chat 1's two whole blocks; chat 4 all but its last partial block of chat 3's
    assert [r["expected_cached_tokens"] for r in got] == [0, 0, 32, 80]
    assert mock_hits == [r["engine_expected_tokens"] for r in got] == [0, 0, 32, 64]


def test_cli_fixed_schedule_needs_arrival_order(tmp_path, monkeypatch, capsys):
    shuffled = tmp_path / "shuffled.jsonl"
    shuffled.write_text(
        '{"timestamp": 10, "input_length": 100, "output_length": 2, "hash_ids": [1]}\n'
        '{"timestamp": 5, "input_length": 100, "output_length": 2, "hash_ids": [2]}\n'
    )
    args = ("run", "replay", "--trace", str(shuffled), "-q", "--no-report")
    code, _, err = cli(monkeypatch, capsys, *args, "--output-dir", str(tmp_path / "a"))
    assert code == 2 and f"{shuffled}:2: timestamp: goes back in time" in err and "Traceback" not in err
    # a closed loop in trace order does not need it
    code, out, err = cli(
        monkeypatch, capsys, *args, "--output-dir", str(tmp_path / "b"), "--set", "test.schedule=concurrent"
    )
    assert code == 0 and "replay: 2 requests (0 failed)" in out, err
