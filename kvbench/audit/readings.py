"""Alternative readings: other ways of computing a stated value that does not match.

Searched generically over the file: the claim's own change taken relative to its other end
(a drop 4.26 -> 3.6 relative to 3.6, a rise 4 -> 5 relative to 5), the inverse ratio, the
same quantity in a sibling unit (GB/GiB, KB/KiB, s/ms), single figures and pairs of
figures of one dimension (times instead of rates, via quantities such as requests / (req/s)).
Readings are phrased with the figures' labels, duplicates are removed (a reading that only
re-expresses a simpler one through other figures is dropped), and they are ranked by how
simple they are. Readings that use only figures unrelated to the claim are counted, not shown.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import Any

from kvbench.audit.expr import eval_expr, expr_names, parse_expr
from kvbench.audit.figures import Figures
from kvbench.audit.ledger import Reading
from kvbench.audit.quantities import Interval, fmt_num, match, stated_range
from kvbench.audit.schema import Claim
from kvbench.audit.units import Dims, Unit, parse_unit, sibling_units

_CHANGE = {"percent_drop": -1, "percent_change": 1, "percent_increase": 1}


@dataclass(frozen=True)
class _Quantity:
    ids: str  # "a" or "a / b"
    label: str
    show: str  # the value with its unit
    base: Interval  # in base units
    unit: Unit
    figures: tuple[str, ...]
    depth: int


def _pool(figs: Figures) -> list[_Quantity]:
    """Every figure, plus a/b and a*b of two figures when the result has a unit the file uses."""
    base = []
    for fv in figs.values.values():
        if fv.interval is None or not math.isfinite(fv.interval.mid) or fv.interval.mid == 0:
            continue
        u = figs.units[fv.id]
        base.append(_Quantity(fv.id, fv.label, figs.show(fv.id), fv.interval.scale(u.factor), u, (fv.id,), 0))
    unit_by_dims: dict[Dims, Unit] = {}
    for q in base:
        if q.unit.dims and q.unit.dims not in unit_by_dims:
            unit_by_dims[q.unit.dims] = q.unit
    pool = list(base)
    for a in base:
        for b in base:
            for op in ("/", "*"):
                if a.ids == b.ids or (op == "*" and a.ids > b.ids):
                    continue
                dims: dict[str, int] = dict(a.unit.dims)
                for k, v in b.unit.dims:
                    dims[k] = dims.get(k, 0) + (v if op == "*" else -v)
                key = tuple(sorted((k, v) for k, v in dims.items() if v))
                if key not in unit_by_dims:
                    continue
                u = unit_by_dims[key]
                val = a.base / b.base if op == "/" else a.base * b.base
                show = f"{fmt_num(val.mid / u.factor)} {u.text}"
                label = f"{a.label} {op} {b.label}"
                pool.append(_Quantity(f"{a.ids} {op} {b.ids}", label, show, val, u, (a.ids, b.ids), 1))
    return pool


def related_set(figs: Figures, claim_figs: set[str]) -> set[str]:
    """Figures appearing with the claim's figures in an expression, or sharing a `test` tag."""
    ids = list(figs.values)
    groups = [{fid, *expr_names(tree)} for fid, tree in figs.trees.items()]
    groups += [set(expr_names(parse_expr(c.expr, ids))) for c in figs.cf.claims]
    related = set(claim_figs)
    for g in groups:
        if g & claim_figs:
            related |= g
    tags = set().union(*(figs[f].tags for f in claim_figs if f in figs.values)) if claim_figs else set()
    related |= {fv.id for fv in figs.values.values() if fv.tags & tags}
    return related


