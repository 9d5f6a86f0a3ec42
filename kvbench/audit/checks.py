"""Cross-reference, unit and dimension checks on a validated claims file.

Returns `path: message` problems (the caller joins them into one UsageError line):
duplicate ids, unknown figures and sources, units outside the table, expressions whose
dimensions clash (s + GB) or whose result cannot be converted to the unit given, cycles
between derived figures, and each bound kind's own reference rules.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from kvbench.audit.bounds import BOUND_KINDS
from kvbench.audit.expr import ExprError, expr_dims, expr_names, parse_expr
from kvbench.audit.units import Dims, UnitError, dims_text, parse_unit

if TYPE_CHECKING:
    from kvbench.audit.schema import ClaimsFile


def derived_order(cf: ClaimsFile) -> list[str]:
    """Derived figure ids, each after the figures it uses; ValueError naming a cycle."""
    ids = [f.id for f in cf.figures]
    deps = {
        f.id: [n for n in expr_names(parse_expr(f.expr, ids)) if n != f.id]
        for f in cf.figures
        if f.expr is not None
    }
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


def _figure_problems(cf: ClaimsFile, dims: dict[str, tuple[Dims, str]]) -> list[str]:
    problems: list[str] = []
    ids = [f.id for f in cf.figures]
    seen: set[str] = set()
    trees: dict[str, ast.Expression] = {}
    for i, f in enumerate(cf.figures):
        if f.id in seen:
            problems.append(f"figures[{i}].id: duplicate figure '{f.id}'")
        seen.add(f.id)
        if f.source and cf.sources and f.source not in cf.sources:
            problems.append(f"figures[{i}].source: unknown source '{f.source}'")
        if f.from_model and cf.model is None:
            problems.append(f"figures[{i}].from_model: the file has no `model:` section")
        try:
            u = parse_unit(f.unit, cf.units)
            dims[f.id] = (u.dims, f.unit or "a number")
        except UnitError as exc:
            problems.append(f"figures[{i}].unit: {exc}")
        if f.expr is not None:
            try:
                trees[f.id] = parse_expr(f.expr, ids)
                if f.id in expr_names(trees[f.id]):
                    problems.append(f"figures[{i}].expr: '{f.id}' refers to itself")
            except ExprError as exc:
                problems.append(f"figures[{i}].expr: {exc}")
    if problems:
        return problems
    try:
        derived_order(cf)
    except ValueError as exc:
        return [f"figures: derived figures form a cycle: {exc}"]
    for i, f in enumerate(cf.figures):
        if f.id in trees:
            problems += _unit_problem(f"figures[{i}] '{f.id}'", trees[f.id], f.unit, dims, cf)
    return problems


def _unit_problem(
    where: str, tree: ast.Expression, unit: str, dims: dict[str, tuple[Dims, str]], cf: ClaimsFile
) -> list[str]:
    try:
        got, got_text = expr_dims(tree, dims)
    except ExprError as exc:
        return [f"{where}: {exc}"]
    except KeyError:
        return []  # a figure whose unit is already reported
    try:
        want = parse_unit(unit, cf.units)
    except UnitError as exc:
        return [f"{where}.unit: {exc}"]
    if got != want.dims:
        return [
            f"{where}: the expression gives {got_text if got_text != 'a number' else 'a plain number'} "
            f"({dims_text(got)}), which cannot be converted to {unit or 'a plain number'}"
        ]
    return []


def _claim_problems(cf: ClaimsFile, dims: dict[str, tuple[Dims, str]]) -> list[str]:
    problems: list[str] = []
    ids = [f.id for f in cf.figures]
    claim_ids: set[str] = set()
    for i, c in enumerate(cf.claims):
        if c.id in claim_ids:
            problems.append(f"claims[{i}].id: duplicate claim '{c.id}'")
        claim_ids.add(c.id)
        if c.source and cf.sources and c.source not in cf.sources:
            problems.append(f"claims[{i}].source: unknown source '{c.source}'")
        try:
            tree = parse_expr(c.expr, ids)
        except ExprError as exc:
            problems.append(f"claims[{i}].expr: {exc}")
            continue
        problems += _unit_problem(f"claims[{i}] '{c.id}'", tree, c.unit, dims, cf)
    return problems


def _sizing_problems(cf: ClaimsFile, seen: set[str]) -> list[str]:
    problems: list[str] = []
    for i, s in enumerate(cf.sizing):
        for key in ("tokens", "bytes", "requests", "prompts"):
            ref = getattr(s, key)
            if ref is not None and ref not in seen:
                problems.append(f"sizing[{i}].{key}: unknown figure '{ref}'")
        if s.geometry is None and cf.model is None:
            problems.append(f"sizing[{i}].geometry: no geometry and the file has no `model:` section")
    return problems


def _bound_problems(cf: ClaimsFile, seen: set[str]) -> list[str]:
    problems: list[str] = []
    claim_ids = {c.id for c in cf.claims}
    for i, b in enumerate(cf.bounds):
        for key in b.refs():
            if getattr(b, key) is None:
                problems.append(f"bounds[{i}].{key}: required for kind {b.kind}")
            elif getattr(b, key) not in seen:
                problems.append(f"bounds[{i}].{key}: unknown figure '{getattr(b, key)}'")
        for key in b.optional_refs():
            ref = getattr(b, key)
            if ref is not None and ref not in seen:
                problems.append(f"bounds[{i}].{key}: unknown figure '{ref}'")
        if b.claim is not None and b.claim not in claim_ids:
            problems.append(f"bounds[{i}].claim: unknown claim '{b.claim}'")
        problems += [f"bounds[{i}]{p}" for p in BOUND_KINDS[b.kind].check(b, cf, seen)]
    return problems


def check_file(cf: ClaimsFile) -> list[str]:
    """Every problem of a schema-valid file, as `path: message` texts."""
    problems: list[str] = []
    for i, word in enumerate(cf.units):
        if not word.isidentifier():
            problems.append(f"units[{i}]: '{word}' is not a plain word")
    dims: dict[str, tuple[Dims, str]] = {}
    problems += _figure_problems(cf, dims)
    if problems:
        return problems
    seen = {f.id for f in cf.figures}
    problems += _claim_problems(cf, dims)
    problems += _sizing_problems(cf, seen)
    problems += _bound_problems(cf, seen)
    return problems
