"""One point's figures from its saved run directory (read through kvbench.results, read-only)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from kvbench.report.goodput import point_metrics
from kvbench.results import REQUESTS, load_record, read_jsonl

# rows that are not a measurement of the load: cold-start probes, cache fills, TTFT fillers
NOT_MEASURED = frozenset({"probe", "fill", "filler"})


# what a test measures when its rows carry several labels (ttft: cold once, warm once)
PREFERRED = ("cached", "evicted-warm", "warm", "quiet")


def measured_label(rows: list[dict[str, Any]]) -> str | None:
    """The label a sweep point is judged on: the first of PREFERRED present, else the one with
    most measured rows."""
    counts = Counter(r.get("label") for r in rows if r.get("label") not in NOT_MEASURED)
    found = next((label for label in PREFERRED if counts.get(label)), None)
    return found or (counts.most_common(1)[0][0] if counts else None)


def hit_ratio(rows: list[dict[str, Any]]) -> float | None:
    """Cached prompt tokens over prompt tokens, of the successful rows that report both."""
    pairs = [
        (r["cached_tokens"], r.get("prompt_tokens_server") or r.get("prompt_tokens"))
        for r in rows
        if r.get("status") == "ok" and r.get("cached_tokens") is not None
    ]
    total = sum(p for _, p in pairs if p)
    return sum(c for c, p in pairs if p) / total if total else None


def point_figures(run_dir: Path, slo: dict[str, float], label: str | None) -> dict[str, Any]:
    """PointMetrics of the rows with the measured label, over the time of the phases they ran in,
    plus that label, the hit ratio and the mean prompt length."""
    manifest = load_record(run_dir).manifest
    rows = [r for r in read_jsonl(run_dir / REQUESTS) if r.get("phase") != "probe"]
    chosen = label or measured_label(rows)
    rows = [r for r in rows if r.get("label") == chosen]
    phases = {r.get("phase") for r in rows}
    durations = [p.duration_s for p in manifest.phases if p.name in phases and p.duration_s]
    figures = point_metrics(rows, sum(durations) if durations else None, slo).to_dict()
    lengths = [int(r["prompt_tokens_requested"]) for r in rows if r.get("prompt_tokens_requested")]
    figures.update(
        label=chosen,
        hit_ratio=hit_ratio(rows),
        prompt_tokens_mean=sum(lengths) / len(lengths) if lengths else None,
    )
    return figures
