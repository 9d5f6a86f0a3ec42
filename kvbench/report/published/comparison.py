"""Measured next to published: driven by the `compare:` section of a dataset file.

A dataset (``kvbench/reference/<name>.yaml``, the same file `kvbench audit` reads)
says which measured quantity compares with which published figure or claim::

    compare:
      - id: ttft-cold-130k                     # unique; names the row in summary.json
        label: "TTFT cold at {tokens:,} tokens (median)"   # {field}: of the matched row
        measured: ttft_by_length.ttft_p50_ms   # path into summary.json (RunSummary)
        where: {label: cold, tokens: 130000}   # picks rows of a list on the path
        tolerance: 0.05                        # relative, for numbers in `where` (default)
        unit: s                                # unit the row is shown in
        figure: ttft_uncached_130k             # exactly one of: figure (a published figure),
        # claim: ttft-speedup-130k             #   claim (its stated value, or `claim_value:
        # expr: "percent_increase(a, b)"       #   recomputed`), expr (kvbench's arithmetic)
        note: "..."                            # optional, shown in the row

No published number and no figure id lives in code: a second paper is a YAML file.
A run on a time-scaled mock (profile ``ci`` runs ``ibm-g4`` at 1/100 of its pace) is
compared at that scale: a published time is multiplied by the scale, a rate divided,
a ratio or percentage left alone, and the measured value scaled back is shown too.
"""

from __future__ import annotations

import math
import string
import typing
from dataclasses import dataclass
from functools import lru_cache
from types import SimpleNamespace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kvbench.errors import UsageError
from kvbench.report.summary_model import PublishedComparison, PublishedRow, RunSummary

_ID_CHARS = set(string.ascii_letters + string.digits + "_.-")


class CompareEntry(BaseModel):
    """One measured quantity and the published value it is compared with."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(description="unique id of the comparison (names its row in summary.json)")
    label: str = Field(description="what is compared, in words; {field} is filled from the matched row")
    measured: str = Field(description="dotted path into summary.json, e.g. throughput.rate_ratio")
    where: dict[str, str | float] = Field(
        default_factory=dict, description="picks the rows of a list on the path: field -> value"
    )
    tolerance: float = Field(0.05, ge=0, lt=1, description="relative tolerance for numbers in `where`")
    unit: str = Field(description="unit the measured and published values are shown in")
    figure: str | None = Field(None, description="published figure id to compare with")
    claim: str | None = Field(None, description="claim id to compare with")
    claim_value: Literal["stated", "recomputed"] = Field(
        "stated",
        description="with `claim`: the value as printed, or as kvbench recomputes it from the figures",
    )
    expr: str | None = Field(None, description="expression over published figures (kvbench's arithmetic)")
    note: str = Field("", description="context shown in the row")

    @field_validator("id")
    @classmethod
    def _id_ok(cls, v: str) -> str:
        if not v or not set(v) <= _ID_CHARS:
            raise ValueError(f"'{v}' is not a valid id (letters, digits, _ . -)")
        return v

    @field_validator("label", "note")
    @classmethod
    def _label_ok(cls, v: str) -> str:
        for _, name, spec, conv in string.Formatter().parse(v):
            if name is not None and (not name.isidentifier() or conv or spec not in ("", ",")):
                raise ValueError(f"placeholder {{{name}}} must be a plain field name, optionally {{name:,}}")
        return v

    @field_validator("unit")
    @classmethod
    def _unit_ok(cls, v: str) -> str:
        _quantities().parse_unit(v)
        return v

    @model_validator(mode="after")
    def _one_source(self) -> CompareEntry:
        given = [k for k in ("figure", "claim", "expr") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of figure, claim, expr")
        return self


@dataclass(frozen=True)
class _Target:
    """What a summary path ends at: the unit of its field and whether it crosses a list."""

    unit: str
    lists: int


def _field_target(path: str) -> _Target:
    """Walk RunSummary's fields along `path`; ValueError naming the first unknown segment."""
    model: Any = RunSummary
    unit: str | None = None
    lists = 0
    parts = path.split(".")
    for i, part in enumerate(parts):
        fields = getattr(model, "model_fields", None)
        if fields is None or part not in fields:
            where = ".".join(parts[:i]) or "the summary"
            known = ", ".join(sorted(fields)) if fields else "no fields (a value)"
            raise ValueError(f"'{part}' is not a field of {where} (it has: {known})")
        info = fields[part]
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        unit = extra.get("unit") if isinstance(extra.get("unit"), str) else None
        ann, model = info.annotation, None
        for arg in (ann, *typing.get_args(ann)):
            if typing.get_origin(arg) is list:
                lists += 1
                arg = typing.get_args(arg)[0]
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                model = arg
    if model is not None or unit is None:
        raise ValueError(f"'{path}' is not a measured quantity (no unit declared in RunSummary)")
    return _Target(unit, lists)


