"""One point's figures from its saved run directory (read through kvbench.results, read-only)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from kvbench.report.core.goodput import percentile, point_metrics
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


def mock_params(scn: Any) -> Any:
    """The embedded mock's model parameters for this scenario (None: a server, or no tiers)."""
    if scn.target.base_url is not None:
        return None
    from kvbench.mock.config import TieredProfile
    from kvbench.mock.costs.timing import derive_params
    from kvbench.mock.profiles import load_profile

    profile = load_profile(scn.target.mock_profile, {**scn.test.mock_defaults, **scn.target.mock_overrides})
    return derive_params(profile) if isinstance(profile, TieredProfile) else None


def modelled_ttft(run_dir: Path, rows: list[dict[str, Any]], params: Any) -> list[float]:
    """What the mock's model charges each successful row's first token alone (model ms): prefill
    of the tokens it computed plus onboarding of the bytes it read from G2-G4, as its ground truth
    records them. Free of this machine's load and of the mock's own lateness; empty for a server."""
    truth_path = run_dir / "mock_ground_truth.jsonl"
    wanted = {r.get("request_id") for r in rows if r.get("status") == "ok"}
    if params is None or not truth_path.exists() or not wanted:
        return []
    out = []
    for t in read_jsonl(truth_path):
        if t.get("request_id") in wanted and t.get("status") == "ok":
            n, c = int(t["prompt_tokens"]), int(t["cached_tokens"])
            out.append((params.prefill_s(n, c) + params.onboard_s(t.get("bytes_from_tier") or {})) * 1e3)
    return out


def measured_rows(run_dir: Path, label: str | None) -> tuple[str | None, list[dict[str, Any]]]:
    """The label a point is judged on and its rows (probes left out)."""
    rows = [r for r in read_jsonl(run_dir / REQUESTS) if r.get("phase") != "probe"]
    chosen = label or measured_label(rows)
    return chosen, [r for r in rows if r.get("label") == chosen]


def point_figures(
    run_dir: Path, slo: dict[str, float], label: str | None, params: Any = None
) -> dict[str, Any]:
    """PointMetrics of the rows with the measured label, over the time of the phases they ran in,
    plus that label, the hit ratio, the mean prompt length and the mock's modelled TTFT p50."""
    manifest = load_record(run_dir).manifest
    chosen, rows = measured_rows(run_dir, label)
    phases = {r.get("phase") for r in rows}
    durations = [p.duration_s for p in manifest.phases if p.name in phases and p.duration_s]
    figures = point_metrics(rows, sum(durations) if durations else None, slo).to_dict()
    lengths = [int(r["prompt_tokens_requested"]) for r in rows if r.get("prompt_tokens_requested")]
    figures.update(
        label=chosen,
        hit_ratio=hit_ratio(rows),
        prompt_tokens_mean=sum(lengths) / len(lengths) if lengths else None,
        modelled_ttft_p50_ms=percentile(modelled_ttft(run_dir, rows, params), 50),
        **mock_lateness(manifest, phases),
    )
    return figures


def mock_lateness(manifest: Any, phases: set[Any]) -> dict[str, Any]:
    """The embedded mock's own lateness over the point's measured phases (the run's manifest has it
    per phase): the worst share of the modelled TTFT, whether it passed the manifest's threshold,
    and the pace the mock ran at. Empty for a real server (no such record)."""
    record = getattr(manifest, "mock_lateness", None)
    mine = [p for p in (record.phases if record else []) if p.phase in phases]
    if record is None or not mine:
        return {}
    return {
        "mock_late_share": max(p.share for p in mine),
        "mock_late": any(p.phase in record.exceeded_phases for p in mine),
        "mock_late_threshold": record.threshold_share,
        "mock_time_scale": getattr(manifest.target, "mock_time_scale", None),
    }


def point_run(run_dir: Path) -> Any:
    """sweep.json's record of a point's run: its id, its load as the manifest says it was (the
    trace as run, the users and turns; never the probe the run starts with) and its pace."""
    from kvbench.report.replay.trace_rows import trace_rows
    from kvbench.report.sections import lengths_text, load_rows
    from kvbench.report.sessions.load import sessions_load_rows
    from kvbench.sweep.state import PointRun

    m = load_record(run_dir).manifest
    if m.test == "sessions":
        words = sessions_load_rows(m.load, None, m.sessions)[0][1]
    else:
        words = load_rows(m.load)[0][1]
    words = words.split(" (from ", 1)[0]
    if m.test not in ("sessions", "replay") and m.load is not None:
        words += f"; {m.load.prompt_count} prompt(s) of {lengths_text(m.load.lengths)} tokens"
    scale = m.target.mock_time_scale
    pace = "real time" if scale in (None, 1.0) else f"mock time scale {scale:g}"
    if m.trace is not None:
        pace += "; trace " + dict(trace_rows(m.trace))["trace pace"]
    probes = sum(1 for r in read_jsonl(run_dir / REQUESTS) if r.get("label") == "probe")
    return PointRun(
        run_id=m.run_id,
        test=m.test,
        load=words,
        pace=pace,
        load_shape=m.load,
        trace=m.trace,
        sessions=m.sessions,
        probe_requests=probes,
    )
