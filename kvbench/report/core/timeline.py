"""Time series of a run for the plots: completions and requests in flight per time bin, noise rate.

Pure functions over the requests DataFrame and noise.jsonl rows; the plots draw them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from kvbench.report.core.stats import normalise

if TYPE_CHECKING:
    import pandas as pd


def auto_bin(span_s: float, target_bins: int = 60) -> float:
    """A round bin width giving at most about `target_bins` bins over `span_s` seconds."""
    for width in (0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0):
        if span_s / width <= target_bins:
            return width
    return 600.0


def timeline(df: pd.DataFrame, bin_s: float | None = 1.0) -> pd.DataFrame:
    """Per time bin: completions/s (ok requests ending), errors, requests in flight (mean over the bin).

    `bin_s=None` picks a round width from the run's span (`auto_bin`); the width is in column bin_s.
    """
    import numpy as np
    import pandas as pd

    df = normalise(df)
    d = df[df["sent_ns"].notna() & df["end_ns"].notna()]
    cols = ["t_s", "completions_per_s", "errors_per_s", "in_flight", "phase", "bin_s"]
    if d.empty:
        return pd.DataFrame(columns=cols)
    t0 = float(d["sent_ns"].min())
    if bin_s is None:
        bin_s = auto_bin((float(d["end_ns"].max()) - t0) / 1e9)
    sent = (d["sent_ns"].to_numpy(dtype=float) - t0) / 1e9
    end = (d["end_ns"].to_numpy(dtype=float) - t0) / 1e9
    ok = (d["status"] == "ok").to_numpy()
    nbins = max(1, math.ceil(end.max() / bin_s))
    edges = np.arange(nbins + 1) * bin_s
    comp, _ = np.histogram(end[ok], bins=edges)
    errs, _ = np.histogram(end[~ok], bins=edges)
    # mean number of requests in flight over each bin = overlap time / bin width
    lo = edges[:-1][None, :]
    hi = edges[1:][None, :]
    overlap = np.clip(np.minimum(end[:, None], hi) - np.maximum(sent[:, None], lo), 0, None)
    in_flight = overlap.sum(axis=0) / bin_s
    phases = d["phase"].to_numpy()
    mid = (edges[:-1] + edges[1:]) / 2
    phase_at = []
    for m in mid:
        active = phases[(sent <= m) & (end >= m)]
        phase_at.append(str(active[0]) if active.size else "")
    return pd.DataFrame(
        {
            "t_s": edges[:-1],
            "completions_per_s": comp / bin_s,
            "errors_per_s": errs / bin_s,
            "in_flight": in_flight,
            "phase": phase_at,
            "bin_s": bin_s,
        }
    )


def noise_rate(noise_rows: list[dict[str, Any]], clock_origin_ns: int | None = None) -> pd.DataFrame:
    """noise.jsonl as a DataFrame with t_s (seconds from run start) and summed bytes_per_s per second."""
    import pandas as pd

    if not noise_rows:
        return pd.DataFrame(columns=["t_s", "phase", "bytes_per_s"])
    nd = pd.DataFrame(noise_rows)
    if "bytes_per_s" not in nd.columns:
        nd["bytes_per_s"] = 0.0
    nd["t_s"] = pd.to_numeric(nd["t_ns"], errors="coerce") / 1e9
    nd["sec"] = nd["t_s"].round(0)
    grouped: pd.DataFrame = nd.groupby(["sec", "phase"], as_index=False).agg(
        bytes_per_s=("bytes_per_s", "sum")
    )
    return grouped.rename(columns={"sec": "t_s"})
