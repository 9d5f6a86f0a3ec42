"""Audit published figures and claims: recompute each one from the data it cites.

`kvbench audit [CLAIMS.yaml]` reads a claims file (default: the shipped
``kvbench/reference/ibm-g4.yaml``), recomputes every claim, and prints a ledger:
the figures (published, derived, from the model, implied), each claim's
recomputed value with a verdict, the alternative readings that would give a
stated value that does not match, sizing checks and model-based bounds, and
every assumption made on the way.

Claims file schema (YAML, `schema: kvbench-claims/1`)
-----------------------------------------------------
::

    schema: kvbench-claims/1
    name: my-paper                       # short name
    title: "..."                         # optional
    sources: {paper: {title: "...", date: "..."}}      # optional, for `source:`
    model: {geometry: gpt-oss-120b}      # optional: a kvbench preset, a config.json
                                         # path, or inline KVGeometry fields
    figures:                             # the numbers
      - id: rate_cached                  # [A-Za-z_][A-Za-z0-9_]*
        value: 4.26                      # as printed; null = not published (unknown)
        unit: req/s                      # s, ms, GB, GiB, GB/s, tokens, req/s, B/token, x, % ...
        decimals: 2                      # decimals as printed (-6 for "24 million");
                                         # the figure stands for [4.255, 4.265)
        source: paper                    # optional
        description: "..."               # optional
        test: throughput                 # optional tag(s) grouping related figures
      - id: per_request                  # a derived figure: kvbench's arithmetic
        expr: "tokens_total / requests_total"
        unit: tokens/request
      - id: kv_per_token                 # from the model's geometry
        from_model: bytes_per_token_full_only   # | bytes_per_token_all_layers | context_length
        unit: B/token
    claims:                              # statements to check
      - id: noisy-reduction
        expr: "percent_drop(rate_cached, rate_noisy)"
        stated: 18                       # the value as printed
        unit: "%"
        decimals: 0                      # "18%" means [17.5, 18.5)
        description: "..."
        assumptions: ["..."]             # optional, printed in the ledger
    sizing:                              # optional: do tokens, prompts and bytes fit the model?
      - {id: ws, tokens: tokens_total, requests: requests_total,
         prompts: prompts_distinct, bytes: kv_data_total}
    bounds:                              # optional: model-based limits
      - {id: reuse, kind: cold_reuse, requests: requests_total,
         prompts: prompts_distinct, claim: throughput-speedup}

Expressions use figure ids, numbers, ``+ - * / **`` and the functions
ratio(a, b), quotient(a, b), difference(a, b), sum(...), product(...),
percent_change(old, new), percent_increase(old, new), percent_drop(old, new),
percent_of(part, whole), reciprocal(a), abs(a). The percent_* functions return
fractions (0.155); a claim whose unit is "%" shows them as 15.5%. Values are
computed in base units (s, B, counts), so "GB" and "B/token" figures mix freely.

Verdicts: ``consistent`` when the recomputed value rounds to the stated one (or
can, given the rounding of the figures it uses: said so in a note);
``discrepancy`` otherwise; ``unverifiable`` when a claim needs a figure that was
not published (its implied value is then solved for and shown).

For a discrepancy, alternative readings are searched generically over the
whole dataset: the other base of a percentage, times instead of rates (via
quantities of reciprocal units, e.g. requests / (req/s) = s), inverse ratios,
other pairs of figures of compatible units, and sibling units (GB/GiB, s/ms).
"""

from __future__ import annotations

import ast
import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kvbench.errors import UsageError
from kvbench.kv_geometry import KVGeometry
from kvbench.report.quantities import (
    ExprError,
    Interval,
    Unit,
    eval_expr,
    expr_names,
    fmt_num,
    parse_expr,
    parse_unit,
    sibling_units,
    solve_for,
)

SCHEMA = "kvbench-claims/1"
_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CLAIM_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")

# --------------------------------------------------------------------------- schema


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Source(_Strict):
    title: str = Field(description="title of the publication")
    date: str | None = Field(None, description="publication date as printed")
    url: str | None = Field(None, description="where to read it")


class ModelSpec(_Strict):
    geometry: str | dict[str, Any] = Field(
        description="kvbench preset, config.json path, or KVGeometry fields"
    )
    note: str | None = Field(None, description="free text")


FromModel = Literal[
    "bytes_per_token_full_only",
    "bytes_per_token_all_layers",
    "bytes_per_token_per_layer",
    "context_length",
    "num_layers",
    "sliding_window",
]


class Figure(_Strict):
    id: str = Field(description="identifier used in expressions")
    value: float | None = Field(None, description="the value as published; null = not published")
    expr: str | None = Field(None, description="derived figure: expression over other figures")
    from_model: FromModel | None = Field(None, description="figure computed from the model geometry")
    unit: str = Field("", description="unit, e.g. s, GB, req/s, B/token")
    decimals: int | None = Field(None, description="decimals as printed (negative: 10s, 100s...)")
    source: str | None = Field(None, description="key into sources")
    description: str = Field("", description="what the figure is")
    test: str | list[str] | None = Field(None, description="tag(s) grouping related figures")

    @field_validator("id")
    @classmethod
    def _id_ok(cls, v: str) -> str:
        if not _ID.match(v):
            raise ValueError(f"'{v}' is not a valid figure id (letters, digits, _)")
        return v

    @field_validator("unit")
    @classmethod
    def _unit_ok(cls, v: str) -> str:
        parse_unit(v)
        return v

    @model_validator(mode="after")
    def _one_kind(self) -> Figure:
        kinds = [k for k in ("value", "expr", "from_model") if k in self.model_fields_set]
        if len(kinds) != 1:
            raise ValueError("a figure needs exactly one of value (null if unpublished), expr, from_model")
        return self

    @property
    def kind(self) -> str:
        if self.expr is not None:
            return "derived"
        if self.from_model is not None:
            return "model"
        return "published" if self.value is not None else "unpublished"

    @property
    def tags(self) -> set[str]:
        if self.test is None:
            return set()
        return {self.test} if isinstance(self.test, str) else set(self.test)