class _Search:
    """Collects readings that fall in the stated range."""

    def __init__(self, figs: Figures, claim: Claim) -> None:
        self.figs, self.claim, self._match = figs, claim, match
        self.unit = parse_unit(claim.unit, figs.cf.units)
        self.lo, self.hi = stated_range(claim.stated, claim.decimals)
        self.tree = parse_expr(claim.expr, figs.values)
        self.claim_figs = set(expr_names(self.tree))
        self.related = related_set(figs, self.claim_figs)
        stated = Interval.printed(claim.stated, claim.decimals).scale(self.unit.factor).mid
        # the stated number itself may be a figure (825 GB): a reading must not use it
        self.banned = {
            fv.id
            for fv in figs.values.values()
            if fv.kind == "published"
            and fv.interval is not None
            and figs.units[fv.id].dims == self.unit.dims
            and math.isclose(fv.interval.mid * figs.units[fv.id].factor, stated, rel_tol=1e-9)
        }
        self.found: list[tuple[Reading, bool]] = []

    def add(
        self, text: str, brief: str, iv: Interval, unit: str, figures: tuple[str, ...], depth: int, own: bool
    ) -> None:
        m = self._match(iv, self.lo, self.hi)
        if m is None:
            return
        flat = tuple(dict.fromkeys(x for f in figures for x in f.split(" ") if x in self.figs.values))
        if self.figs.leaves(flat) & self.banned:
            return
        r = Reading(text, iv.mid, unit, m, flat, set(flat) <= self.related, depth, brief)
        self.found.append((r, own))


def _own(s: _Search, recomputed: Interval) -> None:
    """The claim's own computation, read differently."""
    figs, claim, unit = s.figs, s.claim, s.unit
    own = tuple(sorted(s.claim_figs))
    body = s.tree.body
    if unit.is_percent and isinstance(body, ast.Call) and isinstance(body.func, ast.Name):
        sign = _CHANGE.get(body.func.id)
        if sign is not None:
            env = figs.env()
            old, new = eval_expr(body.args[0], env), eval_expr(body.args[1], env)
            if new.mid != 0:
                other = ((new - old) / new).abs().scale(100.0)
                word = "drop" if new.mid < old.mid else "rise"
                u = parse_unit("", figs.cf.units)
                names = [ast.unparse(a) for a in body.args]
                shown = [_show(figs, n, old if i == 0 else new, u) for i, n in enumerate(names)]
                s.add(
                    f"the {word} from {shown[0]} to {shown[1]} taken relative to the end value {shown[1]}, "
                    f"not the start",
                    f"the {word} taken relative to {shown[1]} ({fmt_num(other.mid, 1)}%)",
                    other,
                    "%",
                    own,
                    0,
                    True,
                )
    if unit.is_ratio and recomputed.mid != 0:
        inv = Interval.exact(1.0) / recomputed
        s.add("the inverse ratio", f"the inverse ratio ({fmt_num(inv.mid)}x)", inv, "x", own, 0, True)
    if unit.dims:
        base = recomputed.scale(unit.factor)
        for alt in sibling_units(unit):
            au = parse_unit(alt, figs.cf.units)
            v = base.scale(1.0 / au.factor)
            s.add(
                f"the recomputed {fmt_num(recomputed.mid)} {claim.unit} read in {alt} (not {claim.unit})",
                f"the same quantity in {alt} ({fmt_num(v.mid)} {alt})",
                v,
                alt,
                own,
                0,
                True,
            )


def _show(figs: Figures, name: str, base: Interval, _u: Unit) -> str:
    if name in figs.values:
        return figs.show(name)
    return fmt_num(base.mid)


def _span(a: str, b: str) -> str:
    """'46.94 -> 55.56 s' when both values carry the same unit, else '4 GB -> 3 GiB'."""
    ua, ub = a.partition(" ")[2], b.partition(" ")[2]
    return f"{a.partition(' ')[0]} -> {b}" if ua == ub else f"{a} -> {b}"


