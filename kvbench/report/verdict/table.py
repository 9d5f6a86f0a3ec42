"""The verdict table, pure: each arm's request rows in, one row per figure and arm pair out.

Figures: hit ratio (cached / prompt tokens over the arm), its share by serving tier where the
server's counters say, TTFT p50 and p99, goodput at the run's SLO. Each non-offload arm is set
against `offload`: the change (a difference for ratios, shown in points; a relative change for
latencies, in percent) with its 95% interval (bootstrap over requests, both arms resampled; Wilson
per arm for goodput), and whether the difference is distinguishable (the interval excludes no change).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from kvbench.report.core.goodput import is_good, wilson
from kvbench.report.core.stats import DEFAULT_SEED, N_BOOT, bootstrap_ratio_ci

REFERENCE = "offload"
ARMS = ("offload", "no-offload", "no-reuse")  # as kvbench.run.arms names them (report reads no run code)
Rows = Sequence[Mapping[str, Any]]


def _ok(rows: Rows) -> list[Mapping[str, Any]]:
    return [r for r in rows if r.get("status") == "ok"]


def hit_ratio(rows: Rows) -> float | None:
    """Cached over prompt tokens of the arm's answered requests (None with no prompt tokens)."""
    ok = _ok(rows)
    prompt = sum(int(r.get("prompt_tokens") or 0) for r in ok)
    return sum(int(r.get("cached_tokens") or 0) for r in ok) / prompt if prompt else None


def _hit_diff_ci(a: Rows, b: Rows, seed: int = DEFAULT_SEED) -> tuple[float, float] | None:
    """95% interval of hit_ratio(b) - hit_ratio(a), requests resampled on each side."""
    pa, pb = (
        np.array([[r.get("cached_tokens") or 0, r.get("prompt_tokens") or 0] for r in _ok(x)], float)
        for x in (a, b)
    )
    if len(pa) < 2 or len(pb) < 2:
        return None
    rng = np.random.default_rng(seed)
    sa = pa[rng.integers(0, len(pa), (N_BOOT, len(pa)))].sum(axis=1)
    sb = pb[rng.integers(0, len(pb), (N_BOOT, len(pb)))].sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = sb[:, 0] / sb[:, 1] - sa[:, 0] / sa[:, 1]
    d = d[np.isfinite(d)]
    if d.size == 0:
        return None
    lo, hi = np.quantile(d, [0.025, 0.975])
    return float(lo), float(hi)


def _ttft(rows: Rows) -> list[float]:
    return [float(r["ttft_ms"]) for r in _ok(rows) if r.get("ttft_ms") is not None]


def _q(q: float) -> Callable[[np.ndarray], Any]:
    return lambda x: np.quantile(x, q)


def _row(
    figure: str,
    arm: str,
    ref: float | None,
    other: float | None,
    change: float | None,
    ci: tuple[float, float] | None,
    zero: float = 0.0,
) -> dict[str, Any]:
    distinct = None if ci is None else not (ci[0] <= zero <= ci[1])
    return {
        "figure": figure,
        "arm": arm,
        "offload": ref,
        "other": other,
        "change": change,
        "ci": list(ci) if ci is not None else None,
        "distinguishable": distinct,
    }


def _ttft_rows(arm: str, a: list[float], b: list[float]) -> list[dict[str, Any]]:
    out = []
    for name, q in (("TTFT p50 (ms)", 0.5), ("TTFT p99 (ms)", 0.99)):
        va = float(np.quantile(a, q)) if a else None
        vb = float(np.quantile(b, q)) if b else None
        change = vb / va - 1 if va and vb is not None else None
        ci = bootstrap_ratio_ci(b, a, stat=_q(q)) if a and b else None
        out.append(_row(name, arm, va, vb, change, (ci[0] - 1, ci[1] - 1) if ci else None))
    return out


