"""The search space of alternative readings: quantities formed from a file's figures, the
figures related to a claim, and the collector that keeps a reading only when it explains the
stated value within its rounding (and does not use the stated figure itself).

Used by `slips.py` (the claim's own computation read differently) and `search.py` (other
figures, ranking).

The search is bounded by construction: a claim's readings are formed only from its scope, at
most SCOPE figures: the claim's own figures, the figures related to them (in one expression, or
sharing a `test` tag), then figures of the claim's dimension, then the rest, in file order. A
file of up to SCOPE figures is searched whole; a 2,000-figure file costs what a 64-figure one
does per claim (the pool of pairs is quadratic in its figures).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from kvbench.audit.expr import expr_names, parse_expr
from kvbench.audit.figures import Figures
from kvbench.audit.ledger import Reading
from kvbench.audit.quantities import Interval, fmt_num, match, stated_range
from kvbench.audit.schema import Claim
from kvbench.audit.units import Dims, Unit, parse_unit


@dataclass(frozen=True)
class Quantity:
    ids: str  # "a" or "a / b"
    label: str
    show: str  # the value with its unit
    base: Interval  # in base units
    unit: Unit
    figures: tuple[str, ...]
    depth: int


#: the most figures one claim's reading search forms quantities from
SCOPE = 64


def pool(figs: Figures, scope: set[str] | None = None) -> list[Quantity]:
    """Every figure (of `scope`), plus a/b and a*b of two of them when the result has a unit the file
    uses."""
    base = []
    ids = list(figs.values) if scope is None else sorted(scope, key=_place(figs))
    chosen = [figs.values[f] for f in ids]
    for fv in chosen:
        if fv.interval is None or not math.isfinite(fv.interval.mid) or fv.interval.mid == 0:
            continue
        u = figs.units[fv.id]
        base.append(Quantity(fv.id, fv.label, figs.show(fv.id), fv.interval.scale(u.factor), u, (fv.id,), 0))
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
                pool.append(Quantity(f"{a.ids} {op} {b.ids}", label, show, val, u, (a.ids, b.ids), 1))
    return pool


def _groups(figs: Figures) -> list[set[str]]:
    """The figures each expression (figure or claim) names, parsed once per file, not per claim."""
    cached: list[set[str]] | None = getattr(figs, "_expr_groups", None)
    if cached is None:
        ids = list(figs.values)
        cached = [{fid, *expr_names(tree)} for fid, tree in figs.trees.items()]
        cached += [set(expr_names(parse_expr(c.expr, ids))) for c in figs.cf.claims]
        figs._expr_groups = cached  # type: ignore[attr-defined]
    return cached


def _expr_related(figs: Figures, claim_figs: set[str]) -> set[str]:
    related = set(claim_figs)
    for g in _groups(figs):
        if g & claim_figs:
            related |= g
    return related


def _tag_related(figs: Figures, claim_figs: set[str]) -> set[str]:
    tags = set().union(*(figs[f].tags for f in claim_figs if f in figs.values)) if claim_figs else set()
    return {fv.id for fv in figs.values.values() if fv.tags & tags}


def _place(figs: Figures) -> Callable[[str], int]:
    """A figure's place in the file (the pool keeps file order, whatever the scope)."""
    cached: dict[str, int] | None = getattr(figs, "_places", None)
    if cached is None:
        cached = {f: i for i, f in enumerate(figs.values)}
        figs._places = cached  # type: ignore[attr-defined]
    return cached.__getitem__


def related_set(figs: Figures, claim_figs: set[str]) -> set[str]:
    """Figures appearing with the claim's figures in an expression, or sharing a `test` tag."""
    return _expr_related(figs, claim_figs) | _tag_related(figs, claim_figs)


def search_scope(figs: Figures, claim_figs: set[str], dims: Dims) -> set[str]:
    """At most SCOPE figures, nearest first: the claim's own, those in an expression with them,
    those sharing a tag, then figures of the claim's dimension, then any (a small file: all)."""
    if len(figs.values) <= SCOPE:
        return set(figs.values)
    near = _expr_related(figs, claim_figs)
    order = [f for f in figs.values if f in claim_figs] + [f for f in figs.values if f in near]
    tagged = _tag_related(figs, claim_figs)
    order += [f for f in figs.values if f in tagged]
    order += [f for f, u in figs.units.items() if u.dims == dims]
    order += list(figs.values)
    return set(list(dict.fromkeys(order))[:SCOPE])


class Search:
    """Collects readings that fall in the stated range."""

    def __init__(self, figs: Figures, claim: Claim) -> None:
        self.figs, self.claim, self._match = figs, claim, match
        self.unit = parse_unit(claim.unit, figs.cf.units)
        self.lo, self.hi = stated_range(claim.stated, claim.decimals)
        self.tree = parse_expr(claim.expr, figs.values)
        self.claim_figs = set(expr_names(self.tree))
        self.related = related_set(figs, self.claim_figs)
        self.scope = search_scope(figs, self.claim_figs, self.unit.dims)
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
        self,
        text: str,
        brief: str,
        iv: Interval,
        unit: str,
        figures: tuple[str, ...],
        depth: int,
        own: bool,
        slip: str = "",
    ) -> None:
        m = self._match(iv, self.lo, self.hi)
        if m is None:
            return
        flat = tuple(dict.fromkeys(x for f in figures for x in f.split(" ") if x in self.figs.values))
        if self.figs.leaves(flat) & self.banned:
            return
        r = Reading(text, iv.mid, unit, m, flat, set(flat) <= self.related, depth, brief, slip)
        self.found.append((r, own))
