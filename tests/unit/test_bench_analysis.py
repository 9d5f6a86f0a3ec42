"""`make bench`'s scoring (benchmarks/bench_common.py): one function for every tool's rows."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_common import completed_rate, ttft_errors

MS = 1_000_000


def _gt(rid: str, conn: int, received: int, first: int, tokens: list[int] | None = None) -> dict:
    return {
        "request_id": rid,
        "conn": conn,
        "received_ns": received,
        "first_token_ns": first,
        "end_ns": first + MS,
        "in_flight_at_receive": 1,
        "token_ns": tokens or [first],
    }


def _row(rid: str, sent: int, first: int, user: int | None = None) -> dict:
    return {"request_id": rid, "ok": True, "sent_ns": sent, "first_ns": first, "first_user_ns": user,
            "end_ns": first + MS}  # fmt: skip


def test_each_connections_first_request_is_counted_apart():
    gt = [
        _gt("a", 1, 10 * MS, 60 * MS),  # first on connection 1: the client sent at 0, connect took 10 ms
        _gt("b", 1, 100 * MS, 150 * MS),
        _gt("c", 2, 5 * MS, 55 * MS),  # first on connection 2
        _gt("d", 2, 200 * MS, 250 * MS),
    ]
    rows = [
        _row("a", 0, 60 * MS),
        _row("b", 100 * MS, 150 * MS + MS // 10, user=155 * MS),
        _row("c", 0, 55 * MS),
        _row("d", 200 * MS, 250 * MS),
    ]
    res = ttft_errors(rows, gt, concurrency=2)
    assert res["connects"] == 2 and res["n"] == 2
    assert res["error_mean_ms"] == pytest.approx(0.05)  # (0.1 + 0) / 2
    assert res["error_all_mean_ms"] == pytest.approx((10 + 0.1 + 5 + 0) / 4)
    assert res["lag_p50_ms"] == pytest.approx(4.9)


def test_a_first_token_read_that_already_held_later_tokens_is_counted():
    tokens = [50 * MS, 51 * MS, 52 * MS, 53 * MS]
    gt = [_gt("x", 1, 0, 50 * MS, tokens), _gt("y", 1, 100 * MS, 150 * MS, [t + 100 * MS for t in tokens])]
    gt.append(_gt("w", 1, -200 * MS, -150 * MS))  # the connection's first request, not scored
    rows = [_row("x", 0, 50 * MS), _row("y", 100 * MS, 152 * MS)]  # y's read came after token 3 arrived
    res = ttft_errors(rows, gt, concurrency=1)
    assert res["first_read_merged_frac"] == pytest.approx(0.5)
    assert res["first_read_merged_tokens_mean"] == 2


def test_failed_and_unmatched_rows_are_not_scored():
    gt = [_gt("a", 1, 0, 50 * MS)]
    rows = [_row("a", 0, 50 * MS), _row("zz", 0, 50 * MS), {**_row("b", 0, 0), "ok": False}]
    res = ttft_errors(rows, gt, concurrency=1)
    assert (res["failed"], res["unmatched"]) == (1, 1)
    assert completed_rate(rows[:2]) == pytest.approx(2 / 0.051)


def _case(local_err: tuple[float, float], ray_err: tuple[float, float], driver_ms: float) -> dict:
    def m(err: tuple[float, float], **extra: float) -> dict:
        return {"median": {"error_mean_ms": err[0], "error_p99_ms": err[1], **extra}}

    return {"kvbench": m(local_err), "kvbench_ray": m(ray_err, driver_cpu_ms_per_request=driver_ms)}


def test_ray_rows_score_the_error_against_the_local_path_and_the_drivers_ceiling():
    from ray_bench import ray_summary, worker_cpu_s

    res = {"ray_ttft": _case((0.02, 0.3), (0.05, 1.2), 0.2)}
    res["ray_capacity"] = _case((0.1, 0.2), (0.3, 3.0), 0.4)
    s = ray_summary(res)
    assert s["ray_ttft"]["error_p99_diff_ms"] == pytest.approx(0.9) and s["met_error"] is True
    assert s["ray_capacity"]["driver_rows_per_s_ceiling"] == pytest.approx(2500) and s["met_driver"] is True
    res["ray_ttft"] = _case((0.02, 0.3), (0.05, 1.4), 0.2)  # p99 1.1 ms worse: not within 1 ms
    res["ray_capacity"] = _case((0.1, 0.2), (0.3, 3.0), 0.6)  # 1,667 rows/s: short of 2,000
    s = ray_summary(res)
    assert s["met_error"] is False and s["met_driver"] is False
    two = {"load_backend": {"workers": [{"cpu_s": 0.25}, {"cpu_s": 0.5}]}}
    manifest = {"phases": [two, {"load_backend": None}, {"load_backend": {"workers": [{"cpu_s": None}]}}]}
    assert worker_cpu_s(manifest) == pytest.approx(0.75)