class Claim(_Strict):
    id: str = Field(description="identifier")
    expr: str = Field(description="expression over figures that the claim states")
    stated: float = Field(description="the value as printed")
    unit: str = Field("", description="unit of the stated value: x, %, s, GB ...")
    decimals: int | None = Field(0, description="decimals as printed")
    source: str | None = Field(None, description="key into sources")
    description: str = Field("", description="the claim in words")
    assumptions: list[str] = Field(default_factory=list, description="assumptions this check makes")

    @field_validator("id")
    @classmethod
    def _id_ok(cls, v: str) -> str:
        if not _CLAIM_ID.match(v):
            raise ValueError(f"'{v}' is not a valid claim id")
        return v

    @field_validator("unit")
    @classmethod
    def _unit_ok(cls, v: str) -> str:
        parse_unit(v)
        return v


class SizingCheck(_Strict):
    id: str
    description: str = ""
    tokens: str = Field(description="figure: tokens processed")
    bytes: str = Field(description="figure: KV data size as stated")
    requests: str | None = Field(None, description="figure: number of requests")
    prompts: str | None = Field(None, description="figure: number of distinct prompts")
    geometry: str | dict[str, Any] | None = Field(None, description="overrides the file's model")


class Bound(_Strict):
    id: str
    kind: Literal["cold_reuse", "prefill_scaling"] = "cold_reuse"
    description: str = ""
    # cold_reuse
    requests: str | None = Field(None, description="cold_reuse: figure, number of requests")
    prompts: str | None = Field(None, description="cold_reuse: figure, number of distinct prompts")
    claim: str | None = Field(None, description="cold_reuse: claim whose stated speedup is tested")
    stated: float | None = Field(None, description="cold_reuse: speedup to test when no claim is named")
    # prefill_scaling
    short_tokens: str | None = Field(None, description="prefill_scaling: figure, short prompt length")
    short_time: str | None = Field(None, description="prefill_scaling: figure, uncached TTFT at short length")
    long_tokens: str | None = Field(None, description="prefill_scaling: figure, long prompt length")
    long_time: str | None = Field(None, description="prefill_scaling: figure, uncached TTFT at long length")

    def refs(self) -> list[str]:
        if self.kind == "cold_reuse":
            return ["requests", "prompts"]
        return ["short_tokens", "short_time", "long_tokens", "long_time"]


class ClaimsFile(_Strict):
    schema_: str = Field(SCHEMA, alias="schema", description="kvbench-claims/1")
    name: str
    title: str = ""
    sources: dict[str, Source] = Field(default_factory=dict)
    model: ModelSpec | None = None
    figures: list[Figure]
    claims: list[Claim] = Field(default_factory=list)
    sizing: list[SizingCheck] = Field(default_factory=list)
    bounds: list[Bound] = Field(default_factory=list)

    @field_validator("schema_")
    @classmethod
    def _schema_ok(cls, v: str) -> str:
        if v != SCHEMA:
            raise ValueError(f"unsupported schema '{v}' (expected {SCHEMA})")
        return v


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top)"


def _check_refs(cf: ClaimsFile) -> list[str]:
    problems: list[str] = []
    ids = [f.id for f in cf.figures]
    seen: set[str] = set()
    for i, f in enumerate(cf.figures):
        if f.id in seen:
            problems.append(f"figures[{i}].id: duplicate figure '{f.id}'")
        seen.add(f.id)
        if f.source and cf.sources and f.source not in cf.sources:
            problems.append(f"figures[{i}].source: unknown source '{f.source}'")
        if f.from_model and cf.model is None:
            problems.append(f"figures[{i}].from_model: the file has no `model:` section")
        if f.expr is not None:
            try:
                names = expr_names(parse_expr(f.expr, ids))
                if f.id in names:
                    problems.append(f"figures[{i}].expr: refers to itself")
            except ExprError as exc:
                problems.append(f"figures[{i}].expr: {exc}")
    claim_ids: set[str] = set()
    for i, c in enumerate(cf.claims):
        if c.id in claim_ids:
            problems.append(f"claims[{i}].id: duplicate claim '{c.id}'")
        claim_ids.add(c.id)
        try:
            parse_expr(c.expr, ids)
        except ExprError as exc:
            problems.append(f"claims[{i}].expr: {exc}")
    for i, s in enumerate(cf.sizing):
        for key in ("tokens", "bytes", "requests", "prompts"):
            ref = getattr(s, key)
            if ref is not None and ref not in seen:
                problems.append(f"sizing[{i}].{key}: unknown figure '{ref}'")
        if s.geometry is None and cf.model is None:
            problems.append(f"sizing[{i}].geometry: no geometry and the file has no `model:` section")
    for i, b in enumerate(cf.bounds):
        for key in b.refs():
            if getattr(b, key) is None:
                problems.append(f"bounds[{i}].{key}: required for kind {b.kind}")
            elif getattr(b, key) not in seen:
                problems.append(f"bounds[{i}].{key}: unknown figure '{getattr(b, key)}'")
        if b.claim is not None and b.claim not in claim_ids:
            problems.append(f"bounds[{i}].claim: unknown claim '{b.claim}'")
        if b.kind == "cold_reuse" and b.claim is None and b.stated is None:
            problems.append(f"bounds[{i}]: give `claim` or `stated`")
    return problems


def parse_claims(data: Any, source: str = "claims") -> ClaimsFile:
    """Validate a parsed claims document; UsageError with `path: message` lines."""
    if not isinstance(data, dict):
        raise UsageError(f"{source}: expected a mapping at the top level")
    try:
        cf = ClaimsFile.model_validate(data)
    except ValidationError as exc:
        problems = [
            f"{_loc(tuple(e['loc']))}: {e['msg'].removeprefix('Value error, ')}" for e in exc.errors()
        ]
        raise UsageError(f"{source}: " + "; ".join(problems)) from None
    problems = _check_refs(cf)
    if problems:
        raise UsageError(f"{source}: " + "; ".join(problems))
    return cf


def load_claims(path: Path | str | None = None) -> ClaimsFile:
    """Read and validate a claims file; None = the shipped ibm-g4 dataset."""
    if path is None:
        from kvbench.reference import reference_path

        path = reference_path()
    p = Path(path)
    if not p.exists():
        # a bare dataset name such as "ibm-g4"
        from kvbench.reference import reference_path

        if p.suffix == "" and "/" not in str(path):
            p = reference_path(str(path))
        else:
            raise UsageError(f"{path}: no such claims file")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "?"
        raise UsageError(f"{p.name}: {where}: not valid YAML") from None
    return parse_claims(data, source=p.name)


