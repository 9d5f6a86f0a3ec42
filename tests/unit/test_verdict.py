"""The verdict table: offload vs no-offload figures, their intervals and distinguishability."""

from __future__ import annotations

from typing import Any

import numpy as np

from kvbench.report.verdict.table import hit_ratio, verdict_markdown, verdict_rows


def _rows(n: int, cached: int, ttft: float, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [
        {
            "status": "ok",
            "prompt_tokens": 1000,
            "cached_tokens": cached,
            "ttft_ms": float(ttft * rng.uniform(0.9, 1.1)),
        }
        for _ in range(n)
    ]


def test_offload_beats_no_offload_distinguishably() -> None:
    arms = {"offload": _rows(30, 800, 20.0, 1), "no-offload": _rows(30, 200, 80.0, 2)}
    rows = {r["figure"]: r for r in verdict_rows(arms, {"ttft_ms": 50.0}, {"offload": {"G4": 24000.0}})}
    hit = rows["hit ratio"]
    assert hit["offload"] == 0.8 and hit["other"] == 0.2
    assert hit["ci"][1] < 0 and hit["distinguishable"]
    assert rows["TTFT p50 (ms)"]["change"] > 0 and rows["TTFT p50 (ms)"]["distinguishable"]
    assert rows["goodput at SLO"]["offload"] == 1.0 and rows["goodput at SLO"]["other"] == 0.0
    assert rows["hit share G4"]["offload"] == 0.8 and rows["hit share G4"]["other"] == 0.0
    md = verdict_markdown(list(rows.values()))
    assert md[0].startswith("| figure") and len(md) == 2 + len(rows)


def test_same_arms_not_distinguishable() -> None:
    arms = {"offload": _rows(30, 500, 20.0, 1), "no-offload": _rows(30, 500, 20.0, 1)}
    rows = {r["figure"]: r for r in verdict_rows(arms, {})}
    assert rows["hit ratio"]["change"] == 0 and not rows["hit ratio"]["distinguishable"]
    assert not rows["TTFT p50 (ms)"]["distinguishable"]


def test_failed_rows_and_no_reference() -> None:
    assert hit_ratio([{"status": "error", "prompt_tokens": 5, "cached_tokens": 5}]) is None
    assert verdict_rows({"no-offload": _rows(3, 0, 1.0, 0)}, {}) == []


def test_the_table_says_points_for_ratios_and_percent_for_latencies() -> None:
    arms = {"offload": _rows(30, 800, 20.0, 1), "no-offload": _rows(30, 200, 80.0, 2)}
    rows = verdict_rows(arms, {"ttft_ms": 50.0})
    by_figure = {r["figure"]: r for r in rows}
    md = "\n".join(verdict_markdown(rows))
    hit = by_figure["hit ratio"]
    assert f"| {hit['change'] * 100:+.1f} pts |" in md  # 0.2 - 0.8: -60.0 pts
    p50 = by_figure["TTFT p50 (ms)"]
    assert f"| {p50['change'] * 100:+.1f}% |" in md and p50["change"] > 0
    lo, hi = p50["ci"]
    assert f"[{lo * 100:+.1f}%, {hi * 100:+.1f}%]" in md
