"""prefill_scaling: is an uncached TTFT pair plausible for prefill that grows between n and n^2?

Fits t(n) = a*n + c*n^2 (`kvbench.model.prefill`) through the two points and says whether
the shorter time lies between pure-quadratic and linear scaling from the longer one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvbench.audit.bounds.base import BoundKind, Context, basis, value
from kvbench.audit.quantities import fmt_num
from kvbench.errors import UsageError
from kvbench.model.prefill import fit_prefill

if TYPE_CHECKING:
    from kvbench.audit.schema import Bound


def fit_points(ctx: Context, b: Bound) -> tuple[float, float, float, float, float, float, list[Any]]:
    """(n1, t1, n2, t2, a, c, figures used) of a bound's two uncached TTFT points."""
    n1, fn1 = value(ctx, b, b.short_tokens, positive=True)
    t1, ft1 = value(ctx, b, b.short_time, positive=True)
    n2, fn2 = value(ctx, b, b.long_tokens, positive=True)
    t2, ft2 = value(ctx, b, b.long_time, positive=True)
    try:
        a, c = fit_prefill(n1, t1, n2, t2)
    except ValueError as exc:
        raise UsageError(f"bounds '{b.id}': {exc}") from None
    return n1, t1, n2, t2, a, c, [fn1, ft1, fn2, ft2]


def compute(ctx: Context, b: Bound) -> dict[str, Any]:
    n1, t1, n2, t2, a, c, used = fit_points(ctx, b)
    linear_pred = t2 * n1 / n2
    quad_pred = t2 * (n1 / n2) ** 2
    lo_pred, hi_pred = min(linear_pred, quad_pred), max(linear_pred, quad_pred)
    at = f"{fmt_num(t1)} s at {fmt_num(n1)} tokens"
    if lo_pred <= t1 <= hi_pred:
        verdict = (
            f"{at} lies between pure-quadratic ({fmt_num(quad_pred)} s) and "
            f"linear ({fmt_num(linear_pred)} s) "
            f"scaling from {fmt_num(t2)} s at {fmt_num(n2)}: plausible; the quadratic term is "
            f"{c * n2**2 / t2:.0%} of the time at {fmt_num(n2)} tokens"
        )
        headline, status = f"{at} lies between quadratic and linear scaling: plausible", "ok"
    elif t1 > hi_pred:
        verdict = (
            f"{at} is above linear scaling ({fmt_num(hi_pred)} s): it needs a fixed per-request overhead, "
            "or a negative quadratic term (implausible)"
        )
        headline, status = f"{at} is above linear scaling ({fmt_num(hi_pred)} s)", "finding"
    else:
        verdict = (
            f"{at} is below pure-quadratic scaling ({fmt_num(lo_pred)} s): prefill would grow faster than n^2"
        )
        headline, status = verdict, "finding"
    b_basis = basis(used)
    if "implied" in b_basis:
        headline += " (but it rests on an implied figure)"
    return {
        "id": b.id,
        "kind": b.kind,
        "description": b.description,
        "basis": b_basis,
        "points": [[n1, t1], [n2, t2]],
        "fit": {"a_s_per_token": a, "c_s_per_token2": c},
        "linear_prediction_s": linear_pred,
        "quadratic_prediction_s": quad_pred,
        "verdict": verdict,
        "status": status,
        "headline": headline,
        "assumptions": [
            "uncached TTFT is prefill time t(n) = a*n + c*n^2 (no fixed overhead, no queueing)",
            "both points come from the same server and settings",
        ],
        "note": "a two-point fit has no residual: it shows what the figures imply, not that they are right",
    }


def lines(b: dict[str, Any]) -> list[str]:
    fit = b["fit"]
    return [
        f"t(n) = a*n + c*n^2 through both points: a = {fit['a_s_per_token']:.3e} s/token, "
        f"c = {fit['c_s_per_token2']:.3e} s/token^2"
    ]


KIND = BoundKind("prefill_scaling", compute, lines)