def geometry_of(spec: str | dict[str, Any]) -> KVGeometry:
    if isinstance(spec, dict):
        try:
            fields = {"name": "inline", **spec}
            return KVGeometry(**fields)
        except TypeError as exc:
            raise UsageError(f"model.geometry: {exc}") from None
    from kvbench.report.sizing import resolve_geometry

    return resolve_geometry(spec)


# --------------------------------------------------------------------------- ledger data


@dataclass
class FigureValue:
    id: str
    kind: str  # published | derived | model | implied | unpublished
    interval: Interval | None
    unit: str
    decimals: int | None
    description: str
    expr: str | None = None
    source: str | None = None
    tags: set[str] = field(default_factory=set)
    implied_by: str | None = None

    def to_dict(self) -> dict[str, Any]:
        iv = self.interval
        return {
            "id": self.id,
            "kind": self.kind,
            "value": None if iv is None else iv.mid,
            "range": None if iv is None or iv.lo == iv.hi else [iv.lo, iv.hi],
            "unit": self.unit,
            "decimals": self.decimals,
            "expr": self.expr,
            "source": self.source,
            "implied_by": self.implied_by,
            "description": self.description,
        }


@dataclass
class Reading:
    """One way of computing a number that matches a stated value."""

    text: str
    value: float
    unit: str
    match: str  # "exact" | "within input rounding"
    figures: tuple[str, ...]
    related: bool
    depth: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class ClaimResult:
    id: str
    description: str
    expr: str
    stated: float
    unit: str
    decimals: int | None
    stated_range: tuple[float, float]
    recomputed: Interval | None
    verdict: str  # consistent | discrepancy | unverifiable
    notes: list[str] = field(default_factory=list)
    readings: list[Reading] = field(default_factory=list)
    unrelated_matches: int = 0
    assumptions: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        rc = self.recomputed
        return {
            "id": self.id,
            "description": self.description,
            "expr": self.expr,
            "stated": self.stated,
            "unit": self.unit,
            "decimals": self.decimals,
            "stated_range": list(self.stated_range),
            "recomputed": None if rc is None else rc.mid,
            "recomputed_range": None if rc is None else [rc.lo, rc.hi],
            "verdict": self.verdict,
            "notes": self.notes,
            "alternative_readings": [r.to_dict() for r in self.readings],
            "unrelated_matches": self.unrelated_matches,
            "assumptions": self.assumptions,
        }


@dataclass
class Ledger:
    name: str
    title: str
    figures: list[FigureValue]
    claims: list[ClaimResult]
    sizing: list[dict[str, Any]]
    bounds: list[dict[str, Any]]
    assumptions: list[str]

    @property
    def discrepancies(self) -> list[ClaimResult]:
        return [c for c in self.claims if c.verdict == "discrepancy"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "summary": {
                v: sum(1 for c in self.claims if c.verdict == v)
                for v in ("consistent", "discrepancy", "unverifiable")
            },
            "figures": [f.to_dict() for f in self.figures],
            "claims": [c.to_dict() for c in self.claims],
            "sizing": self.sizing,
            "bounds": self.bounds,
            "assumptions": self.assumptions,
        }


GENERAL_ASSUMPTIONS = [
    "A printed figure stands for every value that rounds to it: 3.6 (1 decimal) is [3.55, 3.65), "
    '"24 million" (decimals -6) is [23.5e6, 24.5e6).',
    "A claim is consistent when the recomputed value rounds to the stated one; when it only can "
    "within the rounding of its inputs, a note says so.",
    "Alternative readings are searched over all figures of the file (and quantities formed by "
    "dividing or multiplying two of them into a unit the file uses), for pairs of the same "
    "dimension; readings that involve only figures unrelated to the claim are counted, not shown.",
    "Figures are related when they appear together in a claim or derived expression, or share a `test` tag.",
]


# --------------------------------------------------------------------------- figures


def _resolve_figures(cf: ClaimsFile) -> dict[str, FigureValue]:
    geo = geometry_of(cf.model.geometry) if cf.model is not None else None
    out: dict[str, FigureValue] = {}
    for f in cf.figures:
        iv: Interval | None = None
        if f.kind == "published":
            assert f.value is not None
            iv = Interval.printed(f.value, f.decimals)
        elif f.kind == "model":
            assert geo is not None and f.from_model is not None
            iv = Interval.exact(_model_value(geo, f.from_model))
        out[f.id] = FigureValue(
            id=f.id,
            kind=f.kind,
            interval=iv,
            unit=f.unit,
            decimals=f.decimals,
            description=f.description,
            expr=f.expr,
            source=f.source,
            tags=f.tags,
        )
    return out


def _model_value(geo: KVGeometry, what: str) -> float:
    if what == "bytes_per_token_full_only":
        return geo.bytes_per_token(sliding_at_full=False)
    if what == "bytes_per_token_all_layers":
        return geo.bytes_per_token(sliding_at_full=True)
    if what == "bytes_per_token_per_layer":
        return geo.bytes_per_token_per_layer
    if what == "context_length":
        return float(geo.context_length or math.nan)
    if what == "num_layers":
        return float(geo.num_layers)
    return float(geo.sliding_window or math.nan)


def _env(figs: dict[str, FigureValue]) -> dict[str, Interval]:
    """Values in base units (s, B, counts), so that expressions mix units correctly."""
    env: dict[str, Interval] = {}
    for fid, fv in figs.items():
        if fv.interval is not None:
            env[fid] = fv.interval.scale(parse_unit(fv.unit).factor)
    return env


def _compute_derived(figs: dict[str, FigureValue], trees: dict[str, ast.Expression]) -> None:
    pending = [f for f in figs.values() if f.kind == "derived" and f.interval is None]
    progress = True
    while pending and progress:
        progress = False
        env = _env(figs)
        for f in list(pending):
            tree = trees[f.id]
            if all(n in env for n in expr_names(tree)):
                try:
                    base = eval_expr(tree, env)
                except ZeroDivisionError:
                    pending.remove(f)
                    continue
                f.interval = base.scale(1.0 / parse_unit(f.unit).factor)
                pending.remove(f)
                progress = True


