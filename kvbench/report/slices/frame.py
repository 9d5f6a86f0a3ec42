"""A run in time slices: what the client saw and what the server, the host and the GPU counted, per slice.

Pure: request rows, the engine's metrics.jsonl rows, telemetry.jsonl rows (exporters, this host) and
the mock's ground truth in, one DataFrame out (a row per slice; `slice_columns` names its columns).
Every time is on the run's clock (ns since `clock_origin_ns`; the request rows' and the samples'
clock), shown as seconds since the first phase began.

A counter's rate over a slice is its rise across the slice, read from the counter as a line through
its samples (so a slice between two samples gets its share, and a counter reset counts from zero);
a gauge is the mean of its samples in the slice. What the engine counts is read through its adapter
(`hit_counters`/`query_counters`, `transfer_counters`, `queue_gauges`, `kv_usage_gauges`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvbench.engines.adapters import EngineAdapter, GaugeRef, TransferCounter
from kvbench.report.slices.series import (  # noqa: F401  (the table's callers read them here too)
    Key,
    SeriesAcc,
    counter_rise,
    first_gauge,
    first_rise,
    gauge_mean,
    labels_match,
    mean_over,
    rise_of,
    series,
)

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

GB = 1e9
MIB = 2**20


@dataclass(frozen=True)
class PhaseSpan:
    """A phase on the run's clock, and whether noise ran in it."""

    name: str
    started_ns: int
    ended_ns: int
    noisy: bool = False


@dataclass(frozen=True)
class Sizes:
    """What a count of the engine's is in bytes, where known (the model's KV geometry)."""

    bytes_per_token: float | None = None
    block_bytes: float | None = None

    def per(self, unit: str) -> float | None:
        return {"bytes": 1.0, "tokens": self.bytes_per_token, "blocks": self.block_bytes}.get(unit)


WIDTHS = (0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0)


def auto_slice(
    span_s: float, interval_s: float | None = None, shortest_phase_s: float | None = None
) -> float:
    """A round slice width: about 30 slices over the run, but a few per phase when phases are short
    (an ABBA pair of half-second phases must not vanish in one slice), never under two scrapes."""
    least = span_s / 30.0
    if shortest_phase_s:
        least = min(least, shortest_phase_s / 3.0)
    least = max(least, 2 * (interval_s or 0.0))
    return next((w for w in WIDTHS if w >= least), WIDTHS[-1])


# --------------------------------------------------------------------------- the columns


def transfer_columns(
    data: Mapping[Key, tuple[np.ndarray, np.ndarray]],
    counters: Sequence[TransferCounter],
    edges: np.ndarray,
    sizes: Sizes,
) -> dict[str, np.ndarray]:
    """`{onboard|offload}_{tier}_gb_s` per counter the engine declares (`_blocks_per_s` /
    `_tokens_per_s` where the bytes of one are unknown); a tier that never moved is left out."""
    width_s = (edges[1:] - edges[:-1]) / 1e9
    out: dict[str, np.ndarray] = {}
    present = {name for name, _ in data}
    for tc in counters:
        if tc.superseded_by and tc.superseded_by in present:  # the same bytes under a newer name
            continue
        for (name, labels), (t, v) in data.items():
            if name != tc.name or not labels_match(labels, tc.match):
                continue
            tier = tc.tier or dict(labels).get(tc.tier_label or "", "")
            rise = counter_rise(t, v, edges)
            if not tier or not rise.any():
                continue
            per = sizes.per(tc.unit)
            col = f"{tc.direction}_{tier}_" + ("gb_s" if per is not None else f"{tc.unit}_per_s")
            rate = rise * (per if per is not None else 1.0) / width_s / (GB if per is not None else 1.0)
            out[col] = out[col] + rate if col in out else rate
    return out


