"""Statistics of a run: per phase and label, speedups, throughput and noise ratios.

(Time series for the plots, completions per second and noise rate, are in `timeline`.)

Pure functions: a requests DataFrame (see results/README.md) and the manifest in,
dataclasses and dicts out. Failed requests are counted as errors and left out
of the latency statistics; dispatch delay (sent - scheduled) is kept apart from
TTFT. Bootstrap intervals are seeded, so a report is reproducible.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from kvbench.report.core.manifest import RunManifest

DEFAULT_SEED = 20261130
N_BOOT = 2000
LEVEL = 0.95

REQUEST_COLUMNS: dict[str, Any] = {
    "request_id": None,
    "phase": "",
    "label": "",
    "repetition": 0,
    "prompt_id": None,
    "prompt_tokens_requested": None,
    "prompt_tokens": None,
    "cached_tokens": None,
    "output_tokens": None,
    "scheduled_ns": None,
    "sent_ns": None,
    "first_token_ns": None,
    "end_ns": None,
    "ttft_ms": None,
    "e2e_ms": None,
    "dispatch_delay_ms": None,
    "itl_ms_mean": None,
    "status": "ok",
    "error_type": None,
    "noise_active": False,
}


def normalise(df: pd.DataFrame) -> pd.DataFrame:
    """Add any missing request column (an empty or partial run) with a neutral default."""
    import pandas as pd

    out = df.copy()
    for col, default in REQUEST_COLUMNS.items():
        if col not in out.columns:
            out[col] = pd.Series([default] * len(out), index=out.index, dtype=object)
    for col in ("ttft_ms", "e2e_ms", "dispatch_delay_ms", "itl_ms_mean"):
        out[col] = pd.to_numeric(out[col], errors="coerce")
    for col in (
        "sent_ns",
        "end_ns",
        "scheduled_ns",
        "first_token_ns",
        "output_tokens",
        "prompt_tokens_requested",
    ):
        out[col] = pd.to_numeric(out[col], errors="coerce")
    out["phase"] = out["phase"].fillna("").astype(str)
    out["label"] = out["label"].fillna("").astype(str)
    out["status"] = out["status"].fillna("ok").astype(str)
    return out


# --------------------------------------------------------------------------- primitives


def describe(values: Sequence[float] | np.ndarray | pd.Series) -> dict[str, float | int | None]:
    """count, mean, p50, p90, p99, min, max of the finite values (None when there are none)."""
    import numpy as np

    arr = np.asarray(values, dtype=float)
    arr = arr[np.isfinite(arr)]
    if arr.size == 0:
        return {"count": 0, "mean": None, "p50": None, "p90": None, "p99": None, "min": None, "max": None}
    p50, p90, p99 = np.percentile(arr, [50, 90, 99])
    return {
        "count": int(arr.size),
        "mean": float(arr.mean()),
        "p50": float(p50),
        "p90": float(p90),
        "p99": float(p99),
        "min": float(arr.min()),
        "max": float(arr.max()),
    }


def bootstrap_ci(
    values: Sequence[float] | np.ndarray | pd.Series,
    stat: Callable[[np.ndarray], Any] | None = None,
    n_boot: int = N_BOOT,
    seed: int = DEFAULT_SEED,
    level: float = LEVEL,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of `stat` (default: the median); None with < 2 values."""
    import numpy as np

    arr = np.asarray(values, dtype=float)
    arr = arr[np.isfinite(arr)]
    if arr.size < 2:
        return None
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, arr.size, size=(n_boot, arr.size))
    samples = arr[idx]
    stats = np.median(samples, axis=1) if stat is None else np.apply_along_axis(stat, 1, samples)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(stats, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def bootstrap_ratio_ci(
    num: Sequence[float] | np.ndarray | pd.Series,
    den: Sequence[float] | np.ndarray | pd.Series,
    stat: Callable[[np.ndarray], Any] | None = None,
    n_boot: int = N_BOOT,
    seed: int = DEFAULT_SEED,
    level: float = LEVEL,
) -> tuple[float, float] | None:
    """Interval of stat(num) / stat(den), resampling both sides independently."""
    import numpy as np

    a = np.asarray(num, dtype=float)
    b = np.asarray(den, dtype=float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if a.size < 2 or b.size < 2:
        return None
    rng = np.random.default_rng(seed)
    sa = a[rng.integers(0, a.size, size=(n_boot, a.size))]
    sb = b[rng.integers(0, b.size, size=(n_boot, b.size))]
    if stat is None:
        ta, tb = np.median(sa, axis=1), np.median(sb, axis=1)
    else:
        ta, tb = np.apply_along_axis(stat, 1, sa), np.apply_along_axis(stat, 1, sb)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = ta / tb
    ratios = ratios[np.isfinite(ratios)]
    if ratios.size == 0:
        return None
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(ratios, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def _median(values: pd.Series) -> float | None:
    v = values.dropna()
    return float(v.median()) if len(v) else None


# --------------------------------------------------------------------------- per phase


@dataclass
class PhaseStats:
    """Statistics of one (phase, label) group of requests."""

    phase: str
    label: str
    requests: int
    ok: int
    errors: int
    error_types: dict[str, int]
    ttft_ms: dict[str, Any]
    itl_ms: dict[str, Any]
    e2e_ms: dict[str, Any]
    dispatch_delay_ms: dict[str, Any]
    ttft_p50_ci_ms: tuple[float, float] | None
    duration_s: float | None
    duration_source: str
    requests_per_s: float | None
    output_tokens_per_s: float | None
    output_tokens: int
    prompt_tokens_requested: list[int] = field(default_factory=list)
    noise: dict[str, Any] | None = None
    cold_verified: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _phase_meta(manifest: RunManifest | dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per phase name: duration_s, noise, cold_verified (read through `report.manifest`)."""
    from kvbench.report.core.manifest import RunManifest

    if isinstance(manifest, dict):
        manifest = RunManifest(manifest, Path("."))
    return manifest.phase_meta()


def span_s(group: pd.DataFrame) -> float | None:
    sent = group["sent_ns"].dropna()
    end = group["end_ns"].dropna()
    if sent.empty or end.empty:
        return None
    span = (float(end.max()) - float(sent.min())) / 1e9
    return span if span > 0 else None


def phase_stats(
    df: pd.DataFrame, manifest: RunManifest | dict[str, Any] | None = None, seed: int = DEFAULT_SEED
) -> list[PhaseStats]:
    """One PhaseStats per (phase, label), in the order the phases ran."""
    df = normalise(df)
    manifest = manifest or {}
    meta = _phase_meta(manifest)
    labels_per_phase = df.groupby("phase")["label"].nunique().to_dict() if len(df) else {}
    order = {name: i for i, name in enumerate(meta)}
    out: list[PhaseStats] = []
    if df.empty:
        return out
    first_sent = df.groupby(["phase", "label"], sort=False)["sent_ns"].min()
    keys = sorted(
        first_sent.index,
        key=lambda k: (order.get(k[0], len(order)), first_sent[k] if first_sent[k] == first_sent[k] else 0),
    )
    for phase, label in keys:
        g = df[(df["phase"] == phase) & (df["label"] == label)]
        ok = g[g["status"] == "ok"]
        pm = meta.get(phase, {})
        duration: float | None = None
        source = "span of its requests (last end - first send)"
        if labels_per_phase.get(phase, 1) == 1 and pm.get("duration_s"):
            duration = float(pm["duration_s"])
            source = "manifest phase duration"
        if duration is None:
            duration = span_s(g)
        out_tokens = int(ok["output_tokens"].fillna(0).sum())
        errs = g[g["status"] != "ok"]
        error_types = errs["error_type"].fillna(errs["status"]).astype(str).value_counts().to_dict()
        lengths = sorted({int(x) for x in g["prompt_tokens_requested"].dropna()})
        out.append(
            PhaseStats(
                phase=phase,
                label=label,
                requests=len(g),
                ok=len(ok),
                errors=len(errs),
                error_types={str(k): int(v) for k, v in error_types.items()},
                ttft_ms=describe(ok["ttft_ms"]),
                itl_ms=describe(ok["itl_ms_mean"]),
                e2e_ms=describe(ok["e2e_ms"]),
                dispatch_delay_ms=describe(g["dispatch_delay_ms"]),
                ttft_p50_ci_ms=bootstrap_ci(ok["ttft_ms"], seed=seed),
                duration_s=duration,
                duration_source=source if duration is not None else "unknown",
                requests_per_s=(len(ok) / duration) if duration else None,
                output_tokens_per_s=(out_tokens / duration) if duration else None,
                output_tokens=out_tokens,
                prompt_tokens_requested=lengths,
                noise=pm.get("noise"),
                cold_verified=pm.get("cold_verified"),
            )
        )
    return out


# --------------------------------------------------------------------------- speedups


def ttft_by_length(df: pd.DataFrame, seed: int = DEFAULT_SEED) -> list[dict[str, Any]]:
    """Median TTFT (with a bootstrap CI) per label and requested prompt length, ok requests only."""
    df = normalise(df)
    ok = df[(df["status"] == "ok") & df["ttft_ms"].notna() & df["prompt_tokens_requested"].notna()]
    rows: list[dict[str, Any]] = []
    for (label, tokens), g in ok.groupby(["label", "prompt_tokens_requested"]):
        ci = bootstrap_ci(g["ttft_ms"], seed=seed)
        rows.append(
            {
                "label": str(label),
                "tokens": int(tokens),  # type: ignore[call-overload]
                "n": len(g),
                "ttft_p50_ms": float(g["ttft_ms"].median()),
                "ttft_p10_ms": float(g["ttft_ms"].quantile(0.1)),
                "ttft_p90_ms": float(g["ttft_ms"].quantile(0.9)),
                "ci_ms": ci,
            }
        )
    return sorted(rows, key=lambda r: (r["label"], r["tokens"]))


def ttft_speedups(
    df: pd.DataFrame,
    baseline: str = "cold",
    others: Sequence[str] = ("warm", "evicted-warm"),
    seed: int = DEFAULT_SEED,
) -> list[dict[str, Any]]:
    """Median TTFT of `baseline` / median TTFT of each other label, per prompt length, with a CI."""
    df = normalise(df)
    ok = df[(df["status"] == "ok") & df["ttft_ms"].notna()]
    rows: list[dict[str, Any]] = []
    for tokens, g in ok.groupby("prompt_tokens_requested"):
        base = g[g["label"] == baseline]["ttft_ms"]
        if base.empty:
            continue
        for other in others:
            o = g[g["label"] == other]["ttft_ms"]
            if o.empty:
                continue
            b50, o50 = float(base.median()), float(o.median())
            rows.append(
                {
                    "tokens": int(tokens),  # type: ignore[arg-type]
                    "baseline": baseline,
                    "label": other,
                    "baseline_p50_ms": b50,
                    "p50_ms": o50,
                    "n_baseline": len(base),
                    "n": len(o),
                    "speedup": b50 / o50 if o50 > 0 else None,
                    "speedup_ci": bootstrap_ratio_ci(base, o, seed=seed),
                    "what": f"median TTFT {baseline} / median TTFT {other} at the same requested length",
                }
            )
    return sorted(rows, key=lambda r: (r["label"], r["tokens"]))


def _rate_ci(a: list[PhaseStats], b: list[PhaseStats], seed: int) -> tuple[float, float] | None:
    """Bootstrap over repetitions (phases) when each side has at least two."""
    ra = [p.requests_per_s for p in a if p.requests_per_s]
    rb = [p.requests_per_s for p in b if p.requests_per_s]
    if len(ra) < 2 or len(rb) < 2:
        return None
    import numpy as np

    return bootstrap_ratio_ci(np.array(ra), np.array(rb), stat=np.mean, seed=seed)


def _pool(stats: list[PhaseStats]) -> dict[str, float | None]:
    ok = sum(p.ok for p in stats)
    dur = sum(p.duration_s or 0.0 for p in stats)
    return {"ok": ok, "duration_s": dur or None, "rate": (ok / dur) if dur else None}


def throughput_comparison(
    stats: list[PhaseStats], cached: str = "cached", baseline: str = "baseline", seed: int = DEFAULT_SEED
) -> dict[str, Any] | None:
    """Cached vs baseline: a requests/s ratio AND a total-time ratio, baseline named."""
    a = [p for p in stats if p.label == cached]
    if not a and cached == "cached":
        # a --noisy run has no "cached" phase: its quiet phases are the cached run
        cached = "quiet"
        a = [p for p in stats if p.label == cached]
    b = [p for p in stats if p.label == baseline]
    if not a or not b:
        return None
    pa, pb = _pool(a), _pool(b)
    ra, rb, ta, tb = pa["rate"], pb["rate"], pa["duration_s"], pb["duration_s"]
    return {
        "baseline": f"label '{baseline}' (phases {', '.join(p.phase for p in b)}): recomputes every prompt",
        "cached": f"label '{cached}' (phases {', '.join(p.phase for p in a)})",
        "cached_label": cached,
        "cached_requests_per_s": ra,
        "baseline_requests_per_s": rb,
        "cached_total_s": ta,
        "baseline_total_s": tb,
        "cached_ok": pa["ok"],
        "baseline_ok": pb["ok"],
        "rate_ratio": (ra / rb) if ra and rb else None,
        "rate_ratio_what": f"requests/s {cached} / requests/s {baseline}",
        "rate_ratio_ci": _rate_ci(a, b, seed),
        "time_ratio": (tb / ta) if ta and tb else None,
        "time_ratio_what": f"total time {baseline} / total time {cached}",
        "same_request_count": pa["ok"] == pb["ok"],
    }


def noise_impact(
    stats: list[PhaseStats], quiet: str = "quiet", noisy: str = "noisy", seed: int = DEFAULT_SEED
) -> dict[str, Any] | None:
    """Noisy vs quiet: the drop in requests/s relative to the quiet rate AND the rise in time."""
    q = [p for p in stats if p.label == quiet]
    n = [p for p in stats if p.label == noisy]
    if not q or not n:
        return None
    pq, pn = _pool(q), _pool(n)
    rq, rn, tq, tn = pq["rate"], pn["rate"], pq["duration_s"], pn["duration_s"]
    noise_rates: list[float] = [
        float(p.noise["mean_bytes_per_s"]) for p in n if p.noise and p.noise.get("mean_bytes_per_s")
    ]
    ci = _rate_ci(n, q, seed)
    return {
        "baseline": f"label '{quiet}' (phases {', '.join(p.phase for p in q)}): no competing traffic",
        "noisy": f"label '{noisy}' (phases {', '.join(p.phase for p in n)})",
        "quiet_requests_per_s": rq,
        "noisy_requests_per_s": rn,
        "quiet_total_s": tq,
        "noisy_total_s": tn,
        "rate_drop_pct": (1.0 - rn / rq) * 100.0 if rq and rn else None,
        "rate_drop_what": f"drop in requests/s relative to the {quiet} rate: 1 - {noisy}/{quiet}",
        "rate_drop_ci_pct": ((1.0 - ci[1]) * 100.0, (1.0 - ci[0]) * 100.0) if ci else None,
        "time_increase_pct": (tn / tq - 1.0) * 100.0 if tq and tn else None,
        "time_increase_what": f"increase in total time relative to the {quiet} time: {noisy}/{quiet} - 1",
        "noise_mean_bytes_per_s": (sum(noise_rates) / len(noise_rates)) if noise_rates else None,
        "same_request_count": pq["ok"] == pn["ok"],
    }
