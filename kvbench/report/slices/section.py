"""The report's "Over time" section: a saved run's slices (kvbench.report.slices.frame) as a table, a CSV
and the pictures (kvbench.report.slices.plots).

Reads the run directory only: requests, metrics.jsonl, telemetry.jsonl, the mock's ground truth,
the manifest's phases and engine, the saved scenario's telemetry section (interval, slice width).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvbench.report.core.formats import Section, Table, fmt

if TYPE_CHECKING:
    import pandas as pd

SLICES_CSV = "slices.csv"
MAX_ROWS = 60  # the table's; slices.csv holds every slice

# (column, header) in the order shown; a column the run lacks is left out
SHOWN = (
    ("requests_per_s", "req/s"),
    ("ttft_p50_ms", "TTFT p50 ms"),
    ("ttft_p99_ms", "TTFT p99 ms"),
    ("server_prompt_tokens_per_s", "prompt tok/s (server)"),
    ("server_cached_tokens_per_s", "cached tok/s (server)"),
    ("hit_ratio", "hit ratio (server)"),
    ("cached_ratio", "cached share"),
    ("queue", "queued"),
    ("kv_usage", "KV usage"),
    ("kv_used_gb", "KV held GB"),
    ("gpu_util_pct", "GPU %"),
    ("gpu_mem_used_gb", "GPU mem GB"),
    ("scrape_errors", "failed scrapes"),
)


def _sizes(run: Any, geometry: str | None) -> Any:
    from kvbench.model.geometry import geometry_for_target
    from kvbench.report.slices.frame import Sizes

    try:
        profile_geometry, where = run.mock_profile_geometry()
        geo, _ = geometry_for_target(profile_geometry, where, geometry, run.manifest.target.model or "")
    except Exception:  # no geometry is an answer here: counts in tokens stay tokens
        geo = None
    return Sizes(bytes_per_token=geo.bytes_per_token() if geo is not None else None)


def run_slices(
    run_dir: Path, df: pd.DataFrame, geometry: str | None = None, slice_s: float | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(slices, per-request onboarded bytes vs TTFT) of a saved run."""
    from kvbench.engines.adapters import get_adapter
    from kvbench.report.core.manifest import read_run_manifest
    from kvbench.report.slices.frame import PhaseSpan, build_slices, onboard_vs_ttft
    from kvbench.results import read_jsonl

    run = read_run_manifest(run_dir)
    tele = run.scenario().get("telemetry") or {}
    phases = [
        PhaseSpan(p.name, p.started_ns, p.ended_ns, p.noise is not None)
        for p in run.manifest.phases
        if p.started_ns is not None and p.ended_ns is not None
    ]
    truth = read_jsonl(run_dir / "mock_ground_truth.jsonl")
    slices = build_slices(
        df,
        stream_jsonl(run_dir / "metrics.jsonl"),
        stream_jsonl(run_dir / "telemetry.jsonl"),
        truth,
        phases,
        get_adapter(run.manifest.target.engine or "generic"),
        slice_s=slice_s or tele.get("slice_s"),
        interval_s=tele.get("interval_s", 1.0),
        sizes=_sizes(run, geometry),
    )
    return slices, onboard_vs_ttft(df, truth)


def stream_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Rows of a JSONL file one at a time (an hour sampled every 0.1 s is millions of rows); a torn
    line (a killed writer's last) is skipped."""
    if not path.exists():
        return
    with path.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict):
                yield row


def _cell(x: Any) -> str:
    if isinstance(x, float) and math.isnan(x):
        return "-"
    return fmt(float(x)) if isinstance(x, int | float) and not isinstance(x, bool) else str(x)


def slices_table(sl: pd.DataFrame) -> Table:
    rate_cols = [
        c
        for c in sl.columns
        if c.endswith(("_gb_s", "_per_s"))
        and c not in ("requests_per_s", "errors_per_s")
        and all(c != shown for shown, _ in SHOWN)
    ]
    shown = [(c, h) for c, h in SHOWN if c in sl.columns]
    shown[1:1] = [
        (c, c.removesuffix("_gb_s").replace("_", " ") + (" GB/s" if c.endswith("_gb_s") else ""))
        for c in rate_cols
    ]
    headers = ["t (s)", "phase", *[h for _, h in shown]]
    rows = []
    for d in sl.to_dict("records"):
        phase = (d["phase"] or "-") + (" (noise)" if d["noisy"] else "")
        rows.append([fmt(float(d["t_s"])), phase, *[_cell(d[c]) for c, _ in shown]])
    return Table(headers, rows)


def slices_section(
    run_dir: Path, df: pd.DataFrame, geometry: str | None = None, slice_s: float | None = None
) -> Section | None:
    """The section (table, pictures) and slices.csv; None when the run has no timed request."""
    from kvbench.report.core.manifest import read_run_manifest
    from kvbench.report.slices.plots import save_slice_plots

    sl, scatter = run_slices(run_dir, df, geometry, slice_s)
    if sl.empty:
        return None
    sl.to_csv(run_dir / SLICES_CSV, index=False)
    shown, why = table_rows(sl)
    images = save_slice_plots(run_dir, sl, scatter)
    width = float(sl["slice_s"].iloc[0])
    paras = [
        f"The run in slices of {width:g} s (seconds since the first phase began; the scenario's "
        "`telemetry.slice_s` sets the width, else it is chosen from the run's span). req/s counts "
        "answers that ended in the slice; TTFT and the cached share are of answers whose first token "
        "came in it; prompt and cached tok/s and the hit ratio are the server's own counters over the "
        "slice; `onboard`/`offload` are KV moved per tier as the engine counts it, `gt onboard` the "
        "mock's ground truth; host and node columns are the network and disk of this host and of the "
        "named node exporters."
    ]
    if any(c.startswith("lab_link_") for c in sl.columns):
        paras.append(
            "`lab link` is the kvbench lab's shaped link, each way, from the byte counters of its host "
            "end (`from storage` carries G4 restores and the neighbour's reads, `to storage` slot saves)."
        )
    scale = read_run_manifest(run_dir).time_scale().value
    if scale != 1.0:
        paras.append(
            f"The mock ran at time scale {scale:g}: its modelled bytes moved in {scale:g} of the modelled "
            f"time, so its GB/s read {1 / scale:g}x the modelled hardware's."
        )
    if why:
        paras.append(f"{why}; `{SLICES_CSV}` holds all {len(sl)}.")
    return Section("Over time", paras, [slices_table(shown)], images)


def table_rows(sl: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The slices the table shows and what it leaves out: idle slices (nothing answered, no first
    token) when there are too many, then every k-th of the rest."""
    if len(sl) <= MAX_ROWS:
        return sl, ""
    ttft = sl["ttft_p50_ms"] if "ttft_p50_ms" in sl else sl["requests_per_s"] * float("nan")
    busy = sl[(sl["requests_per_s"] > 0) | ttft.notna()]
    said = (
        [f"{len(sl) - len(busy)} idle slices (no answer ended, no first token) left out"]
        if len(busy) < len(sl)
        else []
    )
    if len(busy) > MAX_ROWS:
        k = math.ceil(len(busy) / MAX_ROWS)
        busy = busy.iloc[::k]
        said.append(f"one in {k} of the others shown")
    return busy, "; ".join(said).capitalize()
