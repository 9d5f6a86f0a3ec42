"""SLO attainment, goodput and their intervals, on hand-made rows; saturation on hand-made points."""

import pytest

from kvbench.report.core.goodput import is_good, per_request_bounds, point_metrics, verdict, wilson
from kvbench.sweep.saturation import LoadPoint, saturation


def row(ttft, e2e=None, itl=None, status="ok"):
    return {
        "ttft_ms": ttft,
        "e2e_ms": e2e if e2e is not None else ttft + 10,
        "itl_ms_mean": itl,
        "status": status,
    }


def test_wilson_matches_the_textbook_interval():
    lo, hi = wilson(5, 10)
    assert lo == pytest.approx(0.2366, abs=1e-4) and hi == pytest.approx(0.7634, abs=1e-4)
    lo, hi = wilson(10, 10)  # all good: the interval still admits misses
    assert hi == pytest.approx(1.0) and lo == pytest.approx(0.7225, abs=1e-4)
    assert wilson(0, 0) == (0.0, 1.0)


def test_a_request_is_held_to_the_looser_bound_of_one_metric():
    bounds = per_request_bounds({"ttft_p50_ms": 100, "ttft_p99_ms": 300, "e2e_p99_ms": None})
    assert bounds == {"ttft_ms": 300}
    assert is_good(row(250), bounds)
    assert not is_good(row(301), bounds)
    assert not is_good(row(10, status="error"), bounds)  # a failed request is never good
    assert not is_good({"status": "ok", "ttft_ms": None}, bounds)  # no value: not shown to meet it


def test_point_metrics_count_good_requests_over_phase_time():
    rows = [row(50), row(80), row(120), row(90, status="timeout"), row(40)]
    m = point_metrics(rows, 2.0, {"ttft_p99_ms": 100})
    assert (m.requests, m.ok, m.good) == (5, 4, 3)
    assert m.attainment == pytest.approx(0.6)
    assert m.attainment_ci == wilson(3, 5)
    assert m.goodput_rps == pytest.approx(1.5)
    assert m.throughput_rps == pytest.approx(2.0)
    lo, hi = m.goodput_ci
    assert lo == pytest.approx(wilson(3, 5)[0] * 2.5) and hi == pytest.approx(wilson(3, 5)[1] * 2.5)
    assert m.percentiles_met == {"ttft_p99_ms": False}  # p99 of the ok rows is ~119 ms
    assert m.ttft_p50_ms == pytest.approx(65.0)


def test_itl_and_e2e_bounds_apply_together():
    rows = [row(10, e2e=100, itl=5), row(10, e2e=100, itl=50), row(10, e2e=900, itl=5)]
    m = point_metrics(rows, 1.0, {"itl_p99_ms": 20, "e2e_p99_ms": 500})
    assert m.good == 1


def test_verdict_reads_the_whole_interval():
    assert verdict(100, 100, 0.9) == "meets"
    assert verdict(9, 10, 0.9) == "straddles"
    assert verdict(2, 50, 0.9) == "misses"


def test_saturation_needs_flat_throughput_and_rising_latency():
    growing = [LoadPoint(1, 10, 100), LoadPoint(2, 19, 105), LoadPoint(4, 35, 115)]
    assert saturation(growing) is None
    flat_fast = [LoadPoint(1, 10, 100), LoadPoint(2, 10.2, 102)]
    assert saturation(flat_fast) is None  # no more throughput, but no queueing either
    queued = [LoadPoint(1, 10, 100), LoadPoint(2, 18, 110), LoadPoint(4, 18.3, 210)]
    reason = saturation(queued)
    assert reason is not None and "load 4" in reason and "load 2" in reason
    assert saturation([LoadPoint(1, 10, 100), LoadPoint(2, None, None)]) is None