# --------------------------------------------------------------------------- claims


def _stated_range(value: float, decimals: int | None) -> tuple[float, float]:
    iv = Interval.printed(value, decimals)
    return iv.lo, iv.hi


def _rounds_to(x: float, lo: float, hi: float) -> bool:
    eps = 1e-9 * max(1.0, abs(x))
    return lo - eps <= x < hi - eps or (lo == hi and abs(x - lo) <= eps)


def _match(iv: Interval, lo: float, hi: float) -> str | None:
    if _rounds_to(iv.mid, lo, hi):
        return "exact"
    if lo == hi:
        return "within input rounding" if iv.lo <= lo <= iv.hi else None
    if iv.lo < hi and lo < iv.hi:
        return "within input rounding"
    return None


def _fmt_iv(iv: Interval) -> str:
    if iv.lo == iv.hi:
        return fmt_num(iv.mid)
    return f"{fmt_num(iv.mid)} [{fmt_num(iv.lo)}, {fmt_num(iv.hi)}]"


@dataclass(frozen=True)
class _Quantity:
    text: str
    base: Interval  # in base units
    unit: Unit
    figures: tuple[str, ...]
    depth: int


def _quantity_pool(figs: dict[str, FigureValue]) -> list[_Quantity]:
    """Every figure, plus a/b and a*b of two figures when the result has a unit the file uses."""
    base = [
        _Quantity(fv.id, fv.interval.scale(parse_unit(fv.unit).factor), parse_unit(fv.unit), (fv.id,), 0)
        for fv in figs.values()
        if fv.interval is not None and math.isfinite(fv.interval.mid) and fv.interval.mid != 0
    ]
    unit_by_dims: dict[tuple[tuple[str, int], ...], Unit] = {}
    for q in base:
        if q.unit.dims and q.unit.dims not in unit_by_dims:
            unit_by_dims[q.unit.dims] = q.unit
    pool = list(base)
    for a in base:
        for b in base:
            if a.text == b.text:
                continue
            for op in ("/", "*"):
                if op == "*" and a.text > b.text:
                    continue
                dims: dict[str, int] = dict(a.unit.dims)
                for k, v in b.unit.dims:
                    dims[k] = dims.get(k, 0) + (v if op == "*" else -v)
                key = tuple(sorted((k, v) for k, v in dims.items() if v))
                if key not in unit_by_dims:
                    continue
                u = unit_by_dims[key]
                try:
                    val = a.base / b.base if op == "/" else a.base * b.base
                except ZeroDivisionError:
                    continue
                pool.append(_Quantity(f"{a.text} {op} {b.text}", val, u, (a.text, b.text), 1))
    return pool


def _related_set(cf: ClaimsFile, figs: dict[str, FigureValue], claim_figs: set[str]) -> set[str]:
    groups: list[set[str]] = []
    ids = list(figs)
    for f in cf.figures:
        if f.expr is not None:
            groups.append({f.id, *expr_names(parse_expr(f.expr, ids))})
    for c in cf.claims:
        groups.append(set(expr_names(parse_expr(c.expr, ids))))
    related = set(claim_figs)
    for g in groups:
        if g & claim_figs:
            related |= g
    tags = set().union(*(figs[f].tags for f in claim_figs if f in figs)) if claim_figs else set()
    for fv in figs.values():
        if fv.tags & tags:
            related.add(fv.id)
    return related


def _in_unit(q: _Quantity, unit: Unit) -> Interval:
    return q.base.scale(1.0 / unit.factor)


