"""Alternative readings: other ways of computing a stated value that does not match.

Two sources: the claim's own computation read as a slip (`slips.py`: the change relative to
its other end, points for percent, the inverse ratio, a sibling unit, a unit-prefix slip, bits
for bytes, one count for another, a dropped multiplier), and single figures and pairs of
figures of one dimension (times instead of rates, via quantities such as requests / (req/s)).
Readings are phrased with the figures' labels, duplicates are removed (a reading that only
re-expresses a simpler one through other figures is dropped), and they are ranked by how
simple they are. Readings that use only figures unrelated to the claim are counted, not shown.
"""

from __future__ import annotations

import math
from typing import Any

from kvbench.audit.figures import Figures
from kvbench.audit.ledger import Reading
from kvbench.audit.quantities import Interval, fmt_num
from kvbench.audit.readings.pool import Quantity, Search, pool, related_set
from kvbench.audit.readings.slips import RANK, own_readings
from kvbench.audit.schema import Claim
from kvbench.audit.units import Dims, parse_unit, sibling_units

__all__ = ["alternatives", "related_set"]


def _span(a: str, b: str) -> str:
    """'46.94 -> 55.56 s' when both values carry the same unit, else '4 GB -> 3 GiB'."""
    ua, ub = a.partition(" ")[2], b.partition(" ")[2]
    return f"{a.partition(' ')[0]} -> {b}" if ua == ub else f"{a} -> {b}"


def _pairs(s: Search) -> None:
    quantities = pool(s.figs, s.scope)
    unit, claim = s.unit, s.claim
    if unit.dimensionless:
        by_dims: dict[Dims, list[Quantity]] = {}
        for q in quantities:
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
    same = [q for q in quantities if q.unit.dims == unit.dims]
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
    s = Search(figs, claim)
    if math.isfinite(recomputed.mid):
        own_readings(s, recomputed)
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
        leaves = len(figs.leaves(r.figures))
        return (not r.related, r.depth, not own, RANK.get(r.slip, 0), leaves, r.match != "exact", len(r.text))

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
