"""Slips: the claim's own computation read as a careless writer might have made it.

A registry of slip kinds, each a function that offers readings of the recomputed value
through the `Search` collector, which keeps one only when it explains the stated value within
its rounding; each reading names its slip in words. In order (the order ranks them):

    relative_base       a change taken relative to its other end (4.26 -> 3.6 relative to 3.6)
    points_percent      percentage points for percent, or percent for points (40% -> 50%)
    inverse             the inverse ratio
    sibling_unit        GB for GiB, KB for KiB, s for ms
    unit_prefix         one SI step on a compound or declared unit (s/request vs ms/request, J vs kJ)
    bits_bytes          bits taken for bytes or bytes for bits (200 Gbit/s stated as GB/s)
    count_relabel       one counted thing for another through the paper's own ratio (a token
                        rate labelled requests/s, via tokens per request)
    per_device, device_price, percent_ratio, binary_decimal
                        slips of scale (`scales.py`): a per-GPU figure stated per node, one GPU's
                        price against a node's rate, 525% restated as 5.25x, TiB taken as TB
    dropped_multiplier  a count of the paper's (GPUs, nodes, clients ...) dropped or applied twice

A dropped multiplier is offered only when no unit slip explains the number: a x8 from "8 GPUs
per node" is a coincidence beside a bits/bytes slip, and worse than no reading. But when the
x8 is a count in the claim's own arithmetic (a per-device slip), bits/bytes is the coincidence.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

from kvbench.audit.expr import eval_expr
from kvbench.audit.quantities import Interval, fmt_num
from kvbench.audit.readings.pool import Search, pool
from kvbench.audit.readings.scales import binary_decimal, device_price, per_device, percent_ratio
from kvbench.audit.units import (
    COUNTS,
    count_word,
    parse_unit,
    sibling_units,
    singular,
    split_unit,
    unit_variants,
)

_CHANGE = {"percent_drop": -1, "percent_change": 1, "percent_increase": 1}
#: counts a paper multiplies by (per GPU, per node): candidates for a dropped multiplier
MULTIPLIERS = {"GPUs", "nodes", "clients", "servers", "connections", "users"}
#: slips that need no figure beyond the claim's own: a dropped multiplier yields to them
UNIT_SLIPS = {"sibling_unit", "unit_prefix", "bits_bytes"}
#: a count in the claim's own arithmetic: beside it, bits/bytes and a dropped multiplier yield
DEVICE_SLIPS = {"per_device", "device_price"}


def _own_figs(s: Search) -> tuple[str, ...]:
    return tuple(sorted(s.claim_figs))


def _call(s: Search) -> tuple[str, list[ast.expr]] | None:
    body = s.tree.body
    if isinstance(body, ast.Call) and isinstance(body.func, ast.Name):
        return body.func.id, list(body.args)
    return None


def relative_base(s: Search, rc: Interval) -> None:
    call = _call(s)
    if not s.unit.is_percent or call is None or call[0] not in _CHANGE:
        return
    env = s.figs.env()
    old, new = eval_expr(call[1][0], env), eval_expr(call[1][1], env)
    if new.mid == 0:
        return
    other = ((new - old) / new).abs().scale(100.0)
    word = "drop" if new.mid < old.mid else "rise"
    shown = [_show(s, a, v) for a, v in zip(call[1], (old, new), strict=True)]
    s.add(
        f"the {word} from {shown[0]} to {shown[1]} taken relative to the end value {shown[1]}, not the start",
        f"the {word} taken relative to {shown[1]} ({fmt_num(other.mid, 1)}%)",
        other,
        "%",
        _own_figs(s),
        0,
        True,
        "relative_base",
    )


def _show(s: Search, node: ast.expr, base: Interval) -> str:
    name = ast.unparse(node)
    return s.figs.show(name).replace(" %", "%") if name in s.figs.values else fmt_num(base.mid)


def _percent_args(s: Search, args: list[ast.expr]) -> bool:
    return all(
        isinstance(a, ast.Name) and a.id in s.figs.units and s.figs.units[a.id].is_percent for a in args
    )


def points_percent(s: Search, rc: Interval) -> None:
    call = _call(s)
    if not s.unit.is_percent or call is None or len(call[1]) != 2 or not _percent_args(s, call[1]):
        return
    env = s.figs.env()
    a, b = (eval_expr(x, env).scale(100.0) for x in call[1])  # in % as printed
    shown = [_show(s, x, v) for x, v in zip(call[1], (a, b), strict=True)]
    if call[0] in _CHANGE:
        points = (b - a).abs() if call[0] != "percent_drop" else (a - b).abs()
        text = f"the change from {shown[0]} to {shown[1]} in percentage points, not percent"
        brief = f"{fmt_num(points.mid)} points ({shown[0]} -> {shown[1]}), not percent"
        s.add(text, brief, points, "%", _own_figs(s), 0, True, "points_percent")
    elif call[0] == "difference" and a.mid != 0 and b.mid != 0:
        for old, new, names in ((b, a, shown[::-1]), (a, b, shown)):
            rel = ((new - old) / old).abs().scale(100.0)
            text = f"the relative change from {names[0]} to {names[1]} in percent, not percentage points"
            brief = f"the relative change {names[0]} -> {names[1]} ({fmt_num(rel.mid, 1)}%), not points"
            s.add(text, brief, rel, "%", _own_figs(s), 0, True, "points_percent")


def inverse(s: Search, rc: Interval) -> None:
    if s.unit.is_ratio and rc.mid != 0:
        inv = Interval.exact(1.0) / rc
        s.add(
            "the inverse ratio",
            f"the inverse ratio ({fmt_num(inv.mid)}x)",
            inv,
            "x",
            _own_figs(s),
            0,
            True,
            "inverse",
        )


def sibling_unit(s: Search, rc: Interval) -> None:
    if not s.unit.dims:
        return
    base, unit = rc.scale(s.unit.factor), s.claim.unit
    for alt in sibling_units(s.unit):
        v = base.scale(1.0 / parse_unit(alt, s.figs.cf.units).factor)
        s.add(
            f"the recomputed {fmt_num(rc.mid)} {unit} read in {alt} (not {unit})",
            f"the same quantity in {alt} ({fmt_num(v.mid)} {alt})",
            v,
            alt,
            _own_figs(s),
            0,
            True,
            "sibling_unit",
        )


def _variants(s: Search, rc: Interval, kind: str, slip: str, words: str) -> None:
    if not s.unit.dims:
        return
    base, unit, siblings = rc.scale(s.unit.factor), s.claim.unit, set(sibling_units(s.unit))
    for alt, found in unit_variants(s.unit, s.figs.cf.units):
        if found != kind or alt in siblings:
            continue
        v = base.scale(1.0 / parse_unit(alt, s.figs.cf.units).factor)
        text = f"{words}: the recomputed {fmt_num(rc.mid)} {unit} is {fmt_num(v.mid)} {alt}"
        s.add(text, f"{fmt_num(v.mid)} {alt} ({words})", v, alt, _own_figs(s), 0, True, slip)


def unit_prefix(s: Search, rc: Interval) -> None:
    _variants(s, rc, "prefix", "unit_prefix", "a unit-prefix slip")


def bits_bytes(s: Search, rc: Interval) -> None:
    byte_like = "B" in s.claim.unit.replace("bit", "")
    _variants(
        s, rc, "bits", "bits_bytes", "bytes taken for bits" if not byte_like else "bits taken for bytes"
    )


def count_relabel(s: Search, rc: Interval) -> None:
    """A count in the claim's unit swapped for another through a ratio of the paper's (Y per X)."""
    dims = dict(s.unit.dims)
    counted = set(COUNTS) | set(s.figs.cf.units)
    for q in pool(s.figs, s.scope):
        qd = dict(q.unit.dims)
        if len(qd) != 2 or sorted(qd.values()) != [-1, 1] or not set(qd) <= counted:
            continue
        y = next(k for k, v in qd.items() if v == 1)  # q is y per x
        x = next(k for k, v in qd.items() if v == -1)
        for op, frm, to in (("x", x, y), ("/", y, x)):
            if dims.get(frm) != 1 or to in dims:
                continue  # only a numerator count is relabelled: "req/s" read as tokens/s
            v = rc * q.base if op == "x" else rc / q.base  # counts carry no factor: the claim's numbers
            unit = _relabel(s, frm, to)
            text = (
                f"{to} counted as {frm}: the recomputed {fmt_num(rc.mid)} {s.claim.unit} {op} "
                f"{q.label} ({q.show}) is {fmt_num(v.mid)} {unit}"
            )
            brief = f"{fmt_num(v.mid)} {unit}, {to} counted as {frm}"
            s.add(text, brief, v, unit, (*_own_figs(s), *q.figures), 1, True, "count_relabel")


def _relabel(s: Search, frm: str, to: str) -> str:
    """The claim's unit text with the counted word `frm` replaced: req/s -> tokens/s."""
    parts = []
    for sign, atom in split_unit(s.claim.unit):
        word = count_word(atom, frozenset(s.figs.cf.units))
        parts.append((sign, (to if sign > 0 else singular(to)) if word == frm else atom))
    num = "*".join(a for sg, a in parts if sg > 0) or "1"
    return num + "".join(f"/{a}" for sg, a in parts if sg < 0)