def _alternatives(
    cf: ClaimsFile, figs: dict[str, FigureValue], claim: Claim, recomputed: Interval | None
) -> tuple[list[Reading], int]:
    lo, hi = _stated_range(claim.stated, claim.decimals)
    unit = parse_unit(claim.unit)
    ids = list(figs)
    claim_figs = set(expr_names(parse_expr(claim.expr, ids)))
    related = _related_set(cf, figs, claim_figs)
    # the stated number itself may be a figure (825 GB): a reading must not use it
    stated_iv = Interval.printed(claim.stated, claim.decimals).scale(unit.factor)
    banned = {
        fv.id
        for fv in figs.values()
        if fv.kind == "published"
        and fv.interval is not None
        and parse_unit(fv.unit).dims == unit.dims
        and math.isclose(fv.interval.mid * parse_unit(fv.unit).factor, stated_iv.mid, rel_tol=1e-9)
    }
    found: list[Reading] = []
    own_texts: set[str] = set()

    def add(text: str, iv: Interval, unit_text: str, figures: tuple[str, ...], depth: int) -> None:
        m = _match(iv, lo, hi)
        if m is None:
            return
        flat = tuple(dict.fromkeys(x for f in figures for x in f.split(" ") if x in figs))
        if _leaves(figs, flat) & banned:
            return
        found.append(Reading(text, iv.mid, unit_text, m, flat, set(flat) <= related, depth))

    def show(q: _Quantity) -> str:
        return f"{q.text} ({fmt_num(q.base.mid / q.unit.factor)} {q.unit.text})"

    # 1. the claim's own computation, read differently
    if recomputed is not None and math.isfinite(recomputed.mid):
        own = tuple(sorted(claim_figs))
        if unit.is_percent:
            other_base = (
                (Interval.exact(1.0) / (Interval.exact(1.0) - recomputed.scale(0.01)) - Interval.exact(1.0))
                .scale(100.0)
                .abs()
            )
            own_texts.add("the same change taken relative to the other end (other base of the percentage)")
            add(
                "the same change taken relative to the other end (other base of the percentage)",
                other_base,
                "%",
                own,
                0,
            )
        if unit.is_ratio and recomputed.mid != 0:
            own_texts.add("the inverse ratio")
            add("the inverse ratio", Interval.exact(1.0) / recomputed, "x", own, 0)
        if unit.dims:
            base = recomputed.scale(unit.factor)
            for alt in sibling_units(unit):
                au = parse_unit(alt)
                text = f"{claim.expr} in {alt} (not {claim.unit})"
                own_texts.add(text)
                add(text, base.scale(1.0 / au.factor), alt, own, 0)

    # 2. generic search over pairs of quantities
    pool = _quantity_pool(figs)
    if unit.dimensionless:
        by_dims: dict[tuple[tuple[str, int], ...], list[_Quantity]] = {}
        for q in pool:
            by_dims.setdefault(q.unit.dims, []).append(q)
        for group in by_dims.values():
            for a in group:
                for b in group:
                    if a.text == b.text or set(a.figures) == set(b.figures) or a.depth + b.depth > 1:
                        continue
                    figs_ab = a.figures + b.figures
                    depth = a.depth + b.depth
                    try:
                        if unit.is_percent:
                            iv = (a.base / b.base - Interval.exact(1.0)).scale(100.0)
                            word = "increase" if iv.mid > 0 else "drop"
                            text = f"{word} from {show(b)} to {show(a)}, relative to {b.text}"
                            add(text, iv.abs(), "%", figs_ab, depth)
                        else:
                            iv = a.base / b.base
                            add(f"{show(a)} / {show(b)}", iv, claim.unit or "x", figs_ab, depth)
                    except ZeroDivisionError:
                        continue
    else:
        units = [unit] + [parse_unit(u) for u in sibling_units(unit)]
        same = [q for q in pool if q.unit.dims == unit.dims]
        for q in same:
            for u in units:
                suffix = "" if u.text == claim.unit else f" in {u.text} (not {claim.unit})"
                add(f"{q.text}{suffix}", _in_unit(q, u), u.text, q.figures, q.depth)
        for a in same:
            for b in same:
                if a.text == b.text or a.depth + b.depth > 0 or set(a.figures) & set(b.figures):
                    continue
                for u in units:
                    suffix = "" if u.text == claim.unit else f" in {u.text}"
                    add(
                        f"{a.text} - {b.text}{suffix}",
                        _in_unit(a, u) - _in_unit(b, u),
                        u.text,
                        a.figures + b.figures,
                        a.depth + b.depth + 1,
                    )

    # drop the claim's own reading (it did not match, or it would not be a discrepancy)
    own_text = claim.expr.replace(" ", "")
    found = [r for r in found if r.text.replace(" ", "") != own_text]
    # de-duplicate: same text, or same figures and the same value
    uniq: dict[tuple[Any, ...], Reading] = {}
    for r in found:
        key = (frozenset(r.figures), round(r.value, 6), r.unit)
        best = uniq.get(key)
        if best is None or (r.text not in own_texts, r.depth, len(r.text)) < (
            best.text not in own_texts,
            best.depth,
            len(best.text),
        ):
            uniq[key] = r
    readings = sorted(
        uniq.values(),
        key=lambda r: (
            not r.related,
            r.match != "exact",
            r.depth,
            -len(set(r.figures) & claim_figs),
            len(_leaves(figs, r.figures)),
            len(r.text),
        ),
    )
    # a reading that only adds figures to a simpler one with the same value says nothing new
    kept: list[Reading] = []
    for r in readings:
        leaves = _leaves(figs, r.figures)
        if any(
            _leaves(figs, k.figures) <= leaves and f"{k.value:.4g}" == f"{r.value:.4g}" and k.unit == r.unit
            for k in kept
        ):
            continue
        kept.append(r)
    shown = [r for r in kept if r.related]
    return shown[:5], len(kept) - len(shown)


def _leaves(figs: dict[str, FigureValue], names: tuple[str, ...] | set[str]) -> set[str]:
    """The published (or model) figures a set of figures is computed from."""
    out: set[str] = set()
    stack = list(names)
    while stack:
        n = stack.pop()
        fv = figs.get(n)
        if fv is None or n in out:
            continue
        out.add(n)
        if fv.expr is not None:
            stack.extend(expr_names(parse_expr(fv.expr, figs)))
    return {n for n in out if figs[n].expr is None}


def _check_claim(
    cf: ClaimsFile, figs: dict[str, FigureValue], claim: Claim, trees: dict[str, ast.Expression]
) -> ClaimResult:
    tree = parse_expr(claim.expr, figs)
    names = expr_names(tree)
    unit = parse_unit(claim.unit)
    lo, hi = _stated_range(claim.stated, claim.decimals)
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
    )
    unknown = [n for n in names if figs[n].interval is None or figs[n].kind == "implied"]
    env = _env(figs)
    if unknown:
        missing = ", ".join(unknown)
        result.notes.append(f"needs {missing}, which was not published: the claim cannot be checked")
        for n in unknown:
            fv = figs[n]
            if fv.implied_by == claim.id and fv.interval is not None:
                result.notes.append(
                    f"implied: {n} = {fmt_num(fv.interval.mid)} {fv.unit} (solved from the stated value; "
                    "derived, not published)"
                )
                for other in figs.values():
                    if (
                        other.kind == "derived"
                        and other.interval is not None
                        and n in _leaves(figs, {other.id})
                    ):
                        result.notes.append(
                            f"which makes {other.id} = {fmt_num(other.interval.mid)} {other.unit} "
                            f"({other.description or other.expr})"
                        )
        return result
    try:
        rc = eval_expr(tree, env).scale(1.0 / unit.factor)
    except ZeroDivisionError:
        result.notes.append("division by zero")
        return result
    result.recomputed = rc
    m = _match(rc, lo, hi)
    if m == "exact":
        result.verdict = "consistent"
    elif m is not None:
        result.verdict = "consistent"
        result.notes.append(
            f"only within the rounding of its inputs: the printed figures give {fmt_num(rc.mid)}, "
            f"their ranges allow [{fmt_num(rc.lo)}, {fmt_num(rc.hi)}]"
        )
    else:
        result.verdict = "discrepancy"
        result.readings, result.unrelated_matches = _alternatives(cf, figs, claim, rc)
    derived = [n for n in names if figs[n].kind in ("derived", "model")]
    if derived:
        result.notes.append("uses figures kvbench derived (not published): " + ", ".join(derived))
    return result


def _solve_unknowns(cf: ClaimsFile, figs: dict[str, FigureValue], trees: dict[str, ast.Expression]) -> None:
    """For a claim that needs exactly one unpublished figure, solve for the value it implies."""
    for claim in cf.claims:
        tree = parse_expr(claim.expr, figs)
        env = _env(figs)
        missing = [n for n in expr_names(tree) if n not in env]
        if len(missing) != 1 or figs[missing[0]].kind != "unpublished":
            continue
        target = claim.stated * parse_unit(claim.unit).factor
        x = solve_for(tree, env, missing[0], target)
        if x is None:
            continue
        fv = figs[missing[0]]
        fv.kind = "implied"
        fv.implied_by = claim.id
        fv.interval = Interval.exact(x / parse_unit(fv.unit).factor)
        _compute_derived(figs, trees)


