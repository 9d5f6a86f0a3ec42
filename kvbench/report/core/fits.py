"""Model fits on a TTFT run (least squares with numpy), residuals and labelled extrapolations.

    warm TTFT = fixed latency + KV bytes moved / effective bandwidth
    cold TTFT = c0 + a * n + c * n^2        (prefill, n = prompt tokens)

The KV bytes of a prompt need the model's geometry: from the run's mock profile
(``target.mock_profile`` names a shipped profile, whose ``geometry`` is a preset),
else the ``--geometry`` preset given
by the user, else the target model name when it matches a preset; without one the
warm fit is per token. The run is read through `report.manifest` (the typed record).
Values at lengths outside the measured range are marked as extrapolations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from kvbench.model.geometry import geometry_for_target
from kvbench.model.kv_geometry import KVGeometry
from kvbench.report.core.manifest import RunManifest

if TYPE_CHECKING:
    import pandas as pd

EXTRAPOLATE_TO = (30_000, 60_000, 130_000, 200_000)


def geometry_for_run(run: RunManifest, preset: str | None = None) -> tuple[KVGeometry | None, str]:
    """The run's KV geometry and where it came from (None, "tokens" when unknown).

    Reading the run (which mock profile, which model) is `report.manifest`'s job; turning that
    into a geometry is `kvbench.model.geometry`'s.
    """
    spec, where = run.mock_profile_geometry()
    return geometry_for_target(spec, where, preset, run.manifest.target.model)


@dataclass
class Fit:
    kind: str  # "warm" | "cold"
    formula: str
    params: dict[str, float]
    x_name: str
    points: list[dict[str, float]]  # per length: x, measured median, fitted, residual
    rmse_ms: float
    r2: float | None
    measured_range: tuple[int, int]
    predictions: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    curve: list[dict[str, Any]] = field(default_factory=list)  # dense, for plots

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _lstsq(design: Any, y: Any) -> tuple[Any, Any, float, float | None]:
    import numpy as np

    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    fitted = design @ coef
    resid = y - fitted
    rmse = float(np.sqrt(np.mean(resid**2)))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum(resid**2)) / ss_tot if ss_tot > 0 else None
    return coef, fitted, rmse, r2


def _medians(df: pd.DataFrame, label: str) -> pd.DataFrame:
    from kvbench.report.core.stats import normalise

    d = normalise(df)
    d = d[
        (d["label"] == label)
        & (d["status"] == "ok")
        & d["ttft_ms"].notna()
        & d["prompt_tokens_requested"].notna()
    ]
    out: pd.DataFrame = d.groupby("prompt_tokens_requested", as_index=False).agg(
        ttft_ms=("ttft_ms", "median")
    )
    return out


def fit_warm(
    df: pd.DataFrame,
    geometry: KVGeometry | None,
    label: str = "warm",
    lengths: Sequence[int] = EXTRAPOLATE_TO,
) -> Fit | None:
    """Warm TTFT (median per length) = fixed + bytes / bandwidth; None with fewer than 2 lengths."""
    import numpy as np

    m = _medians(df, label)
    if len(m) < 2:
        return None
    n = m["prompt_tokens_requested"].to_numpy(dtype=float)
    y = m["ttft_ms"].to_numpy(dtype=float)
    x = np.array([geometry.kv_bytes(int(v)) for v in n]) if geometry else n
    coef, fitted, rmse, r2 = _lstsq(np.column_stack([np.ones_like(x), x]), y)
    fixed_ms, slope = float(coef[0]), float(coef[1])  # ms per byte (or per token)
    params: dict[str, float] = {"fixed_latency_ms": fixed_ms}
    notes = []
    if geometry:
        params["bandwidth_GBps"] = 1.0 / (slope * 1e-3) / 1e9 if slope > 0 else float("nan")
        formula = "TTFT = fixed + KV bytes / bandwidth"
        x_name = f"KV bytes ({geometry.name}, sliding layers at window size)"
    else:
        params["ms_per_1k_tokens"] = slope * 1000
        formula = "TTFT = fixed + k * tokens"
        x_name = "prompt tokens"
        notes.append("no KV geometry known: fitted per token, not per byte (pass --geometry)")
    if slope <= 0:
        notes.append("non-positive slope: warm TTFT does not grow with size here; bandwidth undefined")
    lo, hi = int(n.min()), int(n.max())
    preds = []
    for L in lengths:
        xv = geometry.kv_bytes(L) if geometry else float(L)
        preds.append(
            {
                "tokens": int(L),
                "ttft_ms": fixed_ms + slope * xv,
                "extrapolated": not (lo <= L <= hi),
            }
        )
    points = [
        {
            "tokens": float(a),
            "x": float(b),
            "measured_ms": float(c),
            "fitted_ms": float(d),
            "residual_ms": float(c - d),
        }
        for a, b, c, d in zip(n, x, y, fitted, strict=True)
    ]
    curve = [
        {
            "tokens": L,
            "ttft_ms": fixed_ms + slope * (geometry.kv_bytes(L) if geometry else float(L)),
            "extrapolated": not (lo <= L <= hi),
        }
        for L in _grid(lo, hi, lengths)
    ]
    return Fit("warm", formula, params, x_name, points, rmse, r2, (lo, hi), preds, notes, curve)


def _grid(lo: int, hi: int, lengths: Sequence[int], n: int = 48) -> list[int]:
    top = max([hi, *lengths])
    bottom = min(lo, *lengths) if lengths else lo
    step = (top - bottom) / (n - 1)
    pts = {int(bottom + i * step) for i in range(n)} | {lo, hi}
    return sorted(pts)


def fit_cold(df: pd.DataFrame, label: str = "cold", lengths: Sequence[int] = EXTRAPOLATE_TO) -> Fit | None:
    """Cold TTFT (median per length) = c0 + a n + c n^2 (c0 dropped with < 4 lengths)."""
    import numpy as np

    m = _medians(df, label)
    if len(m) < 2:
        return None
    n = m["prompt_tokens_requested"].to_numpy(dtype=float)
    y = m["ttft_ms"].to_numpy(dtype=float)
    with_intercept = len(m) >= 4
    cols = [n, n**2]
    if with_intercept:
        cols.insert(0, np.ones_like(n))
    coef, fitted, rmse, r2 = _lstsq(np.column_stack(cols), y)
    c0 = float(coef[0]) if with_intercept else 0.0
    a, c = float(coef[-2]), float(coef[-1])
    lo, hi = int(n.min()), int(n.max())
    params = {"fixed_ms": c0, "ms_per_token": a, "ms_per_token2": c}
    notes = []
    if not with_intercept:
        notes.append("fewer than 4 lengths: fitted without a fixed term")
    if c < 0:
        notes.append("negative quadratic term: the data do not show attention's n^2 cost")
    if with_intercept and c0 < 0:
        notes.append("negative fixed term: not physical; the intercept absorbs curvature or noise")
    share = c * hi**2 / (c0 + a * hi + c * hi**2) if (c0 + a * hi + c * hi**2) else float("nan")
    params["quadratic_share_at_max"] = share
    preds = [
        {"tokens": int(L), "ttft_ms": c0 + a * L + c * L * L, "extrapolated": not (lo <= L <= hi)}
        for L in lengths
    ]
    points = [
        {
            "tokens": float(t),
            "x": float(t),
            "measured_ms": float(v),
            "fitted_ms": float(f),
            "residual_ms": float(v - f),
        }
        for t, v, f in zip(n, y, fitted, strict=True)
    ]
    formula = "TTFT = c0 + a*n + c*n^2" if with_intercept else "TTFT = a*n + c*n^2"
    curve = [
        {"tokens": L, "ttft_ms": c0 + a * L + c * L * L, "extrapolated": not (lo <= L <= hi)}
        for L in _grid(lo, hi, lengths)
    ]
    return Fit("cold", formula, params, "prompt tokens", points, rmse, r2, (lo, hi), preds, notes, curve)


def fit_run(df: pd.DataFrame, run: RunManifest, preset: str | None = None) -> dict[str, Any]:
    geo, source = geometry_for_run(run, preset)
    warm = fit_warm(df, geo)
    cold = fit_cold(df)
    return {
        "geometry": geo.name if geo else None,
        "geometry_source": source,
        "warm": warm.to_dict() if warm else None,
        "cold": cold.to_dict() if cold else None,
    }
