"""The scraper row's within-run split (benchmarks/scraper_overhead.py): a request counts as near a
scrape when a scrape's answer landed between its send and its first token; each connection's first
request (its connect) is left out; the difference is computed from the rows, not assumed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from scraper_overhead import overlap_split, scraper_summary

MS = 1_000_000


def test_requests_are_split_by_whether_a_scrape_answered_during_their_ttft(tmp_path: Path) -> None:
    origin = 10_000 * MS
    (tmp_path / "metrics.jsonl").write_text(
        "\n".join(json.dumps({"t_ns": t * MS, "name": "x", "value": 1}) for t in (105, 105, 305)) + "\n"
    )
    # (request id, conn, sent ms, client first-token ms, server TTFT ms) relative to the origin
    reqs = [
        ("c0", 0, 0, 60, 50),  # the connection's first: its connect is not the scraper's
        ("a", 0, 100, 152, 50),  # the 105 ms scrape during its TTFT: error 2 ms
        ("b", 1, 0, 51, 50),  # the connection's first
        ("c", 1, 200, 250.5, 50),  # no scrape in [200, 250.5]: error 0.5 ms
        ("d", 0, 300, 354, 50),  # the 305 ms scrape: error 4 ms
        ("e", 1, 400, 451.5, 50),  # error 1.5 ms
    ]
    common, gt = [], []
    for rid, conn, sent, first, server in reqs:
        sent_ns, first_ns = origin + int(sent * MS), origin + int(first * MS)
        common.append({"request_id": rid, "ok": True, "sent_ns": sent_ns, "first_ns": first_ns})
        gt.append(
            {"request_id": rid, "conn": conn, "received_ns": sent_ns, "first_token_ns": sent_ns + server * MS}
        )
    run = {"manifest": {"clock_origin_ns": origin, "run_dir": str(tmp_path)}, "common": common}
    out = overlap_split(run, gt)
    assert (out["scrapes"], out["n_near"], out["n_far"]) == (2, 2, 2)
    assert out["near_mean_ms"] == pytest.approx(3.0)
    assert out["far_mean_ms"] == pytest.approx(1.0)
    assert out["near_minus_far_mean_ms"] == pytest.approx(2.0)


def test_the_summary_pairs_run_k_with_run_k() -> None:
    def runs(means: list[float]) -> list[dict[str, float]]:
        return [{"error_mean_ms": m, "error_p99_ms": 10 * m} for m in means]

    plain, scrape = runs([1.0, 0.2, 0.5]), runs([1.02, 0.25, 0.49])
    res = {
        "scraper": {
            "kvbench": {"runs": plain, "median": plain[2]},
            "kvbench_scrape": {"runs": scrape, "median": scrape[2]},
        }
    }
    s = scraper_summary(res)
    assert s["error_mean_ms_delta_median_pair"] == pytest.approx(0.02)
    assert s["error_mean_ms_delta"] == pytest.approx(-0.01)  # the medians' difference is another figure
    assert s["met"] is False  # p99: +0.2 ms, past 0.05
