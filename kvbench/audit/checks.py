"""Checks on a validated claims file: what breaks the whole file, and what breaks one item.

`file_problems`: duplicate ids, `units:` words that are not plain words or that shadow a
built-in unit, cycles between derived figures. Any of these is the file error (exit 2).

`item_problems`: everything that makes ONE figure, claim, sizing check or bound impossible to
judge: a unit outside the table, an expression that does not parse or names an unknown figure,
dimensions that clash (s + GB) or do not convert to the unit given (with the unit that would:
`ms/request`), a sizing or bound field of the wrong dimension, missing references. Such an item
gets the verdict `invalid`; an item that uses an invalid figure is invalid too; every other item
is still judged.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from kvbench.audit.bound_fields import BOUND_FIELDS, SIZING_FIELDS, dims_fit, wanted
from kvbench.audit.expr import ExprError, expr_dims, expr_names, parse_expr
from kvbench.audit.schema import Bound, ClaimsFile, SizingCheck
from kvbench.audit.units import Dims, UnitError, dims_text, parse_unit, suggest_unit

MAX_MESSAGE = 200


@dataclass(frozen=True)
class Problem:
    """Why an item cannot be judged, in one short line, and the fix when there is an obvious one."""

    message: str
    fix: str | None = None

    def text(self) -> str:
        msg = self.message if len(self.message) <= MAX_MESSAGE else self.message[: MAX_MESSAGE - 3] + "..."
        return msg


@dataclass
class ItemProblems:
    """Problems per item id, one dict per section."""

    figures: dict[str, Problem] = field(default_factory=dict)
    claims: dict[str, Problem] = field(default_factory=dict)
    sizing: dict[str, Problem] = field(default_factory=dict)
    bounds: dict[str, Problem] = field(default_factory=dict)


def _deps(cf: ClaimsFile) -> dict[str, list[str]]:
    ids = [f.id for f in cf.figures]
    out: dict[str, list[str]] = {}
    for f in cf.figures:
        if f.expr is None:
            continue
        try:
            out[f.id] = [n for n in expr_names(parse_expr(f.expr, ids)) if n != f.id]
        except ExprError:
            continue  # an item problem of that figure
    return out


def derived_order(cf: ClaimsFile) -> list[str]:
    """Derived figure ids (those whose expression parses), each after the figures it uses;
    ValueError naming a cycle."""
    deps = _deps(cf)
    order: list[str] = []
    state: dict[str, int] = {}  # 1 = on the path, 2 = done

    def visit(fid: str, path: list[str]) -> None:
        if state.get(fid) == 2 or fid not in deps:
            return
        if state.get(fid) == 1:
            cycle = [*path[path.index(fid) :], fid]
            raise ValueError(" -> ".join(cycle))
        state[fid] = 1
        for d in deps[fid]:
            visit(d, [*path, fid])
        state[fid] = 2
        order.append(fid)

    for fid in deps:
        visit(fid, [])
    return order


def file_problems(cf: ClaimsFile) -> list[str]:
    """What makes the whole file unreadable, as `path: message` texts."""
    problems: list[str] = []
    for i, word in enumerate(cf.units):
        if not word.isidentifier():
            problems.append(f"units[{i}]: '{word}' is not a plain word")
            continue
        try:
            parse_unit(word)
            problems.append(f"units[{i}]: '{word}' is a built-in unit; remove it from `units:`")
        except UnitError:
            pass
    for section, ids in (("figures", [f.id for f in cf.figures]), ("claims", [c.id for c in cf.claims])):
        seen: set[str] = set()
        for i, fid in enumerate(ids):
            if fid in seen:
                problems.append(f"{section}[{i}].id: duplicate {section[:-1]} '{fid}'")
            seen.add(fid)
    for section, checks in (("sizing", cf.sizing), ("bounds", cf.bounds)):
        ids = [c.id for c in checks]
        problems += [f"{section}: duplicate id '{x}'" for x in sorted({x for x in ids if ids.count(x) > 1})]
    try:
        derived_order(cf)
    except ValueError as exc:
        problems.append(f"figures: derived figures form a cycle: {exc}")
    return problems


def _parses(text: str, cf: ClaimsFile) -> Dims | None:
    try:
        return parse_unit(text, cf.units).dims
    except UnitError:
        return None


def _unit_problem(
    where: str, tree: ast.Expression, unit: str, dims: dict[str, tuple[Dims, str]], cf: ClaimsFile
) -> Problem | None:
    try:
        got, got_text = expr_dims(tree, dims)
    except ExprError as exc:
        return Problem(f"{where}: {exc}")
    try:
        want = parse_unit(unit, cf.units)
    except UnitError as exc:
        return Problem(f"{where.split(' ')[0]}.unit: {exc}", exc.fix)
    if got != want.dims:
        fix = suggest_unit(want, got)
        if fix == dims_text(got) and _parses(got_text, cf) == got:
            fix = got_text  # as the file writes it: req/s, not requests/s
        got_text = "a plain number" if got_text == "a number" else got_text
        return Problem(
            f"{where}: the expression gives {got_text}, not {unit or 'a plain number'}; write unit: {fix}",
            fix,
        )
    return None


def _figure_problems(cf: ClaimsFile, out: ItemProblems, dims: dict[str, tuple[Dims, str]]) -> None:
    ids = [f.id for f in cf.figures]
    trees: dict[str, ast.Expression] = {}
    for i, f in enumerate(cf.figures):
        try:
            dims[f.id] = (parse_unit(f.unit, cf.units).dims, f.unit or "a number")
        except UnitError as exc:
            out.figures[f.id] = Problem(f"figures[{i}].unit: {exc}", exc.fix)
            continue
        if f.source and cf.sources and f.source not in cf.sources:
            out.figures[f.id] = Problem(f"figures[{i}].source: unknown source '{f.source}'")
        elif f.from_model and cf.model is None:
            out.figures[f.id] = Problem(f"figures[{i}].from_model: the file has no `model:` section")
        elif f.expr is not None:
            try:
                trees[f.id] = parse_expr(f.expr, ids)
            except ExprError as exc:
                out.figures[f.id] = Problem(f"figures[{i}].expr: {exc}")
            else:
                if f.id in expr_names(trees[f.id]):
                    out.figures[f.id] = Problem(f"figures[{i}].expr: '{f.id}' refers to itself")
    for fid in derived_order(cf):  # uses of invalid figures, then dimensions, in dependency order
        if fid in out.figures or fid not in trees:
            continue
        i = ids.index(fid)
        bad = [n for n in expr_names(trees[fid]) if n in out.figures]
        if bad:
            out.figures[fid] = Problem(f"figures[{i}] '{fid}': uses invalid figure '{bad[0]}'")
            continue
        p = _unit_problem(f"figures[{i}] '{fid}'", trees[fid], cf.figures[i].unit, dims, cf)
        if p is not None:
            out.figures[fid] = p
    for fid in out.figures:
        dims.pop(fid, None)


def _claim_problems(cf: ClaimsFile, out: ItemProblems, dims: dict[str, tuple[Dims, str]]) -> None:
    ids = [f.id for f in cf.figures]
    for i, c in enumerate(cf.claims):
        where = f"claims[{i}] '{c.id}'"
        if c.source and cf.sources and c.source not in cf.sources:
            out.claims[c.id] = Problem(f"claims[{i}].source: unknown source '{c.source}'")
            continue
        try:
            tree = parse_expr(c.expr, ids)
        except ExprError as exc:
            out.claims[c.id] = Problem(f"claims[{i}].expr: {exc}")
            continue
        bad = [n for n in expr_names(tree) if n in out.figures]
        if bad:
            why = out.figures[bad[0]]
            out.claims[c.id] = Problem(f"{where}: uses invalid figure '{bad[0]}' ({why.message})")
            continue
        p = _unit_problem(where, tree, c.unit, dims, cf)
        if p is not None:
            out.claims[c.id] = p


def _field_problem(
    where: str, key: str, ref: str | None, kind: str, dims: dict[str, tuple[Dims, str]], out: ItemProblems
) -> str | None:
    if ref is None:
        return None
    if ref in out.figures:
        return f"{where}.{key}: uses invalid figure '{ref}'"
    if ref not in dims:
        return f"{where}.{key}: unknown figure '{ref}'"
    if not dims_fit(kind, dims[ref][0]):
        return f"{where}.{key}: '{ref}' is in {dims[ref][1]}; {key} needs {wanted(kind)}"
    return None


def _sizing_problem(
    i: int, s: SizingCheck, cf: ClaimsFile, dims: dict[str, tuple[Dims, str]], out: ItemProblems
) -> str | None:
    for key, kind in SIZING_FIELDS.items():
        p = _field_problem(f"sizing[{i}]", key, getattr(s, key), kind, dims, out)
        if p:
            return p
    if s.geometry is None and cf.model is None:
        return f"sizing[{i}].geometry: no geometry and the file has no `model:` section"
    return None


def _bound_problem(
    i: int, b: Bound, cf: ClaimsFile, dims: dict[str, tuple[Dims, str]], out: ItemProblems
) -> str | None:
    where = f"bounds[{i}]"
    spec = BOUND_FIELDS[b.kind]
    for key in spec.required:
        if getattr(b, key) is None:
            return f"{where}.{key}: required for kind {b.kind}"
    fields = [(key, getattr(b, key), kind) for key, kind in {**spec.required, **spec.optional}.items()]
    fields += [(f"demand[{j}]", ref, "rate") for j, ref in enumerate(b.demand)]
    fields += [(f"capacities[{j}].figure", c.figure, "rate") for j, c in enumerate(b.capacities)]
    for key, ref, kind in fields:
        p = _field_problem(where, key, ref, kind, dims, out)
        if p:
            return p
    if b.claim is not None and b.claim not in {c.id for c in cf.claims}:
        return f"{where}.claim: unknown claim '{b.claim}'"
    rules = spec.rules(b, {s.id for s in cf.sizing})
    if rules:
        return "; ".join(f"{where}{r}" for r in rules)
    if b.sizing is not None and b.sizing in out.sizing:
        return f"{where}.sizing: the sizing check '{b.sizing}' is invalid"
    return None


def item_problems(cf: ClaimsFile) -> ItemProblems:
    """Every item of a readable file that cannot be judged, with why."""
    out = ItemProblems()
    dims: dict[str, tuple[Dims, str]] = {}
    _figure_problems(cf, out, dims)
    _claim_problems(cf, out, dims)
    for i, s in enumerate(cf.sizing):
        p = _sizing_problem(i, s, cf, dims, out)
        if p:
            out.sizing[s.id] = Problem(p)
    for i, b in enumerate(cf.bounds):
        p = _bound_problem(i, b, cf, dims, out)
        if p:
            out.bounds[b.id] = Problem(p)
    return out