def _goodput_row(arm: str, a: Rows, b: Rows, bounds: Mapping[str, float]) -> dict[str, Any]:
    ga, gb = sum(is_good(r, bounds) for r in a), sum(is_good(r, bounds) for r in b)
    ra, rb = (ga / len(a) if a else None), (gb / len(b) if b else None)
    wa, wb = wilson(ga, len(a)), wilson(gb, len(b))
    # conservative: distinguishable when the two arms' Wilson intervals do not overlap
    row = _row(
        "goodput at SLO",
        arm,
        ra,
        rb,
        rb - ra if ra is not None and rb is not None else None,
        (wb[0] - wa[1], wb[1] - wa[0]),
    )
    return row


def tier_shares(tier_tokens: Mapping[str, float], prompt_tokens: float) -> dict[str, float]:
    """Each serving tier's hit tokens as a share of the arm's prompt tokens."""
    return {t: v / prompt_tokens for t, v in sorted(tier_tokens.items())} if prompt_tokens else {}


def verdict_rows(
    arms: Mapping[str, Rows],
    bounds: Mapping[str, float],
    tiers: Mapping[str, Mapping[str, float]] | None = None,
    reference: str = REFERENCE,
) -> list[dict[str, Any]]:
    """The verdict table: every arm other than `reference` (offload) set against it, figure by figure."""
    if reference not in arms:
        return []
    ref = arms[reference]
    out: list[dict[str, Any]] = []
    for arm, rows in arms.items():
        if arm == reference:
            continue
        ha, hb = hit_ratio(ref), hit_ratio(rows)
        out.append(
            _row(
                "hit ratio",
                arm,
                ha,
                hb,
                hb - ha if ha is not None and hb is not None else None,
                _hit_diff_ci(ref, rows),
            )
        )
        for tier in sorted(set((tiers or {}).get(reference, {})) | set((tiers or {}).get(arm, {}))):
            pa = sum(int(r.get("prompt_tokens") or 0) for r in _ok(ref))
            pb = sum(int(r.get("prompt_tokens") or 0) for r in _ok(rows))
            sa = tier_shares((tiers or {}).get(reference, {}), pa).get(tier, 0.0)
            sb = tier_shares((tiers or {}).get(arm, {}), pb).get(tier, 0.0)
            out.append(_row(f"hit share {tier}", arm, sa, sb, sb - sa, None))
        out.extend(_ttft_rows(arm, _ttft(ref), _ttft(rows)))
        out.append(_goodput_row(arm, ref, rows, bounds))
    return out


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def _relative(figure: str) -> bool:
    """Latency rows carry a relative change; ratio rows (hit ratio, shares, goodput) a difference."""
    return figure.startswith("TTFT")


def _change(v: float | None, relative: bool) -> str:
    # a ratio's difference in percentage points, a latency's change in percent: a bare -0.295 beside
    # a bare 1.69 read as the same kind of number
    if v is None:
        return "—"
    return f"{v * 100:+.1f}%" if relative else f"{v * 100:+.1f} pts"


HEAD = ["figure", "vs arm", "offload", "that arm", "that arm vs offload", "95% interval", "distinguishable"]


def verdict_cells(rows: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """The table's cells, for report.core.formats' Table (md, html, terminal alike)."""
    out = []
    for r in rows:
        rel, ci = _relative(r["figure"]), r["ci"]
        ci_s = f"[{_change(ci[0], rel)}, {_change(ci[1], rel)}]" if ci else "—"
        dist = {True: "yes", False: "no", None: "—"}[r["distinguishable"]]
        out.append(
            [
                r["figure"],
                r["arm"],
                _fmt(r["offload"]),
                _fmt(r["other"]),
                _change(r["change"], rel),
                ci_s,
                dist,
            ]
        )
    return out


def verdict_markdown(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The table as markdown lines (the report and the console's last words)."""
    if not rows:
        return []
    lines = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    return lines + ["| " + " | ".join(cells) + " |" for cells in verdict_cells(rows)]