# --------------------------------------------------------------------------- sizing


def _sizing(cf: ClaimsFile, figs: dict[str, FigureValue], check: SizingCheck) -> dict[str, Any]:
    spec = check.geometry if check.geometry is not None else cf.model.geometry  # type: ignore[union-attr]
    geo = geometry_of(spec)
    tokens = figs[check.tokens]
    nbytes = figs[check.bytes]
    assert tokens.interval is not None and nbytes.interval is not None
    t_iv = tokens.interval.scale(parse_unit(tokens.unit).factor)
    stated_unit = parse_unit(nbytes.unit)
    lo, hi = _stated_range(nbytes.interval.mid, nbytes.decimals)
    requests = figs[check.requests].interval if check.requests else None
    prompts = figs[check.prompts].interval if check.prompts else None
    bases: list[tuple[str, Interval, str]] = [
        (f"{fmt_num(t_iv.mid)} tokens as stated", t_iv, f"{check.tokens}"),
    ]
    notes: list[str] = []
    per_request = per_prompt_if_distinct = None
    if requests is not None and prompts is not None:
        uses = requests.mid / prompts.mid
        distinct = t_iv.scale(prompts.mid / requests.mid)
        bases[0] = (
            f"{fmt_num(t_iv.mid)} tokens: all {fmt_num(requests.mid)} requests, repeats counted",
            t_iv,
            check.tokens,
        )
        bases.append(
            (
                f"{fmt_num(distinct.mid)} distinct tokens: {fmt_num(prompts.mid)} prompts, "
                f"each used {fmt_num(uses)}x",
                distinct,
                f"{check.tokens} * {check.prompts} / {check.requests}",
            )
        )
        per_request = t_iv.mid / requests.mid
        per_prompt_if_distinct = t_iv.mid / prompts.mid
        ctx = geo.context_length
        notes.append(
            f"{fmt_num(t_iv.mid)} tokens over {fmt_num(requests.mid)} requests = {fmt_num(per_request)} "
            f"tokens per request"
            + (f" ({'fits' if per_request <= ctx else 'exceeds'} the {ctx:,}-token context)" if ctx else "")
        )
        notes.append(
            f"if the {fmt_num(t_iv.mid)} tokens were the {fmt_num(prompts.mid)} distinct prompts: "
            f"{fmt_num(per_prompt_if_distinct)} tokens per prompt"
            + (
                f" ({'fits' if per_prompt_if_distinct <= ctx else 'EXCEEDS'} the {ctx:,}-token context, "
                f"so the stated tokens {'may' if per_prompt_if_distinct <= ctx else 'must'} count repeats)"
                if ctx
                else ""
            )
        )
    layer_variants = [
        (f"{geo.num_full_layers} full-attention layers only", geo.bytes_per_token(False)),
        (f"all {geo.num_layers} layers (sliding at full size)", geo.bytes_per_token(True)),
    ]
    rows: list[dict[str, Any]] = []
    units = [stated_unit] + [parse_unit(u) for u in sibling_units(stated_unit)]
    for basis, t, _ in bases:
        for layers, bpt in layer_variants:
            b = t.scale(bpt)
            row: dict[str, Any] = {"tokens": basis, "layers": layers, "bytes_per_token": bpt, "bytes": b.mid}
            fits: list[str] = []
            for u in units:
                v = b.scale(1.0 / u.factor)
                row[u.text] = v.mid
                m = _match(v, lo, hi)
                if m is not None:
                    fits.append(f"{u.text} ({m})")
            row["fits"] = fits
            rows.append(row)
    if geo.num_sliding_layers and geo.sliding_window:
        window_bytes = geo.num_sliding_layers * geo.sliding_window * geo.bytes_per_token_per_layer
        notes.append(
            f"sliding layers holding only their {geo.sliding_window}-token window add "
            f"{window_bytes / 1e6:,.1f} MB per sequence: negligible"
        )
    fitting = [f"{r['tokens']} x {r['layers']} in {', '.join(r['fits'])}" for r in rows if r["fits"]]
    fit_rows = [r for r in rows if r["fits"]]
    if len(fit_rows) > 1 and len({round(r["bytes"]) for r in fit_rows}) == 1:
        notes.append(
            "the readings that fit give the same bytes (half the tokens at twice the bytes per token): "
            "the published figures cannot tell them apart"
        )
    verdict = "fits" if fitting else "does not fit"
    return {
        "id": check.id,
        "description": check.description,
        "model": geo.name,
        "stated": f"{fmt_num(nbytes.interval.mid)} {nbytes.unit}",
        "stated_range": [lo, hi],
        "rows": rows,
        "units": [u.text for u in units],
        "readings_that_fit": fitting,
        "verdict": verdict,
        "notes": notes,
        "tokens_per_request": per_request,
    }


# --------------------------------------------------------------------------- bounds


def cold_reuse_speedup(uses: float, prompts: float, shared: float, cost: str = "linear") -> float:
    """Best throughput speedup of a cold cache over full recomputation.

    `prompts` distinct prompts of equal length n, each requested `uses` times;
    a fraction `shared` of every prompt is a prefix common to all prompts.
    Prefill cost c(n) = a n (linear) or b n^2 (quadratic: attention over the
    prefix); hits cost nothing. Work with the cache: the first prompt in full,
    the other prompts' first uses only their unshared suffix, reuses free.
    """
    suffix = 1.0 - shared if cost == "linear" else 1.0 - shared**2
    return uses * prompts / (1.0 + (prompts - 1.0) * suffix)


def required_shared_fraction(
    uses: float, prompts: float, speedup: float, cost: str = "linear"
) -> float | None:
    """The shared-prefix fraction f at which cold_reuse_speedup reaches `speedup` (None: unreachable)."""
    if speedup > uses * prompts:
        return None
    if speedup <= uses:
        return 0.0
    suffix = (uses * prompts / speedup - 1.0) / (prompts - 1.0)
    return 1.0 - suffix if cost == "linear" else math.sqrt(1.0 - suffix)


