"""cold_reuse: the best throughput speedup an EMPTY cache can give over recomputing everything.

P distinct prompts, each requested `uses` times, a fraction f of every prompt shared by all
as a prefix; hits cost nothing (free loads: an upper bound). A speedup above `uses` needs
shared prefixes; the f it needs is solved for linear and quadratic prefill cost
(`kvbench.model.prefill`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvbench.audit.bounds.base import BoundKind, Context, stated_of, value
from kvbench.audit.quantities import fmt_num
from kvbench.model.prefill import cold_reuse_speedup, required_shared_fraction

if TYPE_CHECKING:
    from kvbench.audit.schema import Bound


def _assumptions(uses: float, prompts: float, requests: float) -> list[str]:
    return [
        f"the cache starts empty; {fmt_num(prompts)} distinct prompts, each requested "
        f"{fmt_num(uses)} times ({fmt_num(requests)} requests), all of the same length n",
        "a prompt's first use is computed in full; every later use is a full hit (best-case order: "
        "no reuse is in flight together with its first use, which concurrency makes likely)",
        "a cache hit costs nothing (free load): an upper bound on the speedup",
        "the baseline recomputes every request in full; decode and other per-request costs are ignored "
        "(they are paid by both and would pull the ratio towards 1)",
        "prefill cost c(n) = a*n (linear) or c*n^2 (quadratic attention term); real prefill lies between",
        "f = fraction of every prompt that is a prefix shared by all prompts (cached after its first "
        "computation); a suffix after a cached prefix of f*n tokens costs a*(1-f)*n, or c*(1-f^2)*n^2",
        f"speedup S(f) = {fmt_num(uses)}*P / (1 + (P-1)*(1-f)) linear, or {fmt_num(uses)}*P / "
        f"(1 + (P-1)*(1-f^2)) quadratic, with P = {fmt_num(prompts)} prompts",
    ]


def compute(ctx: Context, b: Bound) -> dict[str, Any]:
    requests, _ = value(ctx, b, b.requests, positive=True)
    prompts, _ = value(ctx, b, b.prompts, positive=True)
    uses = requests / prompts
    target = stated_of(ctx, b.claim) if b.claim is not None else b.stated
    assert target is not None
    f_lin = required_shared_fraction(uses, prompts, target, "linear")
    f_quad = required_shared_fraction(uses, prompts, target, "quadratic")
    no_share = cold_reuse_speedup(uses, prompts, 0.0)
    table = [
        {
            "shared_fraction": f,
            "linear": cold_reuse_speedup(uses, prompts, f, "linear"),
            "quadratic": cold_reuse_speedup(uses, prompts, f, "quadratic"),
        }
        for f in (0.0, 0.5, 0.8, 0.9, 0.95, 0.99)
    ]
    if f_lin is None or f_quad is None:
        verdict = (
            f"{fmt_num(target)}x is unreachable even with identical prompts (max {fmt_num(uses * prompts)}x)"
        )
        headline, status = verdict, "finding"
    elif target > no_share:
        verdict = (
            f"{fmt_num(target)}x exceeds the {fmt_num(no_share)}x possible without shared prefixes: it needs "
            f"every prompt to share at least {f_lin:.1%} (linear cost) to {f_quad:.1%} (quadratic cost) "
            "of its tokens with all the others, or a cache that was not empty"
        )
        headline = (
            f"{fmt_num(target)}x from an empty cache needs prompts sharing >= {f_lin:.1%} of their tokens "
            f"(at most {fmt_num(no_share)}x without sharing)"
        )
        status = "finding"
    else:
        verdict = f"{fmt_num(target)}x is within the {fmt_num(no_share)}x possible without shared prefixes"
        headline, status = verdict, "ok"
    return {
        "id": b.id,
        "kind": b.kind,
        "description": b.description,
        "claim": b.claim,
        "target_speedup": target,
        "max_speedup_no_sharing": no_share,
        "max_speedup_identical_prompts": uses * prompts,
        "required_shared_fraction": {"linear": f_lin, "quadratic": f_quad},
        "table": table,
        "verdict": verdict,
        "status": status,
        "headline": headline,
        "assumptions": _assumptions(uses, prompts, requests),
        "note": "if the cache had been filled before the run (not the published setup), every request "
        "could hit and this bound would not apply: the speedup would then be compute time over load time, "
        "as in the TTFT test",
    }


def lines(b: dict[str, Any]) -> list[str]:
    out = ["shared prefix f   speedup (linear)   speedup (quadratic)"]
    for row in b["table"]:
        out.append(f"{row['shared_fraction']:>15.0%}   {row['linear']:>15.1f}x   {row['quadratic']:>18.1f}x")
    return out


KIND = BoundKind("cold_reuse", compute, lines)