def _loc(loc: tuple[int | str, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)


def parse_compare(
    raw: Any, figures: dict[str, str], claims: dict[str, str], source: str
) -> list[CompareEntry]:
    """Validate a raw `compare:` list against the summary model and the dataset's ids.

    `figures` and `claims` map ids to units. UsageError, one line: `source: compare[i].field: message`.
    """
    q = _quantities()
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise UsageError(f"{source}: compare: expected a list of entries")
    entries: list[CompareEntry] = []
    problems: list[str] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        at = f"compare[{i}]"
        try:
            e = CompareEntry.model_validate(item)
        except ValidationError as exc:
            problems += [
                f"{at}{_loc(tuple(err['loc']))}: {err['msg'].removeprefix('Value error, ')}"
                for err in exc.errors()
            ]
            continue
        if e.id in seen:
            problems.append(f"{at}.id: duplicate id '{e.id}'")
        seen.add(e.id)
        try:
            target = _field_target(e.measured)
            if not q.same_dimension(q.parse_unit(target.unit), q.parse_unit(e.unit)):
                problems.append(
                    f"{at}.unit: '{e.unit}' does not fit {e.measured} (measured in {target.unit})"
                )
            if e.where and not target.lists:
                problems.append(f"{at}.where: {e.measured} crosses no list, there is nothing to pick")
        except ValueError as exc:
            problems.append(f"{at}.measured: {exc}")
        ref_unit: str | None = None
        if e.figure is not None:
            ref_unit = figures.get(e.figure)
            if e.figure not in figures:
                problems.append(f"{at}.figure: unknown figure '{e.figure}'")
        elif e.claim is not None:
            ref_unit = claims.get(e.claim)
            if e.claim not in claims:
                problems.append(f"{at}.claim: unknown claim '{e.claim}'")
        else:
            try:
                q.parse_expr(str(e.expr), figures)
            except q.ExprError as exc:
                problems.append(f"{at}.expr: {exc}")
        if ref_unit is not None and not q.same_dimension(q.parse_unit(ref_unit), q.parse_unit(e.unit)):
            problems.append(f"{at}.unit: '{e.unit}' does not fit the published unit '{ref_unit}'")
        entries.append(e)
    if problems:
        raise UsageError(f"{source}: " + "; ".join(problems))
    return entries


# --------------------------------------------------------------------------- the dataset


def _quantities() -> Any:
    """The audit's unit and expression helpers, imported lazily so a report without a dataset skips them."""
    from kvbench.audit.expr import ExprError, eval_expr, parse_expr
    from kvbench.audit.quantities import fmt_num
    from kvbench.audit.units import convert, parse_unit

    return SimpleNamespace(
        ExprError=ExprError,
        convert=convert,
        eval_expr=eval_expr,
        fmt_num=fmt_num,
        parse_expr=parse_expr,
        parse_unit=parse_unit,
        same_dimension=lambda a, b: a.dims == b.dims,
    )


@dataclass(frozen=True)
class Dataset:
    """A published dataset, audited once, with its validated compare section."""

    name: str
    title: str
    ledger: Any  # kvbench audit Ledger: figures, claims, discrepancies
    entries: list[CompareEntry]


@lru_cache(maxsize=8)
def load_dataset(name: str) -> Dataset:
    """The shipped dataset `name`: audited, with its `compare:` section validated."""
    from kvbench.audit import audit, load_claims
    from kvbench.reference import reference_path

    path = reference_path(name)
    cf = load_claims(path)
    figures = {f.id: f.unit for f in cf.figures}
    claims = {c.id: c.unit for c in cf.claims}
    entries = parse_compare(getattr(cf, "compare", None), figures, claims, path.name)
    return Dataset(cf.name, cf.title, audit(cf), entries)


def _published_value(ds: Dataset, e: CompareEntry) -> tuple[float | None, str, str]:
    """(published value in e.unit, its source in words, an automatic note)."""
    q = _quantities()
    unit = q.parse_unit(e.unit)
    if e.figure is not None:
        f = next(f for f in ds.ledger.figures if f.id == e.figure)
        if f.interval is None or f.kind in ("unpublished", "implied"):
            return None, f"figure {f.id} (not published)", ""
        source = f"figure {f.id}" + ("" if f.kind == "published" else f" ({f.kind} by kvbench)")
        return q.convert(f.interval.mid, q.parse_unit(f.unit), unit), source, ""
    if e.claim is not None:
        c = next(c for c in ds.ledger.claims if c.id == e.claim)
        recomputed = c.recomputed.mid if c.recomputed is not None else None
        stated = q.fmt_num(c.stated, c.decimals) + (c.unit if c.unit in ("x", "%") else f" {c.unit}")
        note = f"stated '{stated}'" + (
            f"; the published figures give {q.fmt_num(recomputed)}{c.unit if c.unit in ('x', '%') else ''}"
            if recomputed is not None
            else ""
        )
        value = c.stated if e.claim_value == "stated" else recomputed
        shown = None if value is None else q.convert(value, q.parse_unit(c.unit), unit)
        return shown, f"claim {c.id} ({e.claim_value})", note
    env = {
        f.id: f.interval.scale(q.parse_unit(f.unit).factor)
        for f in ds.ledger.figures
        if f.interval is not None and f.kind != "implied"
    }
    try:
        base = q.eval_expr(q.parse_expr(str(e.expr), env), env).mid
    except (q.ExprError, ZeroDivisionError):
        return None, f"kvbench's arithmetic: {e.expr} (needs an unpublished figure)", ""
    return base / unit.factor, f"kvbench's arithmetic on published figures: {e.expr}", ""


def _matches(row: dict[str, Any], where: dict[str, str | float], tol: float) -> bool:
    for key, want in where.items():
        got = row.get(key)
        if isinstance(want, str):
            if str(got) != want:
                return False
        elif not isinstance(got, int | float) or abs(got - want) > tol * abs(want):
            return False
    return True


def _measured(data: dict[str, Any], e: CompareEntry) -> list[tuple[dict[str, Any], Any]]:
    """(the row a value was found in, the value) for every match of the entry's path."""
    found: list[tuple[dict[str, Any], Any]] = [(data, data)]
    for part in e.measured.split("."):
        step: list[tuple[dict[str, Any], Any]] = []
        for _, node in found:
            items = node if isinstance(node, list) else [node]
            for item in items:
                if not isinstance(item, dict):
                    continue
                if isinstance(node, list) and not _matches(item, e.where, e.tolerance):
                    continue
                if part in item:
                    step.append((item, item.get(part)))
        found = step
    return found


def compare_rows(ds: Dataset, summary: RunSummary, scale: float) -> list[PublishedRow]:
    """One row per measured value an entry of the dataset's compare section finds in `summary`."""
    q = _quantities()
    data = summary.model_dump()
    rows: list[PublishedRow] = []
    for e in ds.entries:
        matches = _measured(data, e)
        if not matches:
            continue
        target = _field_target(e.measured)
        published, source, auto_note = _published_value(ds, e)
        power = dict(q.parse_unit(e.unit).dims).get("time", 0)
        factor = scale**power if scale != 1.0 and power else None
        at_scale = published * factor if published is not None and factor else None
        for row, value in matches:
            measured = None
            if isinstance(value, int | float) and math.isfinite(value):
                measured = q.convert(float(value), q.parse_unit(target.unit), q.parse_unit(e.unit))
            against = at_scale if at_scale is not None else published
            rows.append(
                PublishedRow(
                    id=e.id,
                    metric=e.label.format_map(_Fill(row)),
                    measured=measured,
                    published=published,
                    published_at_scale=at_scale,
                    measured_scaled_back=measured / factor if measured is not None and factor else None,
                    unit=e.unit,
                    measured_over_published=measured / against if measured is not None and against else None,
                    source=source,
                    note="; ".join(n for n in (auto_note, e.note.format_map(_Fill(row))) if n),
                )
            )
    return rows


class _Fill(dict[str, Any]):
    """Format a label from a summary row; a missing field shows as '?' instead of failing."""

    def __init__(self, row: dict[str, Any]) -> None:
        super().__init__(row)

    def __missing__(self, key: str) -> str:
        return "?"


def published_comparison(summary: RunSummary) -> tuple[PublishedComparison | None, str | None]:
    """The run against its named dataset, and a note when that cannot be done."""
    from kvbench.reference import available

    ref = summary.run.reference
    if not ref:
        return None, None
    if ref not in available():
        return None, f"reference {ref}: no such published dataset (shipped: {', '.join(available())})"
    ds = load_dataset(ref)
    if not ds.entries:
        return None, None
    scale = summary.run.time_scale.value
    return (
        PublishedComparison(
            reference=ds.name,
            title=ds.title,
            rows=compare_rows(ds, summary, scale),
            simulated=summary.run.simulated,
            time_scale=scale,
            discrepancies=[c.id for c in ds.ledger.discrepancies],
        ),
        None,
    )


def published_points(name: str, scale: float = 1.0) -> dict[str, list[tuple[int, float]]]:
    """Published TTFT points for the plots, {label: [(tokens, ttft_ms)]}, at the run's time scale.

    Taken from the compare entries that pick one label and length of `ttft_by_length`.
    """
    q = _quantities()
    ds = load_dataset(name)
    out: dict[str, list[tuple[int, float]]] = {}
    for e in ds.entries:
        label, tokens = e.where.get("label"), e.where.get("tokens")
        if not e.measured.startswith("ttft_by_length.") or not isinstance(label, str):
            continue
        if not isinstance(tokens, int | float):
            continue
        value, _, _ = _published_value(ds, e)
        if value is None:
            continue
        ms = q.convert(value, q.parse_unit(e.unit), q.parse_unit("ms")) * scale
        out.setdefault(label, []).append((int(tokens), ms))
    for pts in out.values():
        pts.sort()
    return out


def published_speedups(name: str) -> list[tuple[int, float]]:
    """Published TTFT speedups per length: entries on ttft_speedups.speedup that pick a length."""
    ds = load_dataset(name)
    out = []
    for e in ds.entries:
        tokens = e.where.get("tokens")
        if e.measured == "ttft_speedups.speedup" and isinstance(tokens, int | float):
            value, _, _ = _published_value(ds, e)
            if value is not None:
                out.append((int(tokens), value))
    return sorted(out)
