"""Slips of scale: a figure of the right kind taken at the wrong size (registered in `slips.py`).

    per_device      a per-GPU figure stated for the node: the claim multiplies by a count of the
                    paper's (8 GPUs per node) and the stated value is the figure before it
    device_price    the same in money: one GPU's price set against a whole node's rate
    percent_ratio   a percent increase restated as a ratio (525% -> 5.25x; it is 6.25x), or the
                    ratio written as the increase (6.25x -> 625%)
    binary_decimal  a byte figure that feeds another figure read with the other prefix (a TiB
                    cache taken as TB when counting the tokens it holds)

A per-device reading beats a bits/bytes one: an x8 that is the paper's own count of GPUs in the
claim's arithmetic is not a coincidence, while bits for bytes would be.
"""

from __future__ import annotations

import ast

from kvbench.audit.expr import eval_expr
from kvbench.audit.quantities import Interval, fmt_num
from kvbench.audit.readings.pool import Search
from kvbench.audit.units import parse_unit, sibling_units, singular, split_unit

#: counts a paper multiplies by (per GPU, per node): candidates for a per-device slip
DEVICES = {"GPUs", "nodes", "clients", "servers", "connections", "users", "replicas", "instances", "workers"}
#: unit words for money (declared under `units:`; the table has none)
MONEY = {"USD", "$", "dollars", "dollar", "EUR", "euros", "euro", "cents", "cent"}
_CHANGES = {"percent_change", "percent_increase"}


def _device_counts(s: Search) -> list[tuple[str, str, float]]:
    """The claim's own figures that are a count of devices above one: (id, word, n)."""
    out = []
    for fid in sorted(s.claim_figs):
        fv, u = s.figs.values.get(fid), s.figs.units.get(fid)
        if fv is None or u is None or fv.interval is None or len(u.dims) != 1 or u.dims[0][1] != 1:
            continue
        word = u.dims[0][0]
        n = fv.interval.mid * u.factor
        if (word in DEVICES or (word in s.figs.cf.units and word not in MONEY)) and n > 1:
            out.append((fid, word, n))
    return out


def _without(s: Search, fid: str) -> Interval | None:
    """The claim recomputed with one of its counts set to 1 (the figure before the multiplier)."""
    env = s.figs.env()
    env[fid] = Interval.exact(1.0)
    try:
        return eval_expr(s.tree, env).scale(1.0 / s.unit.factor)
    except (ZeroDivisionError, ValueError, ArithmeticError):
        return None


def _is_money(s: Search) -> bool:
    return any(sign > 0 and atom in MONEY for sign, atom in split_unit(s.claim.unit))


def _device_slip(s: Search, rc: Interval, slip: str) -> None:
    for fid, word, n in _device_counts(s):
        v = _without(s, fid)
        if v is None or not v.mid < rc.mid:  # only a multiplier: a divisor is a dropped multiplier
            continue
        thing = singular(word)
        label, shown = s.figs[fid].label, s.figs.show(fid)
        if slip == "device_price":
            how = f"a one-{thing} price set against the rate of all {fmt_num(n)} {word}"
        else:
            how = f"a per-{thing} figure stated for all {fmt_num(n)} {word}"
        text = f"{how}: the recomputed {fmt_num(rc.mid)} {s.claim.unit} without {label} ({shown})"
        brief = f"{how} ({fmt_num(rc.mid)} / {fmt_num(n)})"
        s.add(text, brief, v, s.claim.unit, tuple(sorted(s.claim_figs)), 0, True, slip)


def per_device(s: Search, rc: Interval) -> None:
    if not _is_money(s):
        _device_slip(s, rc, "per_device")


def device_price(s: Search, rc: Interval) -> None:
    if _is_money(s):
        _device_slip(s, rc, "device_price")


def percent_ratio(s: Search, rc: Interval) -> None:
    body = s.tree.body
    call = body.func.id if isinstance(body, ast.Call) and isinstance(body.func, ast.Name) else ""
    own = tuple(sorted(s.claim_figs))
    if s.unit.is_ratio and s.claim.unit.strip() == "x" and rc.mid > 1:
        v = rc - Interval.exact(1.0)
        text = (
            f"the increase ({fmt_num(v.mid * 100, 1)}%) restated as a ratio, not the ratio {fmt_num(rc.mid)}x"
        )
        s.add(text, f"the increase as a ratio ({fmt_num(v.mid)}x)", v, "x", own, 0, True, "percent_ratio")
    elif s.unit.is_percent and call in _CHANGES:
        v = rc + Interval.exact(100.0)
        text = f"the ratio ({fmt_num(v.mid / 100)}x) written as the increase, not the {fmt_num(rc.mid, 1)}%"
        s.add(text, f"the ratio as a percent ({fmt_num(v.mid, 1)}%)", v, "%", own, 0, True, "percent_ratio")


def binary_decimal(s: Search, rc: Interval) -> None:
    """Each byte figure under the claim (not of the claim's own dimension) read with the other prefix."""
    leaves = s.figs.leaves(s.claim_figs) - set(s.figs.trees)
    for fid in sorted(leaves):
        u, fv = s.figs.units.get(fid), s.figs.values[fid]
        if u is None or fv.interval is None or ("bytes", 1) not in u.dims or u.dims == s.unit.dims:
            continue
        for alt in sibling_units(u):
            au = parse_unit(alt, s.figs.cf.units)
            v = _recomputed(s, {fid: fv.interval.mid * au.factor})
            if v is None:
                continue
            text = f"{s.figs.show(fid)} ({fv.label}) taken as {fmt_num(fv.interval.mid)} {alt}, not {u.text}"
            brief = f"{u.text} read as {alt} ({fmt_num(v.mid)} {s.claim.unit})"
            s.add(
                text, brief, v, s.claim.unit, tuple(sorted(s.claim_figs | {fid})), 0, True, "binary_decimal"
            )


def _recomputed(s: Search, overrides: dict[str, float]) -> Interval | None:
    env = s.figs.env(overrides)
    try:
        return eval_expr(s.tree, env).scale(1.0 / s.unit.factor)
    except (ZeroDivisionError, ValueError, ArithmeticError, KeyError):
        return None
