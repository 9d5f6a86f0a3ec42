"""A real trace as it comes: a row over the model's context refused, skipped or clipped
(`trace.over_context`), counted in the record; the manifest's load and trace are the trace as run,
not the probe; a window's ideal beside the one it would have had with the trace's history cached."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbench.results import read_jsonl
from kvbench.results.reading import load_record
from kvbench.results.replay_rows import REPLAY_SUMMARY
from kvbench.run.runner import RunOptions, run_scenario
from kvbench.scenario import load_scenario

CONTEXT = 4096
LENGTHS = [1000, 2000, 9000, 1500]  # the third is over the context


def _trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.jsonl"
    rows = [
        {"timestamp": i * 10, "input_length": n, "output_length": 8,
         "hash_ids": [i * 100 + b for b in range(-(-n // 512))]}
        for i, n in enumerate(LENGTHS)
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


async def _replay(tmp_path: Path, policy: str):
    scn, _ = load_scenario(
        "replay",
        {
            "test.trace.path": str(_trace(tmp_path)),
            "test.trace.over_context": policy,
            "test.schedule": "concurrent",
            "test.concurrency": 1,
            "target.max_model_len": CONTEXT,
            "target.mock_profile": "ci",
        },
    )
    outcome = await run_scenario(scn, RunOptions(output_dir=tmp_path / "r", quiet=True, report=False))
    assert outcome.status == "complete" and outcome.exit_code == 0
    run_dir = outcome.run_dir
    summary = json.loads((run_dir / REPLAY_SUMMARY).read_text())
    rows = [r for r in read_jsonl(run_dir / "requests.jsonl") if r["phase"] == "replay"]
    return run_dir, summary, rows


async def test_skip_leaves_the_row_out_and_counts_it(tmp_path: Path) -> None:
    run_dir, summary, rows = await _replay(tmp_path, "skip")
    assert summary["context"] == {
        "policy": "skip",
        "max_model_len": CONTEXT,
        "skipped": 1,
        "clipped": 0,
        "skipped_why": {"over the context": 1},
    }
    assert sorted(r["prompt_tokens_server"] for r in rows) == [1000, 1500, 2000]
    load = load_record(run_dir).manifest.load
    assert load is not None and load.kind == "replay-concurrent" and load.requests == 3
    assert load.prompt_count == 3 and (load.lengths.min, load.lengths.max) == (1000, 2000)
    assert load.max_tokens == 8 and load.concurrency == 1


async def test_clip_cuts_the_prompt_to_fit_with_its_answer(tmp_path: Path) -> None:
    run_dir, summary, rows = await _replay(tmp_path, "clip")
    assert summary["context"]["clipped"] == 1 and summary["context"]["skipped"] == 0
    tokens = [r["prompt_tokens_server"] for r in sorted(rows, key=lambda r: r["request_id"])]
    assert sorted(tokens) == [1000, 1500, 2000, CONTEXT - 8]  # token-exact after the clip
    replayed = sorted(read_jsonl(run_dir / "replay.jsonl"), key=lambda r: r["index"])
    assert [r["input_length"] for r in replayed] == [1000, 2000, CONTEXT - 8, 1500]
    assert replayed[2]["blocks"] == -(-(CONTEXT - 8) // 512)


def test_fail_names_the_row_and_the_option(tmp_path: Path, run_cli) -> None:
    trace = _trace(tmp_path)
    code, _, err = run_cli(
        "run", "replay", "--trace", str(trace), "--set", f"target.max_model_len={CONTEXT}",
        "--output-dir", str(tmp_path / "r"), "-q",
    )  # fmt: skip
    assert code == 2
    (line,) = [x for x in err.splitlines() if x.strip()]
    assert f"{trace}:3: input_length: 9000" in line and "trace.over_context=skip or clip" in line


@pytest.mark.parametrize("policy", ["maybe"])
def test_an_unknown_policy_is_one_line(tmp_path: Path, run_cli, policy: str) -> None:
    code, _, err = run_cli(
        "validate", "replay", "--set", f"test.trace.path={_trace(tmp_path)}",
        "--set", f"test.trace.over_context={policy}",
    )  # fmt: skip
    assert code == 2 and "over_context" in err and "Traceback" not in err


async def test_summary_json_carries_the_replay_tables_the_report_shows(tmp_path: Path) -> None:
    from kvbench.report.render import write_report
    from kvbench.report.replay.section import HIT_HEAD
    from kvbench.report.summary_model import RunSummary

    run_dir, _, _ = await _replay(tmp_path, "skip")
    write_report(run_dir, quiet=True)
    summary = json.loads((run_dir / "summary.json").read_text())
    report = (run_dir / "report.md").read_text()
    replay = RunSummary.model_validate(summary).replay  # typed: the file reads back as the model
    assert replay is not None
    hits = replay.tables[0]
    assert hits.caption.startswith("hits") and hits.head == HIT_HEAD
    for table in replay.tables:  # every row of every table, cell for cell, is in the report
        for row in table.rows:
            assert "| " + " | ".join(row) + " |" in report, row
    (h,) = replay.hits  # one phase: the typed row is the table's row, figure for figure
    col = dict(zip(HIT_HEAD, hits.rows[0], strict=True))
    assert col["phase"] == h.phase == "replay" and col["requests"] == str(h.requests) == "3"
    assert col["prompt tokens"] == f"{h.prompt_tokens:,}" == "4,500"
    assert h.ideal == 0.0 and col["ideal (trace)"] == "0.0%"  # no row shares a block with another
    for name, value in (("reported", h.reported), ("mock truth", h.mock_truth)):
        assert value is not None and col[name] == f"{100 * value:.1f}%"
    for name, value in (("gap", h.gap), ("of it: alignment", h.alignment), ("of it: rest", h.rest)):
        assert value is not None and col[name] == f"{100 * value:+.2f} pts"
    assert h.gap == pytest.approx(h.reported - h.ideal) and col["not reported"] == str(h.not_reported)
    assert replay.context is not None and (replay.context.skipped, replay.context.policy) == (1, "skip")
    assert replay.rows_before == 0 and replay.ideal_with_history is None
    reasons = "1 skipped (1 over the context), 0 clipped"
    assert any(reasons in p for p in replay.paragraphs)
    assert reasons in report


async def test_run_table_shows_the_trace_not_the_probe(tmp_path: Path) -> None:
    from kvbench.report.render import write_report

    run_dir, _, _ = await _replay(tmp_path, "skip")
    write_report(run_dir, quiet=True)
    report = (run_dir / "report.md").read_text()
    run_table = report[report.index("## Run") : report.index("\n## ", report.index("## Run") + 1)]
    trace = tmp_path / "trace.jsonl"
    assert f"| trace | {trace} (mooncake, 512 tokens a block) |" in run_table
    assert (
        "| trace rows replayed | 3 of 4 selected; 1 skipped (1 over the context), 0 clipped: longer than "
        "the model's context 4,096 with their answer (trace.over_context=skip) |"
    ) in run_table
    assert "| trace pace | concurrent: a closed loop, in trace order; the whole trace |" in run_table
    # the load rows are the trace's too: its three rows and their lengths, not the 16-token probe
    assert "| prompts | 3 |" in run_table and "| prompt lengths (tokens) | 1,000-2,000 (trace) |" in run_table
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["run"]["trace"]["rows"] == 3 and summary["run"]["trace"]["skipped"] == 1


def test_console_says_probe_and_folds_the_over_context_note(tmp_path: Path, kvbench) -> None:
    code, out, err = kvbench(
        "run", "replay", "--trace", str(_trace(tmp_path)), "--set", f"target.max_model_len={CONTEXT}",
        "--set", "test.trace.over_context=skip", "--set", "target.mock_profile=ci",
        "--output-dir", str(tmp_path / "r"), "--no-report",
    )  # fmt: skip
    assert code == 0, err
    text = out + err
    assert "built a 16-token probe to check the server before the replay test" in text
    assert text.count("1 row(s) skipped") == 2  # once at the start, once in the end line
    (end,) = [line for line in text.splitlines() if "requests (0 failed) from" in line]
    assert "3 requests" in end and "1 row(s) skipped, 0 clipped over the context 4096" in end


# A window (start_ms 15) over five rows of 512-token blocks; the 9000-token row is over the context.
# Rows before the window: [1,2] and [1,3]. In the window: [1,2,4] (1536 tokens) then [1,3] (1024).
# From an empty cache: 0 + 512 (block 1, from the window's first row) = 512 of 2560 = 20%.
# With the two earlier rows cached: 1024 + 1024 = 2048 of 2560 = 80%.
WINDOW_ROWS = [
    (0, 1024, [1, 2]),
    (10, 1024, [1, 3]),
    (20, 1536, [1, 2, 4]),
    (30, 9000, list(range(500, 518))),
    (40, 1024, [1, 3]),
]
OWN_IDEAL, HISTORY_IDEAL = 512 / 2560, 2048 / 2560


def _window_trace(tmp_path: Path) -> Path:
    path = tmp_path / "window.jsonl"
    rows = [{"timestamp": t, "input_length": n, "output_length": 8, "hash_ids": ids}
            for t, n, ids in WINDOW_ROWS]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


async def _window_replay(tmp_path: Path) -> Path:
    scn, _ = load_scenario(
        "replay",
        {
            "test.trace.path": str(_window_trace(tmp_path)),
            "test.trace.over_context": "skip",
            "test.trace.start_ms": 15,
            "test.trace.window_ms": 100,
            "test.trace.speedup": 2,
            "target.max_model_len": CONTEXT,
            "target.mock_profile": "ci",
        },
    )
    outcome = await run_scenario(scn, RunOptions(output_dir=tmp_path / "w", quiet=True, report=False))
    assert outcome.status == "complete" and outcome.exit_code == 0
    return outcome.run_dir


async def test_manifest_trace_is_the_window_as_run(tmp_path: Path) -> None:
    run_dir = await _window_replay(tmp_path)
    trace = load_record(run_dir).manifest.trace
    assert trace is not None
    assert trace.path == str(tmp_path / "window.jsonl") and trace.format == "mooncake"
    assert trace.block_tokens == 512 and trace.rows == 2 and trace.skipped == 1 and trace.clipped == 0
    assert trace.over_context == "skip" and trace.max_model_len == CONTEXT
    assert (trace.schedule, trace.speedup, trace.start_ms, trace.window_ms, trace.limit) == (
        "fixed", 2.0, 15.0, 100.0, None,
    )  # fmt: skip
    assert trace.rows_before == 2 and trace.starts_cold
    assert trace.ideal_with_history == pytest.approx(HISTORY_IDEAL)
    written = json.loads((run_dir / "manifest.json").read_text())["trace"]
    assert written["rows"] == 2 and written["skipped"] == 1


async def test_a_whole_trace_has_no_history(tmp_path: Path) -> None:
    run_dir, _, _ = await _replay(tmp_path, "skip")
    trace = load_record(run_dir).manifest.trace
    assert trace is not None and trace.rows == 3 and trace.skipped == 1
    assert trace.rows_before == 0 and not trace.starts_cold and trace.ideal_with_history is None
    assert trace.skipped_why == {"over the context": 1}
    # prompts.jsonl of a replay is the 16-token probe, and the manifest says so
    prompts = json.loads((run_dir / "manifest.json").read_text())["prompts"]
    assert prompts["role"] == "probe" and prompts["count"] == 1


async def test_clip_records_why_each_row_was_skipped(tmp_path: Path) -> None:
    """Under clip a row is skipped only when its answer alone fills the context: the manifest and
    the report's paragraph and Run table give that reason with its count, not just a total."""
    from kvbench.report.render import write_report

    path = tmp_path / "trace.jsonl"
    rows = [(1000, 8), (9000, 8), (1200, CONTEXT + 10), (800, 8)]  # clipped; answer fills the context
    path.write_text("".join(
        json.dumps({"timestamp": i * 10, "input_length": n, "output_length": out,
                    "hash_ids": [i * 100 + b for b in range(-(-n // 512))]}) + "\n"
        for i, (n, out) in enumerate(rows)
    ))  # fmt: skip
    scn, _ = load_scenario(
        "replay",
        {
            "test.trace.path": str(path),
            "test.trace.over_context": "clip",
            "test.schedule": "concurrent",
            "target.max_model_len": CONTEXT,
            "target.mock_profile": "ci",
        },
    )
    outcome = await run_scenario(scn, RunOptions(output_dir=tmp_path / "r", quiet=True, report=False))
    assert outcome.exit_code == 0
    trace = load_record(outcome.run_dir).manifest.trace
    assert trace is not None and (trace.rows, trace.skipped, trace.clipped) == (3, 1, 1)
    assert trace.skipped_why == {"answer alone fills the context": 1}
    write_report(outcome.run_dir, quiet=True)
    report = (outcome.run_dir / "report.md").read_text()
    assert "1 skipped (1 answer alone fills the context), 1 clipped to fit" in report
    row = "| trace rows replayed | 3 of 4 selected; 1 skipped (1 answer alone fills the context), 1 clipped"
    assert row in report


def test_history_ideal_by_construction() -> None:
    from kvbench.run.replay.record import history_ideal
    from kvbench.traces import TraceRow

    rows = [TraceRow(i, t, n, 8, tuple(ids)) for i, (t, n, ids) in enumerate(WINDOW_ROWS)]
    got = history_ideal(rows[:2], [rows[2], rows[4]], 512)
    assert got.rows_before == 2
    assert got.own == pytest.approx(OWN_IDEAL) and got.with_history == pytest.approx(HISTORY_IDEAL)
    assert history_ideal([], rows[2:3], 512).with_history == 0.0  # nothing before, nothing to gain


async def test_window_paragraph_sets_its_ideal_beside_the_one_with_history(tmp_path: Path) -> None:
    from kvbench.report.render import write_report
    from kvbench.report.summary_model import RunSummary

    run_dir = await _window_replay(tmp_path)
    write_report(run_dir, quiet=True)
    replay = RunSummary.model_validate_json((run_dir / "summary.json").read_text()).replay
    assert replay is not None
    (h,) = replay.hits  # the replayed rows' own ideal, as realise counted it, is the one by construction
    assert h.ideal == pytest.approx(OWN_IDEAL)
    assert replay.ideal_with_history == pytest.approx(HISTORY_IDEAL) and replay.rows_before == 2
    (para,) = [p for p in replay.paragraphs if "empty cache" in p]
    assert para.startswith(
        "**This window starts from an empty cache:** ideal 20.0%; with the trace's 2 earlier rows cached "
        "it would be 80.0% (rows from 15 ms for 100 ms of the trace)"
    )
    report = (run_dir / "report.md").read_text()
    assert para in report
    assert (
        "| trace pace | fixed: the trace's own timestamps at 2x; window from 15 ms for 100 ms of trace time, "
        "from an empty cache (2 earlier rows not cached) |"
    ) in report