def host_columns(
    data: Mapping[Key, tuple[np.ndarray, np.ndarray]], prefix: str, edges: np.ndarray
) -> dict[str, np.ndarray]:
    """Network and disk GB/s of node-exporter series (this host's or an exporter's), all devices."""
    width_s = (edges[1:] - edges[:-1]) / 1e9
    out: dict[str, np.ndarray] = {}
    for col, name in (
        ("net_rx_gb_s", "node_network_receive_bytes_total"),
        ("net_tx_gb_s", "node_network_transmit_bytes_total"),
        ("disk_read_gb_s", "node_disk_read_bytes_total"),
        ("disk_write_gb_s", "node_disk_written_bytes_total"),
    ):
        rise = rise_of(data, name, edges)
        if rise is not None:
            out[f"{prefix}_{col}"] = rise / width_s / GB
    return out


def token_columns(
    data: Mapping[Key, tuple[np.ndarray, np.ndarray]], adapter: EngineAdapter, edges: np.ndarray
) -> dict[str, np.ndarray]:
    """The engine's own prompt tokens per slice: queried and cached tokens/s and their ratio.

    Queried is the adapter's query counter, or else the sum of its source counters (each a part:
    llama.cpp's cached + computed, vLLM's by-source series); cached is its hit counter."""
    import numpy as np

    width_s = (edges[1:] - edges[:-1]) / 1e9
    hits = first_rise(data, adapter.hit_counters, edges)
    queries = first_rise(data, adapter.query_counters, edges)
    if queries is None:
        parts = [r for n in adapter.source_counters if (r := rise_of(data, n, edges)) is not None]
        queries = sum(parts[1:], parts[0]) if parts else None
    out: dict[str, np.ndarray] = {}
    if queries is not None:
        out["server_prompt_tokens_per_s"] = queries / width_s
    if hits is not None:
        out["server_cached_tokens_per_s"] = hits / width_s
    if hits is not None and queries is not None:
        with np.errstate(invalid="ignore", divide="ignore"):
            out["hit_ratio"] = np.where(queries > 0, hits / np.where(queries > 0, queries, 1), np.nan)
    return out


def link_columns(
    data: Mapping[Key, tuple[np.ndarray, np.ndarray]], edges: np.ndarray
) -> dict[str, np.ndarray]:
    """The lab link's GB/s each way (kvbench.telemetry.lab_link: the host end's receive is what
    came from storage, its transmit what went to it)."""
    width_s = (edges[1:] - edges[:-1]) / 1e9
    out: dict[str, np.ndarray] = {}
    for col, name in (
        ("lab_link_from_storage_gb_s", "kvbench_lab_link_receive_bytes_total"),
        ("lab_link_to_storage_gb_s", "kvbench_lab_link_transmit_bytes_total"),
    ):
        rise = rise_of(data, name, edges)
        if rise is not None:
            out[col] = rise / width_s / GB
    return out


def gpu_columns(
    data: Mapping[Key, tuple[np.ndarray, np.ndarray]], edges: np.ndarray
) -> dict[str, np.ndarray]:
    """DCGM: utilisation (percent, mean over GPUs) and framebuffer used (GB, summed over GPUs)."""
    out: dict[str, np.ndarray] = {}
    util = mean_over(data, "DCGM_FI_DEV_GPU_UTIL", edges)
    if util is not None:
        out["gpu_util_pct"] = util
    used = first_gauge(data, (GaugeRef("DCGM_FI_DEV_FB_USED", "MiB"),), edges)
    if used is not None:
        out["gpu_mem_used_gb"] = used[0] * MIB / GB
    return out


