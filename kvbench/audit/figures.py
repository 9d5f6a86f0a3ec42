"""Figure values: published (as printed), from the model, derived, and implied (solved).

Values are kept in the figure's own unit; `env` gives them in base units (s, B, counts) so
expressions mix GB and B/token freely. Derived figures are computed in dependency order
(cycles were refused by the checks); a division by zero names the figure and the figures
that are zero. An unpublished figure that exactly one claim depends on is solved from the
claim's stated value ("implied"), including when it is a divisor, and every figure resting
on it has basis "implied". A figure the checks found invalid (or whose arithmetic fails: a
division by zero) has no value and carries the reason in `invalid`; so do figures using it.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from operator import attrgetter

from kvbench.audit.checks import Problem, derived_order
from kvbench.audit.expr import ExprError, eval_expr, expr_names, parse_expr, solve_scalar
from kvbench.audit.ledger import FigureValue
from kvbench.audit.quantities import Interval, fmt_num
from kvbench.audit.schema import ClaimsFile
from kvbench.audit.units import parse_unit
from kvbench.model.geometry import resolve_geometry
from kvbench.model.kv_geometry import KVGeometry


def geometry_of(spec: str | dict, cf: ClaimsFile) -> KVGeometry:
    """The geometry a claims file names; relative config paths are taken against the file's folder."""
    return resolve_geometry(spec, base_dir=cf.base_dir)


def short_label(description: str, fid: str) -> str:
    """A short human name: the description up to its first aside, else the id."""
    text = description
    for stop in (" (", ";", ":", ", ", " if "):
        text = text.split(stop)[0]
    text = text.strip().strip('"')
    return text if 0 < len(text) <= 60 else fid


def model_value(geo: KVGeometry, what: str) -> float:
    values = {
        "bytes_per_token_full_only": geo.bytes_per_token(sliding_at_full=False),
        "bytes_per_token_all_layers": geo.bytes_per_token(sliding_at_full=True),
        "bytes_per_token_per_layer": geo.bytes_per_token_per_layer,
        "context_length": float(geo.context_length or math.nan),
        "num_layers": float(geo.num_layers),
    }
    return values.get(what, float(geo.sliding_window or math.nan))


_INTERVAL, _KIND = attrgetter("interval"), attrgetter("kind")