def _prefill_scaling(figs: dict[str, FigureValue], b: Bound) -> dict[str, Any]:
    def val(ref: str | None) -> tuple[float, FigureValue]:
        assert ref is not None
        fv = figs[ref]
        if fv.interval is None:
            raise UsageError(f"bounds {b.id}: figure '{ref}' has no value")
        return fv.interval.mid * parse_unit(fv.unit).factor, fv

    n1, _ = val(b.short_tokens)
    t1, f1 = val(b.short_time)
    n2, _ = val(b.long_tokens)
    t2, f2 = val(b.long_time)
    # t = a n + c n^2 through both points
    det = n1 * n2**2 - n2 * n1**2
    a = (t1 * n2**2 - t2 * n1**2) / det
    c = (n1 * t2 - n2 * t1) / det
    linear_pred = t2 * n1 / n2
    quad_pred = t2 * (n1 / n2) ** 2
    kinds = {f1.kind, f2.kind}
    basis = (
        "published"
        if kinds == {"published"}
        else "uses "
        + ", ".join(
            f"{f.id} ({f.kind}{' by ' + f.implied_by if f.implied_by else ''})"
            for f in (f1, f2)
            if f.kind != "published"
        )
    )
    if quad_pred <= t1 <= linear_pred:
        verdict = (
            f"{fmt_num(t1)} s at {fmt_num(n1)} tokens lies between pure-quadratic "
            f"({fmt_num(quad_pred)} s) and "
            f"linear ({fmt_num(linear_pred)} s) scaling from {fmt_num(t2)} s at {fmt_num(n2)}: plausible; "
            f"the quadratic term is {c * n2**2 / t2:.0%} of the time at {fmt_num(n2)} tokens"
        )
    elif t1 > linear_pred:
        verdict = (
            f"{fmt_num(t1)} s at {fmt_num(n1)} tokens is above linear scaling ({fmt_num(linear_pred)} s): "
            "it needs a fixed per-request overhead, or a negative quadratic term (implausible)"
        )
    else:
        verdict = (
            f"{fmt_num(t1)} s at {fmt_num(n1)} tokens is below pure-quadratic scaling "
            f"({fmt_num(quad_pred)} s): "
            "prefill would grow faster than n^2 (implausible)"
        )
    return {
        "id": b.id,
        "kind": b.kind,
        "description": b.description,
        "basis": basis,
        "points": [[n1, t1], [n2, t2]],
        "fit": {"a_s_per_token": a, "c_s_per_token2": c},
        "linear_prediction_s": linear_pred,
        "quadratic_prediction_s": quad_pred,
        "verdict": verdict,
        "assumptions": [
            "uncached TTFT is prefill time t(n) = a*n + c*n^2 (no fixed overhead, no queueing)",
            "both points come from the same server and settings",
        ],
        "note": "a two-point fit has no residual: it shows what the figures imply, not that they are right",
    }


def _bound(
    cf: ClaimsFile, figs: dict[str, FigureValue], b: Bound, claims: list[ClaimResult]
) -> dict[str, Any]:
    if b.kind == "prefill_scaling":
        return _prefill_scaling(figs, b)
    assert b.requests is not None and b.prompts is not None
    r_iv, p_iv = figs[b.requests].interval, figs[b.prompts].interval
    assert r_iv is not None and p_iv is not None
    requests, prompts = r_iv.mid, p_iv.mid
    uses = requests / prompts
    target = b.stated
    if b.claim is not None:
        target = next(c.stated for c in claims if c.id == b.claim)
    assert target is not None
    f_lin = required_shared_fraction(uses, prompts, target, "linear")
    f_quad = required_shared_fraction(uses, prompts, target, "quadratic")
    no_share = cold_reuse_speedup(uses, prompts, 0.0)
    table = [
        {
            "shared_fraction": f,
            "linear": cold_reuse_speedup(uses, prompts, f, "linear"),
            "quadratic": cold_reuse_speedup(uses, prompts, f, "quadratic"),
        }
        for f in (0.0, 0.5, 0.8, 0.9, 0.95, 0.99)
    ]
    assumptions = [
        f"the cache starts empty; {fmt_num(prompts)} distinct prompts, each requested "
        f"{fmt_num(uses)} times ({fmt_num(requests)} requests), all of the same length n",
        "a prompt's first use is computed in full; every later use is a full hit (best-case order: "
        "no reuse is in flight together with its first use, which concurrency makes likely)",
        "a cache hit costs nothing (free load): an upper bound on the speedup",
        "the baseline recomputes every request in full; decode and other per-request costs are ignored "
        "(they are paid by both and would pull the ratio towards 1)",
        "prefill cost c(n) = a*n (linear) or b*n^2 (quadratic attention term); real prefill lies between",
        "f = fraction of every prompt that is a prefix shared by all prompts (cached after its first "
        "computation); computing a suffix after a cached prefix of f*n tokens costs a*(1-f)*n, "
        "or b*(1-f^2)*n^2",
        f"speedup S(f) = {fmt_num(uses)}*P / (1 + (P-1)*(1-f)) linear, "
        f"or {fmt_num(uses)}*P / (1 + (P-1)*(1-f^2)) "
        f"quadratic, with P = {fmt_num(prompts)} prompts",
    ]
    if f_lin is None:
        verdict = (
            f"{fmt_num(target)}x is unreachable even with identical prompts (max {fmt_num(uses * prompts)}x)"
        )
    elif target > no_share:
        verdict = (
            f"{fmt_num(target)}x exceeds the {fmt_num(no_share)}x possible without shared prefixes: it needs "
            f"every prompt to share at least {f_lin:.1%} (linear cost) to {f_quad:.1%} (quadratic cost) "
            f"of its tokens with all the others, or a cache that was not empty"
        )
    else:
        verdict = f"{fmt_num(target)}x is within the {fmt_num(no_share)}x possible without shared prefixes"
    return {
        "id": b.id,
        "kind": b.kind,
        "description": b.description,
        "claim": b.claim,
        "target_speedup": target,
        "max_speedup_no_sharing": no_share,
        "max_speedup_identical_prompts": uses * prompts,
        "required_shared_fraction": {"linear": f_lin, "quadratic": f_quad},
        "table": table,
        "verdict": verdict,
        "assumptions": assumptions,
        "note": "if the cache had been filled before the run (not the published setup), every request "
        "could hit and this bound would not apply: the speedup would then be compute time over load time, "
        "as in the TTFT test",
    }