def request_columns(requests: pd.DataFrame, edges: np.ndarray) -> dict[str, np.ndarray]:
    """requests/s (ok answers ending in the slice), TTFT p50/p99 and cached share of the answers
    whose first token came in the slice, errors/s."""
    import numpy as np

    n = edges.size - 1
    width_s = (edges[1:] - edges[:-1]) / 1e9
    if requests.empty:
        return {"requests_per_s": np.zeros(n)}
    ok = requests[requests["status"] == "ok"]
    ends = ok["end_ns"].dropna().to_numpy(dtype=float)
    done, _ = np.histogram(ends, bins=edges)
    bad = requests[requests["status"] != "ok"]["end_ns"].dropna().to_numpy(dtype=float)
    errs, _ = np.histogram(bad, bins=edges)
    first = ok[ok["first_token_ns"].notna() & ok["ttft_ms"].notna()]
    idx = np.searchsorted(edges, first["first_token_ns"].to_numpy(dtype=float), side="right") - 1
    ttft = first["ttft_ms"].to_numpy(dtype=float)
    cached = (
        first["cached_tokens"].to_numpy(dtype=float)
        if "cached_tokens" in first
        else np.full(len(first), np.nan)
    )
    prompt = first["prompt_tokens"].to_numpy(dtype=float)
    p50, p99, share = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    for i in range(n):
        sel = idx == i
        if sel.any():
            p50[i], p99[i] = np.percentile(ttft[sel], 50), np.percentile(ttft[sel], 99)
            known = sel & ~np.isnan(cached)
            if known.any() and prompt[known].sum() > 0:
                share[i] = cached[known].sum() / prompt[known].sum()
    return {
        "requests_per_s": done / width_s,
        "errors_per_s": errs / width_s,
        "ttft_p50_ms": p50,
        "ttft_p99_ms": p99,
        "cached_ratio": share,
    }


def truth_columns(
    requests: pd.DataFrame, truth: Sequence[Mapping[str, Any]], edges: np.ndarray
) -> dict[str, np.ndarray]:
    """The mock's ground truth: KV bytes read per tier (bytes_from_tier), as GB/s of the slice in
    which each request's first token came."""
    import numpy as np

    width_s = (edges[1:] - edges[:-1]) / 1e9
    when = (
        dict(zip(requests["request_id"], requests["first_token_ns"], strict=False))
        if not requests.empty
        else {}
    )
    acc: dict[str, np.ndarray] = {}
    for r in truth:
        t = when.get(r.get("request_id"))
        if t is None or (isinstance(t, float) and math.isnan(t)):
            continue
        i = int(np.searchsorted(edges, float(t), side="right")) - 1
        if not 0 <= i < edges.size - 1:
            continue
        for tier, b in (r.get("bytes_from_tier") or {}).items():
            if b:
                acc.setdefault(f"gt_onboard_{tier}_gb_s", np.zeros(edges.size - 1))[i] += float(b)
    return {k: v / width_s / GB for k, v in sorted(acc.items())}


# --------------------------------------------------------------------------- the table


def _phase_at(edges: np.ndarray, phases: Sequence[PhaseSpan]) -> tuple[list[str], list[bool]]:
    names, noisy = [], []
    for a, b in itertools.pairwise(edges):
        mid = (a + b) / 2
        here = next((p for p in phases if p.started_ns <= mid < p.ended_ns), None)
        names.append(here.name if here else "")
        noisy.append(bool(here and here.noisy))
    return names, noisy