def dropped_multiplier(s: Search, rc: Interval) -> None:
    """A related count of the paper's (GPUs, nodes, clients ...) left out of the claim, or applied twice
    (one of the claim's own: the division by it that the writer skipped)."""
    for fid in sorted(s.related):
        fv, u = s.figs[fid], s.figs.units.get(fid)
        if u is None or fv.interval is None or len(u.dims) != 1 or u.dims[0][1] != 1:
            continue
        word = u.dims[0][0]
        if word not in MULTIPLIERS and word not in s.figs.cf.units:
            continue
        n = fv.interval.mid * u.factor
        if not n > 1:
            continue
        thing = singular(word)
        options = (
            (rc.scale(n), f"a total over the {fmt_num(n)} {word}, not per {thing}", "x"),
            (rc.scale(1.0 / n), f"per {thing}, not the total over {fmt_num(n)} {word}", "/"),
        )
        for v, how, op in options:
            text = (
                f"{how}: the recomputed {fmt_num(rc.mid)} {s.claim.unit} {op} {fv.label} ({s.figs.show(fid)})"
            )
            brief = f"{how} ({fmt_num(rc.mid)} {op} {fmt_num(n)})"
            # depth 0, like a single figure: the coincidence rule below, not the ranking, removes it
            figures = tuple(sorted({*_own_figs(s), fid}))
            s.add(text, brief, v, s.claim.unit, figures, 0, True, "dropped_multiplier")


@dataclass(frozen=True)
class Slip:
    name: str
    find: Callable[[Search, Interval], None]


SLIPS: list[Slip] = [
    Slip(f.__name__, f)
    for f in (
        relative_base,
        points_percent,
        inverse,
        sibling_unit,
        unit_prefix,
        bits_bytes,
        count_relabel,
        per_device,
        device_price,
        percent_ratio,
        binary_decimal,
        dropped_multiplier,
    )
]
RANK = {slip.name: i for i, slip in enumerate(SLIPS)}


def own_readings(s: Search, rc: Interval) -> None:
    """Every slip kind's readings of the recomputed value, then the coincidence rule."""
    for slip in SLIPS:
        slip.find(s, rc)
    slips = {r.slip for r, _ in s.found}
    if slips & DEVICE_SLIPS:
        s.found = [(r, own) for r, own in s.found if r.slip not in {"bits_bytes", "dropped_multiplier"}]
    elif slips & UNIT_SLIPS:
        s.found = [(r, own) for r, own in s.found if r.slip != "dropped_multiplier"]