# --------------------------------------------------------------------------- audit


def audit(cf: ClaimsFile) -> Ledger:
    """Recompute every figure, claim, sizing check and bound of a claims file."""
    figs = _resolve_figures(cf)
    trees = {f.id: parse_expr(f.expr, figs) for f in cf.figures if f.expr is not None}
    _compute_derived(figs, trees)
    _solve_unknowns(cf, figs, trees)
    claims = [_check_claim(cf, figs, c, trees) for c in cf.claims]
    sizing = [_sizing(cf, figs, s) for s in cf.sizing]
    bounds = [_bound(cf, figs, b, claims) for b in cf.bounds]
    assumptions = list(GENERAL_ASSUMPTIONS)
    for f in cf.figures:
        if f.kind == "published" and ("taken to be" in f.description or "assumes" in f.description):
            assumptions.append(f"{f.id}: {f.description}")
    return Ledger(
        name=cf.name,
        title=cf.title,
        figures=list(figs.values()),
        claims=claims,
        sizing=sizing,
        bounds=bounds,
        assumptions=assumptions,
    )


def audit_file(path: Path | str | None = None) -> Ledger:
    return audit(load_claims(path))


# --------------------------------------------------------------------------- text


def _stated_text(c: ClaimResult) -> str:
    num = fmt_num(c.stated, c.decimals)
    unit = c.unit
    if unit in ("x", "%"):
        return f"{num}{unit}"
    return f"{num} {unit}".strip()


def format_ledger(ledger: Ledger) -> str:
    """The ledger as plain text (what `kvbench audit` prints)."""
    out: list[str] = []
    s = ledger.to_dict()["summary"]
    out.append(f"Audit of {ledger.name}: {ledger.title}".rstrip(": "))
    out.append(
        f"  {len(ledger.claims)} claims: {s['consistent']} consistent, {s['discrepancy']} discrepancy, "
        f"{s['unverifiable']} unverifiable"
    )
    out.append("")
    out.append("FIGURES (published = as printed; derived/model/implied = kvbench's arithmetic)")
    w = max((len(f.id) for f in ledger.figures), default=10)
    for f in ledger.figures:
        if f.interval is None:
            val = "not published"
        elif f.kind == "published":
            val = fmt_num(f.interval.mid, f.decimals)
        else:
            val = fmt_num(f.interval.mid)
        how = f.kind
        if f.expr:
            how += f" = {f.expr}"
        if f.implied_by:
            how += f" by claim {f.implied_by}"
        out.append(f"  {f.id:<{w}}  {val:>14} {f.unit:<14} {how}")
    out.append("")
    out.append("CLAIMS")
    for c in ledger.claims:
        mark = {"consistent": "ok ", "discrepancy": "!! ", "unverifiable": "?? "}[c.verdict]
        out.append(f"{mark}[{c.verdict.upper()}] {c.id}: {c.description}")
        d = None if c.decimals is None else max(c.decimals + 1, 0)
        rng = f"[{fmt_num(c.stated_range[0], d)}, {fmt_num(c.stated_range[1], d)})"
        out.append(f"     stated     {_stated_text(c)}  (as printed: {rng})")
        out.append(f"     checked as {c.expr}")
        if c.recomputed is not None:
            out.append(f"     recomputed {_fmt_iv(c.recomputed)} {c.unit}".rstrip())
        for n in c.notes:
            out.append(f"     note: {n}")
        for a in c.assumptions:
            out.append(f"     assumes: {a}")
        if c.verdict == "discrepancy":
            if c.readings:
                out.append(f"     readings that would give {_stated_text(c)}:")
                for r in c.readings:
                    tag = "" if r.match == "exact" else "  (within input rounding)"
                    out.append(f"       - {r.text} = {fmt_num(r.value)} {r.unit}{tag}")
            else:
                out.append("     no reading of the related figures gives the stated value")
            if c.unrelated_matches:
                out.append(
                    f"     ({c.unrelated_matches} further matches use unrelated figures: likely coincidences)"
                )
    for sz in ledger.sizing:
        out.append("")
        out.append(f"SIZING {sz['id']}: {sz['description']}")
        out.append(f"  model {sz['model']}; stated {sz['stated']}")
        units = sz["units"]
        out.append("  " + f"{'tokens':<58} {'layers':<38} " + " ".join(f"{u:>10}" for u in units) + "  fits")
        for r in sz["rows"]:
            vals = " ".join(f"{fmt_num(r[u], 1):>10}" for u in units)
            fits = ", ".join(r["fits"]) or "-"
            out.append(f"  {r['tokens']:<58} {r['layers']:<38} {vals}  {fits}")
        for n in sz["notes"]:
            out.append(f"  note: {n}")
        if sz["readings_that_fit"]:
            out.append(f"  => {sz['stated']} fits only as: " + "; ".join(sz["readings_that_fit"]))
        else:
            out.append(f"  => no reading fits {sz['stated']}")
    for b in ledger.bounds:
        out.append("")
        out.append(f"BOUND {b['id']}: {b['description']}")
        if b["kind"] == "prefill_scaling":
            out.append(f"  basis: {b['basis']}")
            fit = b["fit"]
            out.append(
                f"  t(n) = a*n + c*n^2 through both points: a = {fit['a_s_per_token']:.3e} s/token, "
                f"c = {fit['c_s_per_token2']:.3e} s/token^2"
            )
        out.append("  assumptions:")
        for a in b["assumptions"]:
            out.append(f"    - {a}")
        if b["kind"] == "cold_reuse":
            out.append("  shared prefix f   speedup (linear)   speedup (quadratic)")
            for row in b["table"]:
                out.append(
                    f"  {row['shared_fraction']:>15.0%}   {row['linear']:>15.1f}x   "
                    f"{row['quadratic']:>18.1f}x"
                )
        out.append(f"  => {b['verdict']}")
        out.append(f"  note: {b['note']}")
    out.append("")
    out.append("ASSUMPTIONS")
    for a in ledger.assumptions:
        out.append(f"  - {a}")
    return "\n".join(out)
