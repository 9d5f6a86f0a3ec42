"""A real trace as it comes: a row over the model's context refused, skipped or clipped
(`trace.over_context`), counted in the record; the manifest's load is the trace as run, not the probe."""

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

    run_dir, _, _ = await _replay(tmp_path, "skip")
    write_report(run_dir, quiet=True)
    summary = json.loads((run_dir / "summary.json").read_text())
    report = (run_dir / "report.md").read_text()
    replay = summary["replay"]
    hits = replay["tables"][0]
    assert hits["caption"].startswith("hits") and "ideal" in " ".join(hits["head"])
    for table in replay["tables"]:  # every row of every table, cell for cell, is in the report
        for row in table["rows"]:
            assert "| " + " | ".join(row) + " |" in report, row
    assert any("1 skipped, 0 clipped" in p for p in replay["paragraphs"])
    assert "1 skipped, 0 clipped" in report
