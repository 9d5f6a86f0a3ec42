"""AIPerf as a `make bench` peer (benchmarks/aiperf_driver.py): its records as the bench's rows, the skip."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import aiperf_driver
from bench_common import ttft_errors

MS = 1_000_000
OFFSET = 1_700_000_000 * 1_000_000_000  # CLOCK_REALTIME - CLOCK_MONOTONIC for this test


def _record(rid: str, start_mono: int, ttft_ms: float | None, error: dict | None = None) -> dict:
    """One profile_export.jsonl line, in AIPerf 0.13's shape (wall-clock ns, metrics in ms)."""
    metrics = {"request_latency": {"value": 70.0, "unit": "ms"}}
    if ttft_ms is not None:
        metrics["time_to_first_token"] = {"value": ttft_ms, "unit": "ms"}
    meta = {"session_num": 0, "x_request_id": rid, "request_start_ns": start_mono + OFFSET}
    meta["request_end_ns"] = start_mono + OFFSET + 70 * MS
    return {"metadata": meta, "metrics": metrics, "error": error}


def test_records_become_rows_matched_by_request_id_and_scored_like_every_tool():
    records = [
        _record("a", 1_000 * MS, 52.5),
        _record("b", 1_001 * MS, 51.0),
        _record("c", 1_002 * MS, None, error={"code": 500, "type": "HTTPError", "message": "boom"}),
    ]
    rows = aiperf_driver.rows_of(records, OFFSET)
    assert [r["request_id"] for r in rows] == ["a", "b", "c"]
    assert rows[0]["sent_ns"] == 1_000 * MS and rows[0]["first_ns"] == 1_000 * MS + 52_500_000
    assert rows[0]["end_ns"] == 1_070 * MS and not rows[2]["ok"] and rows[2]["first_ns"] is None
    # the server received each 0.5 ms after the send and wrote the first token 50 ms later
    gt = [
        {"request_id": rid, "conn": i, "received_ns": s + MS // 2, "first_token_ns": s + MS // 2 + 50 * MS}
        | {"end_ns": s + 70 * MS, "in_flight_at_receive": 1, "token_ns": []}
        for i, (rid, s) in enumerate((("a", 1_000 * MS), ("b", 1_001 * MS), ("c", 1_002 * MS)))
    ]
    gt += [
        {"request_id": f"warm{i}", "conn": i, "received_ns": 0, "first_token_ns": MS}
        | {"end_ns": 2 * MS, "in_flight_at_receive": 1, "token_ns": []}
        for i in range(3)
    ]  # each connection's first request came earlier, so a and b are scored
    res = ttft_errors(rows, gt, 1)
    assert res["n"] == 2 and res["failed"] == 1
    assert abs(res["error_mean_ms"] - (2.5 + 1.0) / 2) < 1e-9  # client TTFT 52.5 and 51.0 against 50
    assert abs(res["send_mean_ms"] - 0.5) < 1e-9


def test_without_an_index_the_bench_says_why_in_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("KVBENCH_BENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(aiperf_driver.sys, "executable", str(tmp_path / "no-python"))
    exe, why = aiperf_driver.aiperf_bin()
    assert exe is None and "\n" not in why
    assert f"AIPerf {aiperf_driver.AIPERF_VERSION} did not install" in why
    assert str(tmp_path / f"aiperf-{aiperf_driver.AIPERF_VERSION}") in why