def _pairs(s: _Search) -> None:
    pool = _pool(s.figs)
    unit, claim = s.unit, s.claim
    if unit.dimensionless:
        by_dims: dict[Dims, list[_Quantity]] = {}
        for q in pool:
            by_dims.setdefault(q.unit.dims, []).append(q)
        for group in by_dims.values():
            for a in group:
                for b in group:
                    if a.ids == b.ids or set(a.figures) == set(b.figures) or a.depth + b.depth > 1:
                        continue
                    figs_ab, depth = a.figures + b.figures, a.depth + b.depth
                    if unit.is_percent:
                        iv = (a.base / b.base - Interval.exact(1.0)).scale(100.0)
                        word = "rise" if iv.mid > 0 else "drop"
                        text = f"the {word} from {b.label} ({b.show}) to {a.label} ({a.show})"
                        text += ", relative to the first"
                        brief = f"the {word} {_span(b.show, a.show)} ({fmt_num(abs(iv.mid), 1)}%)"
                        s.add(text, brief, iv.abs(), "%", figs_ab, depth, False)
                    else:
                        iv = a.base / b.base
                        brief = f"{a.show} / {b.show} ({fmt_num(iv.mid)}{claim.unit or 'x'})"
                        s.add(f"{a.label} / {b.label}", brief, iv, claim.unit or "x", figs_ab, depth, False)
        return
    units = [unit] + [parse_unit(u, s.figs.cf.units) for u in sibling_units(unit)]
    same = [q for q in pool if q.unit.dims == unit.dims]
    for q in same:
        for u in units:
            v = q.base.scale(1.0 / u.factor)
            suffix = "" if u.text == claim.unit else f", in {u.text} (not {claim.unit})"
            s.add(
                f"{q.label}{suffix}",
                f"{q.label} ({fmt_num(v.mid)} {u.text})",
                v,
                u.text,
                q.figures,
                q.depth,
                False,
            )
    for a in same:
        for b in same:
            if a.ids == b.ids or a.depth + b.depth > 0 or set(a.figures) & set(b.figures):
                continue
            for u in units:
                v = a.base.scale(1.0 / u.factor) - b.base.scale(1.0 / u.factor)
                text = f"{a.label} minus {b.label}" + ("" if u.text == claim.unit else f", in {u.text}")
                s.add(
                    text,
                    f"{a.show} - {b.show} ({fmt_num(v.mid)} {u.text})",
                    v,
                    u.text,
                    a.figures + b.figures,
                    1,
                    False,
                )


def alternatives(figs: Figures, claim: Claim, recomputed: Interval) -> tuple[list[Reading], int]:
    """The readings to show (at most 4, simplest first) and how many used unrelated figures only."""
    s = _Search(figs, claim)
    if math.isfinite(recomputed.mid):
        _own(s, recomputed)
    _pairs(s)
    own_text = claim.expr.replace(" ", "")
    found = [(r, own) for r, own in s.found if r.text.replace(" ", "") != own_text]
    uniq: dict[tuple[Any, ...], tuple[Reading, bool]] = {}
    for r, own in found:  # same figures and value: keep the claim's own, then the simplest
        key = (frozenset(r.figures), round(r.value, 6), r.unit)
        best = uniq.get(key)
        if best is None or (not own, r.depth, len(r.text)) < (not best[1], best[0].depth, len(best[0].text)):
            uniq[key] = (r, own)

    def simplicity(item: tuple[Reading, bool]) -> tuple[Any, ...]:
        r, own = item
        return (not r.related, r.depth, not own, len(figs.leaves(r.figures)), r.match != "exact", len(r.text))

    ranked = sorted(uniq.values(), key=simplicity)
    kept: list[Reading] = []
    for r, _ in ranked:
        leaves = figs.leaves(r.figures)
        # a reading through more figures (a product or quotient) re-expresses a simpler one
        if any(k.depth < r.depth and k.related == r.related for k in kept):
            continue
        if any(
            figs.leaves(k.figures) <= leaves and k.unit == r.unit and f"{k.value:.3g}" == f"{r.value:.3g}"
            for k in kept
        ):
            continue
        kept.append(r)
    shown = [r for r in kept if r.related]
    return shown[:4], len(kept) - len(shown)
