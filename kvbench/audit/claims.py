"""Check one claim: recompute it from the figures it cites and compare with the stated value.

Verdicts: consistent (the recomputed value rounds to the stated one, or can within the
rounding of the inputs: a note says so), discrepancy (it cannot; readings that would give
the stated value are searched), unverifiable (the claim needs a figure that was not
published, or rests on one that was only implied by another claim: the value that figure
would need is solved for and shown, and the claim is never called consistent), invalid (a
unit, dimension or expression problem of this claim or of a figure it uses: the reason and the
fix are shown, and every other claim is still judged).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from kvbench.audit.checks import Problem
from kvbench.audit.expr import ExprError, eval_expr, expr_names, parse_expr
from kvbench.audit.figures import Figures
from kvbench.audit.ledger import ClaimResult
from kvbench.audit.quantities import Interval, exact_range, fmt_against, fmt_num, match, stated_range
from kvbench.audit.readings.search import alternatives
from kvbench.audit.schema import Claim
from kvbench.audit.units import Unit, parse_unit


def fmt_iv(iv: Interval) -> str:
    if iv.lo == iv.hi:
        return fmt_num(iv.mid)
    return f"{fmt_num(iv.mid)} [{fmt_num(iv.lo)}, {fmt_num(iv.hi)}]"


def stated_text(value: float, unit: str, decimals: int | None) -> str:
    """The stated value as printed: '18%', '0.25 s', '825 GB'."""
    num = fmt_num(value, decimals)
    return f"{num}{unit}" if unit in ("x", "%") else f"{num} {unit}".strip()


def _unverifiable(figs: Figures, claim: Claim, result: ClaimResult, names: list[str]) -> ClaimResult:
    leaves = figs.leaves(names)
    missing = sorted(n for n in leaves if figs[n].interval is None)
    implied = sorted(n for n in leaves if figs[n].kind == "implied")
    target = claim.stated * parse_unit(claim.unit, figs.cf.units).factor
    tree = parse_expr(claim.expr, figs.values)
    for n in missing + implied:
        fv = figs[n]
        if fv.implied_by == claim.id and fv.interval is not None:
            result.notes.append(
                f"{n} was not published; this claim implies {n} = {fmt_num(fv.interval.mid)} {fv.unit}"
            )
            result.implied_needed[n] = fv.interval.mid
            result.headline = (
                f"needs {fv.label} (not published); implies it is {fmt_num(fv.interval.mid)} {fv.unit}"
            )
            continue
        need = figs.solve(tree, n, target) if len(missing + implied) == 1 else None
        how = "not published" if fv.interval is None else f"only implied by claim {fv.implied_by}"
        text = f"rests on {n} ({fv.label}), {how}"
        if fv.interval is not None:
            text += f" as {fmt_num(fv.interval.mid)} {fv.unit}"
        if need is not None:
            result.implied_needed[n] = need
            text += f"; the stated {result.stated_text} needs {n} = {fmt_num(need)} {fv.unit}"
        result.notes.append(text)
        result.headline = f"rests on {fv.label} ({how})" + (
            f"; would need {fmt_num(need)} {fv.unit}" if need is not None else ""
        )
    if implied and not missing and any(figs[n].implied_by != claim.id for n in implied):
        try:
            rc = eval_expr(tree, figs.env()).scale(1.0 / parse_unit(claim.unit, figs.cf.units).factor)
            result.notes.append(
                f"with the implied value it gives {fmt_num(rc.mid)} {claim.unit}: not evidence"
            )
        except (ZeroDivisionError, ExprError):
            pass
    return result


def _invalid(result: ClaimResult, problem: Problem) -> ClaimResult:
    result.verdict, result.headline, result.fix = "invalid", problem.text(), problem.fix
    return result


def _exact_match(figs: Figures, tree: Any, unit: Unit, claim: Claim) -> str | bool | None:
    """The verdict's match decided in Fractions (rounding edges), or False when it cannot be."""
    env = figs.exact_env()
    if env is None:
        return False
    try:
        rc = eval_expr(tree, env, exact=True).scale(1 / unit.exact)  # type: ignore[arg-type]
    except (ZeroDivisionError, ExprError, OverflowError):
        return False
    if not all(isinstance(x, Fraction | int) for x in (rc.lo, rc.mid, rc.hi)):
        return False  # a power went through floats: no exact answer
    lo, hi = exact_range(claim.stated, claim.decimals)
    return match(rc, lo, hi, exact=True)


def check_claim(figs: Figures, claim: Claim, problem: Problem | None = None) -> ClaimResult:
    lo, hi = stated_range(claim.stated, claim.decimals)
    result = ClaimResult(
        id=claim.id,
        description=claim.description,
        expr=claim.expr,
        stated=claim.stated,
        unit=claim.unit,
        decimals=claim.decimals,
        stated_range=(lo, hi),
        recomputed=None,
        verdict="unverifiable",
        assumptions=list(claim.assumptions),
        stated_text=stated_text(claim.stated, claim.unit, claim.decimals),
    )
    if problem is not None:
        return _invalid(result, problem)
    tree = parse_expr(claim.expr, figs.values)
    names = expr_names(tree)
    unit = parse_unit(claim.unit, figs.cf.units)
    bad = figs.invalid_among(names)
    if bad is not None:
        why = figs.invalid[bad]
        return _invalid(result, Problem(f"uses invalid figure '{bad}' ({why.message})"))
    leaves = figs.leaves(names)
    kinds = {figs[n].basis for n in leaves}
    result.basis = next((k for k in ("unknown", "implied", "model") if k in kinds), "published")
    if any(figs[n].interval is None or figs[n].kind == "implied" for n in leaves):
        return _unverifiable(figs, claim, result, names)
    try:
        rc = eval_expr(tree, figs.env()).scale(1.0 / unit.factor)
    except ZeroDivisionError:
        env = figs.env()
        zeros = [n for n in names if env[n].mid == 0]
        which = f" ({', '.join(zeros)} = 0)" if zeros else ""
        return _invalid(result, Problem(f"claims '{claim.id}' = {claim.expr}: division by zero{which}"))
    except ExprError as exc:
        return _invalid(result, Problem(f"claims '{claim.id}' = {claim.expr}: {exc}"))
    result.recomputed = rc
    exact = _exact_match(figs, tree, unit, claim)
    m = match(rc, lo, hi) if exact is False else exact
    shown = fmt_against(rc.mid, lo, hi, claim.decimals)
    recomputed = f"{shown}{claim.unit}" if claim.unit in ("x", "%") else f"{shown} {claim.unit}"
    if m is not None:
        result.verdict = "consistent"
        result.headline = f"recomputed {recomputed.strip()}"
        if m != "exact":
            result.headline += " (within input rounding)"
            result.notes.append(
                f"only within the rounding of its inputs: the printed figures give {fmt_num(rc.mid)}, "
                f"their ranges allow [{fmt_num(rc.lo)}, {fmt_num(rc.hi)}]"
            )
    else:
        result.verdict = "discrepancy"
        result.readings, result.unrelated_matches = alternatives(figs, claim, rc)
        result.headline = f"recomputed {recomputed.strip()}"
        if result.readings:
            result.headline += f"; {result.stated_text} = " + ", or ".join(
                r.brief or r.text for r in result.readings[:2]
            )
        else:
            result.headline += "; no reading of the related figures gives it"
    derived = [n for n in names if figs[n].kind in ("derived", "model")]
    if derived:
        result.notes.append("uses figures kvbench derived (not published): " + ", ".join(derived))
    return result