def build_slices(
    requests: pd.DataFrame,
    metrics: Iterable[Mapping[str, Any]],
    telemetry: Iterable[Mapping[str, Any]],
    truth: Sequence[Mapping[str, Any]],
    phases: Sequence[PhaseSpan],
    adapter: EngineAdapter,
    slice_s: float | None = None,
    interval_s: float | None = None,
    sizes: Sizes | None = None,
) -> pd.DataFrame:
    """One row per slice (columns: `slice_columns`); empty when the run has no timed request."""
    import numpy as np
    import pandas as pd

    req = requests[requests["label"] != "probe"] if "label" in requests else requests
    req = req[req["sent_ns"].notna()] if not req.empty else req
    if req.empty:
        return pd.DataFrame(columns=["t_s", "slice_s", "phase", "noisy", "requests_per_s"])
    t0 = float(min([p.started_ns for p in phases] or [req["sent_ns"].min()]))
    t1 = float(max([p.ended_ns for p in phases] + [req["end_ns"].max()]))
    shortest = min(((p.ended_ns - p.started_ns) / 1e9 for p in phases), default=None)
    width = slice_s or auto_slice((t1 - t0) / 1e9, interval_s, shortest)
    n = max(1, math.ceil((t1 - t0) / 1e9 / width - 1e-9))
    edges = t0 + np.arange(n + 1) * width * 1e9
    names, noisy = _phase_at(edges, phases)
    cols: dict[str, Any] = {
        "t_s": np.round((edges[:-1] - t0) / 1e9, 6),
        "slice_s": width,
        "phase": names,
        "noisy": noisy,
    }
    cols.update(request_columns(req, edges))
    eng = series(metrics)
    cols.update(token_columns(eng, adapter, edges))
    cols.update(transfer_columns(eng, adapter.transfer_counters, edges, sizes or Sizes()))
    cols.update(truth_columns(req, truth, edges))
    if (queue := first_gauge(eng, adapter.queue_gauges, edges)) is not None:
        cols["queue"] = queue[0]
    if (kv := first_gauge(eng, adapter.kv_usage_gauges, edges)) is not None:
        cols["kv_used_gb" if kv[1].unit == "bytes" else "kv_usage"] = kv[0] / (
            GB if kv[1].unit == "bytes" else 1
        )
    cols.update(telemetry_columns(telemetry, edges))
    return pd.DataFrame(cols)


def telemetry_columns(rows: Iterable[Mapping[str, Any]], edges: np.ndarray) -> dict[str, np.ndarray]:
    """This host's and the node exporters' network and disk GB/s, DCGM's GPU, the lab link's GB/s,
    failed scrapes per slice.

    One pass over `rows` (a file read line by line stays a stream)."""
    import numpy as np

    by_kind = {"host": SeriesAcc(), "node": SeriesAcc(), "dcgm": SeriesAcc(), "link": SeriesAcc()}
    failed: list[float] = []
    for r in rows:
        if r.get("error") is not None:
            failed.append(float(r["t_ns"]))
        elif (kind := r.get("kind")) in by_kind:
            by_kind[str(kind)].add(r)
    out: dict[str, np.ndarray] = {}
    for kind in ("host", "node"):
        out.update(host_columns(by_kind[kind].done(), kind, edges))
    out.update(gpu_columns(by_kind["dcgm"].done(), edges))
    out.update(link_columns(by_kind["link"].done(), edges))
    if failed:
        out["scrape_errors"] = np.histogram(failed, bins=edges)[0]
    return out


def onboard_vs_ttft(requests: pd.DataFrame, truth: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Per request the mock's ground truth can attribute: KV bytes it read per tier beside its TTFT."""
    import pandas as pd

    by_id = {r.get("request_id"): r for r in truth}
    rows = []
    if requests.empty:
        return pd.DataFrame(columns=["request_id", "phase", "noise_active", "ttft_ms", "onboard_gb"])
    ok = requests[(requests["status"] == "ok") & requests["ttft_ms"].notna() & (requests["label"] != "probe")]
    for r in ok.to_dict("records"):
        t = by_id.get(r["request_id"])
        if t is None:
            continue
        tiers = {k: float(v or 0.0) for k, v in (t.get("bytes_from_tier") or {}).items()}
        rows.append(
            {
                "request_id": r["request_id"],
                "phase": r["phase"],
                "noise_active": bool(r.get("noise_active", False)),
                "ttft_ms": float(r["ttft_ms"]),
                "onboard_gb": sum(tiers.values()) / GB,
                **{f"onboard_{k}_gb": v / GB for k, v in tiers.items()},
            }
        )
    return pd.DataFrame(rows)
