"""The replay report (kvbench.report.replay) on a hand-written run directory: the hit table's shares,
the gap's split, TTFT by reusable share, lateness, the window's words and the trace rows of the Run
table, each worked out by hand from the rows below."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbench.report.replay import section as S
from kvbench.report.replay.trace_rows import trace_rows
from kvbench.results.schema import TraceRecord

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "fixture_runs" / "20261130T140312Z-ttft-3f9a1c"

# (id, phase, index, input, ideal, engine, status, reported cached, ttft ms, lateness ms, mock's cached)
ROWS = [
    ("r0", "p1", 0, 1000, 0, 0, "ok", 0, 100.0, 1.0, 0),
    ("r1", "p1", 1, 1000, 512, 496, "ok", 480, 50.0, 2.0, 496),
    ("r2", "p2", 2, 2000, 2000, 1984, "ok", None, 20.0, 3.0, 1984),  # the server did not say
    ("r3", "p2", 3, 1000, 800, 784, "error", None, None, 4.0, None),
]
TRACE = {
    "path": "t.jsonl",
    "format": "mooncake",
    "block_tokens": 512,
    "rows": 4,
    "schedule": "fixed",
    "start_ms": 500.0,
    "window_ms": 1000.0,
    "rows_before": 7,
    "starts_cold": True,
    "ideal_with_history": 0.9,
}
SUMMARY = {
    "trace": {"path": "t.jsonl", "format": "mooncake", "block_tokens": 512},
    "engine_block_tokens": 16,
    "schedule": "fixed",
    "token_exact_sample": {"checked": 3, "exact": 2},
    "context": {"policy": "skip", "max_model_len": 4096, "skipped": 1, "clipped": 0},
    "selection": {"start_ms": 500.0, "window_ms": 1000.0},
    "lateness": {"warning": "the sender fell behind the trace"},
}


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _run(
    tmp: Path, rows=ROWS, engine_known: bool = True, trace: dict | None = TRACE, summary=SUMMARY
) -> Path:
    d = tmp / "replay-run"
    d.mkdir(parents=True)
    m = json.loads((FIXTURE / "manifest.json").read_text(encoding="utf-8"))
    m["trace"] = trace
    (d / "manifest.json").write_text(json.dumps(m), encoding="utf-8")
    replay, reqs, truth = [], [], []
    for rid, phase, index, n, ideal, engine, status, cached, ttft, late, mock in rows:
        replay.append(
            {
                "request_id": rid,
                "phase": phase,
                "index": index,
                "input_length": n,
                "expected_cached_tokens": ideal,
                "engine_expected_tokens": engine if engine_known else None,
            }
        )
        reqs.append(
            {
                "request_id": rid,
                "phase": phase,
                "label": "replay",
                "status": status,
                "cached_tokens": cached,
                "prompt_tokens_server": n,
                "ttft_ms": ttft,
                "dispatch_delay_ms": late,
            }
        )
        if mock is not None:
            truth.append({"request_id": rid, "cached_tokens": mock})
    _jsonl(d / "replay.jsonl", replay)
    _jsonl(d / "requests.jsonl", reqs)
    _jsonl(d / "mock_ground_truth.jsonl", truth)
    if summary is not None:
        (d / "replay.json").write_text(json.dumps(summary), encoding="utf-8")
    return d


def test_hit_table_shares_per_phase_and_overall(tmp_path: Path) -> None:
    rs = S.replay_summary(_run(tmp_path))
    assert rs is not None
    p1, p2, overall = rs.hits
    assert (p1.phase, p1.requests, p1.prompt_tokens) == ("p1", 2, 2000)
    assert p1.ideal == pytest.approx(512 / 2000)
    assert p1.engine_blocks == pytest.approx(496 / 2000)
    assert p1.reported == pytest.approx(480 / 2000)
    assert p1.mock_truth == pytest.approx(496 / 2000)
    assert p1.gap == pytest.approx((480 - 512) / 2000)
    assert p1.alignment == pytest.approx((496 - 512) / 2000)
    assert p1.rest == pytest.approx((480 - 496) / 2000)
    # p2: the one ok request did not report, so there is no reported share and it is counted apart
    assert p2.reported is None and p2.gap is None and p2.not_reported == 1 and p2.requests == 2
    assert p2.ideal == pytest.approx(1.0)
    assert overall.phase == "overall" and overall.prompt_tokens == 4000
    assert overall.ideal == pytest.approx(2512 / 4000)
    assert overall.reported == pytest.approx(480 / 2000)  # over the requests that said
    assert overall.mock_truth == pytest.approx(2480 / 4000)
    assert rs.ideal_with_history == 0.9 and rs.rows_before == 7
    assert rs.context is not None and rs.context.skipped == 1


def test_hit_cells_and_the_other_tables(tmp_path: Path) -> None:
    rs = S.replay_summary(_run(tmp_path))
    assert rs is not None
    hits, ttft, late = rs.tables
    assert hits.head == S.HIT_HEAD and hits.caption == S.HIT_CAPTION
    assert hits.rows[0] == [
        "p1",
        "2",
        "2,000",
        "25.6%",
        "24.8%",
        "24.0%",
        "24.8%",
        "-1.60 pts",
        "-0.80 pts",
        "-0.80 pts",
        "0",
    ]
    assert hits.rows[1][5] == "n/a" and hits.rows[1][-1] == "1"
    # one ok request in each reusable-share bucket that has any: 0, 0.512 and 1.0
    assert ttft.rows == [
        ["0%", "1", "1,000", "100", "100"],
        ["(50, 75%]", "1", "1,000", "50.0", "50.0"],
        ["(75, 100%]", "1", "2,000", "20.0", "20.0"],
    ]
    # lateness counts every sent request (the failed one too): 1, 2, 3, 4 ms
    assert late.rows == [["fixed", "4", "2.50", "3.97", "4.00", "open loop: from the arrival time"]]


def test_paragraphs_say_the_check_the_context_the_window_and_the_warning(tmp_path: Path) -> None:
    rs = S.replay_summary(_run(tmp_path))
    assert rs is not None
    trace, exact, context, window, warning = rs.paragraphs
    assert trace.startswith("Trace t.jsonl (mooncake, 512 tokens a block; engine block 16), schedule fixed.")
    assert exact == "Token-exact check: 2 of 3 prompts counted by the server as their input_length."
    assert context.startswith("Rows over the model's context 4096: 1 skipped, 0 clipped")
    assert "ideal 62.8%; with the trace's 7 earlier rows cached it would be 90.0%" in window
    assert "(rows from 500 ms for 1000 ms of the trace)" in window
    assert warning == "**Warning:** the sender fell behind the trace."
    sec = S.replay_section(rs)
    assert sec is not None and sec.title.startswith("Replay") and len(sec.tables) == 3
    assert S.replay_section(None) is None


def test_unknown_engine_blocks_leave_alignment_out_and_a_closed_loop_says_so(tmp_path: Path) -> None:
    summary = {"schedule": "concurrent"}
    rs = S.replay_summary(_run(tmp_path, engine_known=False, trace=None, summary=summary))
    assert rs is not None
    assert all(h.engine_blocks is None and h.alignment is None and h.rest is None for h in rs.hits)
    assert rs.ideal_with_history is None and rs.context is None
    assert rs.tables[-1].rows[0][-1] == "closed loop: from a worker being free"
    assert len(rs.paragraphs) == 1 and "engine block unknown" in rs.paragraphs[0]


def test_window_paragraph_for_each_kind_of_window() -> None:
    hits = S.ReplayHits(
        phase="overall",
        requests=1,
        prompt_tokens=1,
        ideal=0.5,
        engine_blocks=None,
        reported=None,
        mock_truth=None,
        gap=None,
        alignment=None,
        rest=None,
        not_reported=0,
    )
    assert S.window_paragraph({}, None, hits) is None
    old = S.window_paragraph({"start_ms": 100.0}, None, hits)
    assert old is not None and "rows from 100 ms to the end of the trace" in old and "trace analyze" in old
    first = TraceRecord.model_validate({**TRACE, "starts_cold": False})
    assert "starts at the trace's first row" in (S.window_paragraph({"window_ms": 50.0}, first, hits) or "")


def test_key_rows_and_plots(tmp_path: Path) -> None:
    d = _run(tmp_path)
    ((name, what, hits, tail),) = S.key_rows(d)
    assert (name, what) == ("replay hits", "trace ideal -> reported")
    assert hits == "62.8% -> 12.0% of prompt tokens"  # unreported counts as no hit here
    assert tail == "TTFT p50 50.0 ms, lateness p99 2.98 ms"
    paths = S.save_replay_plots(d)
    assert [p.name for p in paths] == ["replay_ttft_vs_reuse.png", "replay_hits_over_time.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)


def test_a_run_without_replay_rows_has_no_section(tmp_path: Path) -> None:
    d = _run(tmp_path)
    (d / "replay.jsonl").unlink()
    assert S.replay_frame(d).empty
    assert S.replay_summary(d) is None and S.key_rows(d) == [] and S.save_replay_plots(d) == []
    failed = [(*r[:6], "error", None, None, 1.0, None) for r in ROWS]
    d2 = _run(tmp_path / "x", rows=failed)
    assert S.key_rows(d2) == [] and S.save_replay_plots(d2) == []


def test_trace_rows_of_the_run_table() -> None:
    assert trace_rows(None) == []
    t = TraceRecord.model_validate(
        {
            **TRACE,
            "speedup": 2.0,
            "rows": 10,
            "skipped": 1,
            "clipped": 2,
            "over_context": "clip",
            "max_model_len": 4096,
            "limit": 10,
        }
    )
    (_, file), (_, rows), (_, pace) = trace_rows(t)
    assert file == "t.jsonl (mooncake, 512 tokens a block)"
    assert rows == (
        "10 of 11 selected; 1 skipped, 2 clipped: longer than the model's context 4,096 with "
        "their answer (trace.over_context=clip); at most 10 rows (trace.limit)"
    )
    assert pace == (
        "fixed: the trace's own timestamps at 2x; window from 500 ms for 1000 ms of trace time, "
        "from an empty cache (7 earlier rows not cached)"
    )
    whole = TraceRecord(path="t", format="weka", block_tokens=16, rows=3, schedule="concurrent")
    assert trace_rows(whole)[1][1] == "3 of 3 selected"
    assert trace_rows(whole)[2][1] == "concurrent: a closed loop, in trace order; the whole trace"
    tail = TraceRecord(path="t", format="weka", block_tokens=16, rows=3, schedule="poisson", start_ms=5.0)
    assert trace_rows(tail)[2][1] == "poisson; window from 5 ms to the trace's end"
