"""Per phase: was TTFT the server's, or how a proxy delivered the stream (the rows' `delivery`)?

The client judges each request (kvbench.client.delivery: `burst`, `batched`); here
the rows are counted per phase, and a phase where most ok answers were delivery-bound gets its
TTFT labelled so in the report and the key table, with one note naming the likely cause. Rows
written before `delivery` existed count their `burst` flag only.
"""

from __future__ import annotations

import pandas as pd

WHAT = {
    "burst": "the whole answer came in one burst with the response headers",
    "batched": "the first read already held later tokens",
}
CAUSE = (
    "a proxy batching the stream? HAProxy: option http-no-delay; "
    "nginx: proxy_buffering off or X-Accel-Buffering: no; else a server too loaded to write as it goes"
)


def _kinds(df: pd.DataFrame) -> pd.Series:
    if "delivery" in df.columns:
        return df["delivery"].where(df["delivery"].notna(), None)
    burst = df["burst"] if "burst" in df.columns else pd.Series(False, index=df.index)
    return burst.fillna(False).astype(bool).map({True: "burst", False: None})


def phase_delivery(df: pd.DataFrame) -> dict[str, str]:
    """{phase: why its TTFT is delivery-bound} for each phase where most ok answers were."""
    if df.empty or "phase" not in df.columns:
        return {}
    ok = df[(df["status"] == "ok") & df["first_token_ns"].notna()]
    if "token_ns" in ok.columns:  # a one-token answer can show neither sign
        ok = ok[ok["token_ns"].map(lambda t: isinstance(t, list) and len(t) >= 2)]
    out: dict[str, str] = {}
    for phase, rows in ok.groupby("phase", sort=False):
        kinds = _kinds(rows).dropna()
        if len(kinds) * 2 <= len(rows):
            continue
        kind = str(kinds.value_counts().index[0])
        out[str(phase)] = f"{WHAT.get(kind, kind)} in {len(kinds)} of {len(rows)} answers"
    return out


def delivery_notes(bound: dict[str, str]) -> list[str]:
    """One note per delivery-bound phase: what was seen, that TTFT is not the server's, the cause."""
    return [
        f"phase {phase}: TTFT is delivery-bound, not the server's: {why} ({CAUSE})"
        for phase, why in bound.items()
    ]