class Figures:
    """The figure values of one claims file, with their expressions and provenance."""

    def __init__(self, cf: ClaimsFile, invalid: Mapping[str, Problem] | None = None) -> None:
        self.cf = cf
        self.invalid: dict[str, Problem] = dict(invalid or {})
        self._exact: tuple[tuple[object, ...], dict[str, Interval] | None] | None = None
        self._plain: tuple[tuple[object, ...], dict[str, Interval]] | None = None
        ok = [f for f in cf.figures if f.id not in self.invalid]
        self.units = {f.id: parse_unit(f.unit, cf.units) for f in ok}
        self.trees: dict[str, ast.Expression] = {
            f.id: parse_expr(f.expr, [g.id for g in cf.figures]) for f in ok if f.expr is not None
        }
        self.order = [fid for fid in derived_order(cf) if fid in self.trees]
        geo = geometry_of(cf.model.geometry, cf) if cf.model is not None else None
        self.values: dict[str, FigureValue] = {}
        for f in cf.figures:
            iv: Interval | None = None
            if f.id in self.invalid:
                pass
            elif f.kind == "published":
                assert f.value is not None
                iv = Interval.printed(f.value, f.decimals)
            elif f.kind == "model":
                assert geo is not None and f.from_model is not None
                iv = Interval.exact(model_value(geo, f.from_model))
            self.values[f.id] = FigureValue(
                id=f.id,
                kind=f.kind,
                interval=iv,
                unit=f.unit,
                decimals=f.decimals,
                description=f.description,
                expr=f.expr,
                source=f.source,
                tags=f.tags,
                label=f.label or short_label(f.description, f.id),
                basis={"published": "published", "model": "model"}.get(f.kind, "unknown"),
                invalid=self.invalid[f.id].message if f.id in self.invalid else None,
            )
        self.derive()

    def __getitem__(self, fid: str) -> FigureValue:
        return self.values[fid]

    def env(self, overrides: Mapping[str, float] | None = None) -> dict[str, Interval]:
        """Base-unit values of every figure that has one; with `overrides`, derived ones recomputed.
        Without overrides, kept while no value changes (each claim asks; a copy, callers may edit it)."""
        if overrides is None:
            key = self._key()
            if self._plain is None or self._plain[0] != key:
                self._plain = (key, self._env(None))
            return dict(self._plain[1])
        return self._env(overrides)

    def _key(self) -> tuple[object, ...]:
        vals = self.values.values()  # attrgetter: this runs once per claim over the whole file
        return (tuple(map(_INTERVAL, vals)), tuple(map(_KIND, vals)))

    def _env(self, overrides: Mapping[str, float] | None) -> dict[str, Interval]:
        out: dict[str, Interval] = {}
        for fid, fv in self.values.items():
            if fid in self.trees and overrides is not None:
                continue
            if overrides is not None and fid in overrides:
                out[fid] = Interval.exact(overrides[fid])
            elif fv.interval is not None:
                out[fid] = fv.interval.scale(self.units[fid].factor)
        if overrides is not None:
            for fid in self.order:
                tree = self.trees[fid]
                if all(n in out for n in expr_names(tree)):
                    out[fid] = eval_expr(tree, out)
        return out

    def exact_env(self) -> dict[str, Interval] | None:
        """`env` in Fractions (printed figures as written, exact unit factors), for verdicts at
        rounding edges; None when a derived figure cannot be computed so. Kept while no figure's
        value changes: each claim asks for it, and in Fractions it costs a file's size each time."""
        key = self._key()
        if self._exact is not None and self._exact[0] == key:
            return self._exact[1]
        self._exact = (key, self._exact_env())
        return self._exact[1]

    def _exact_env(self) -> dict[str, Interval] | None:
        out: dict[str, Interval] = {}
        for fid, fv in self.values.items():
            if fid in self.trees or fv.interval is None:
                continue
            u = self.units[fid].exact
            if fv.kind == "published":
                out[fid] = Interval.printed_exact(fv.interval.mid, fv.decimals).scale(u)  # type: ignore[arg-type]
            else:
                out[fid] = Interval.printed_exact(fv.interval.mid, None).scale(u)  # type: ignore[arg-type]
        try:
            for fid in self.order:
                if all(n in out for n in expr_names(self.trees[fid])):
                    out[fid] = eval_expr(self.trees[fid], out, exact=True)
        except (ZeroDivisionError, ExprError, OverflowError):
            return None
        return out

    def derive(self) -> None:
        """Compute every derived figure whose inputs have values, in dependency order."""
        env = self.env()
        for fid in self.order:
            fv, tree = self.values[fid], self.trees[fid]
            names = expr_names(tree)
            bad = next((n for n in names if n in self.invalid), None)
            if bad is not None:
                self._invalidate(fid, Problem(f"figures '{fid}': uses invalid figure '{bad}'"))
                continue
            if not all(n in env for n in names):
                fv.interval = None
                continue
            try:
                base = eval_expr(tree, env)
            except ZeroDivisionError:
                zeros = [n for n in names if env[n].mid == 0]
                why = f" ({', '.join(zeros)} = 0)" if zeros else ""
                self._invalidate(fid, Problem(f"figures '{fid}' = {fv.expr}: division by zero{why}"))
                continue
            except ExprError as exc:
                self._invalidate(fid, Problem(f"figures '{fid}' = {fv.expr}: {exc}"))
                continue
            fv.interval = base.scale(1.0 / self.units[fid].factor)
            env[fid] = base
            kinds = {self.values[n].basis for n in self.leaves({fid})}
            fv.basis = "implied" if "implied" in kinds else ("model" if "model" in kinds else "published")

    def _invalidate(self, fid: str, problem: Problem) -> None:
        self.invalid[fid] = problem
        self.values[fid].interval = None
        self.values[fid].invalid = problem.message

    def invalid_among(self, names: list[str] | set[str]) -> str | None:
        """The first invalid figure `names` use, directly or through derived figures."""
        stack, seen = list(names), set()
        while stack:
            n = stack.pop(0)
            if n in seen:
                continue
            seen.add(n)
            if n in self.invalid:
                return n
            if n in self.trees:
                stack.extend(expr_names(self.trees[n]))
        return None

    def leaves(self, names: set[str] | tuple[str, ...] | list[str]) -> set[str]:
        """The non-derived figures (published, model, unpublished, implied) `names` rest on."""
        out: set[str] = set()
        stack = list(names)
        while stack:
            n = stack.pop()
            if n in out or n not in self.values:
                continue
            out.add(n)
            if n in self.trees:
                stack.extend(expr_names(self.trees[n]))
        return {n for n in out if n not in self.trees}

    def solve(self, tree: ast.Expression, leaf: str, target: float) -> float | None:
        """The value (in `leaf`'s unit) that makes `tree` equal `target` (base units)."""

        def f(x: float) -> float:
            return eval_expr(tree, self.env({leaf: x})).mid

        x = solve_scalar(f, target)
        return None if x is None else x / self.units[leaf].factor

    def solve_unknowns(self, skip: set[str] | frozenset[str] = frozenset()) -> None:
        """For a claim resting on exactly one unpublished figure, solve for the value it implies."""
        ids = list(self.values)
        for claim in self.cf.claims:
            if claim.id in skip:
                continue
            tree = parse_expr(claim.expr, ids)
            if self.invalid_among(expr_names(tree)) is not None:
                continue
            missing = [n for n in self.leaves(expr_names(tree)) if self.values[n].kind == "unpublished"]
            if len(missing) != 1:
                continue
            target = claim.stated * parse_unit(claim.unit, self.cf.units).factor
            x = self.solve(tree, missing[0], target)
            if x is None or not math.isfinite(x):
                continue
            fv = self.values[missing[0]]
            fv.kind, fv.basis, fv.implied_by = "implied", "implied", claim.id
            fv.interval = Interval.exact(x)
            self.derive()

    def show(self, fid: str) -> str:
        """'46.94 s' as the figure is printed (published) or computed."""
        fv = self.values[fid]
        if fv.invalid is not None:
            return "invalid"
        if fv.interval is None:
            return "not published"
        d = fv.decimals if fv.kind == "published" else None
        return f"{fmt_num(fv.interval.mid, d)} {fv.unit}".strip()
