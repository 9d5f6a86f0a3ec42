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
      - {id: scaling, kind: prefill_scaling,        # uncached TTFT at two lengths
         short_tokens: n_short, short_time: ttft_short, long_tokens: n_long, long_time: ttft_long}
      - id: gpu-time                     # serial_prefill: a recompute run's GPU time from
        kind: serial_prefill             # t(n) = a*n + c*n^2 fitted to the two TTFT points
        short_tokens: n_short            # (same four fields as prefill_scaling)
        short_time: ttft_short
        long_tokens: n_long
        long_time: ttft_long
        tokens: tokens_total             # mean length = tokens / requests
        requests: requests_total
        total: total_baseline            # the published total the GPU time is held against
        prompts: prompts_distinct        # optional: the cold_reuse f that would reconcile it
        claim: throughput-speedup        # optional: speedup the reconciliation is compared with
        gpus: gpus_used                  # optional (default 1); gpus_available: optional
        cold_total: total_cached         # optional: a cold-cache run computing each prompt once
      - id: noise                        # bandwidth_headroom: competing traffic + the run's
        kind: bandwidth_headroom         # own rate against each bandwidth, with headroom
        noise: noise_bandwidth
        noise_sources: noise_clients     # optional
        demand: [kv_read_rate]           # rate figures; and/or sizing + duration: the
        sizing: ws                       # fitting readings of a sizing check / duration
        duration: total_cached
        rate_before: rate_cached         # optional pair: throughput without / with the noise
        rate_after: rate_noisy
        capacities:                      # noise: does the competing traffic cross it?
          - {figure: storage_read_bw, noise: true}
          - {figure: client_net_bw, noise: false}

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


class Capacity(_Strict):
    figure: str = Field(description="figure: a bandwidth the run's traffic passes through")
    noise: bool = Field(
        True, description="the competing traffic passes through it too (False: only the run's own traffic)"
    )
    description: str = Field("", description="the resource in words")


BoundKind = Literal["cold_reuse", "prefill_scaling", "serial_prefill", "bandwidth_headroom"]

# figure references each kind needs / may use (list-valued references are checked separately)
_BOUND_REFS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "cold_reuse": (("requests", "prompts"), ()),
    "prefill_scaling": (("short_tokens", "short_time", "long_tokens", "long_time"), ()),
    "serial_prefill": (
        ("short_tokens", "short_time", "long_tokens", "long_time", "tokens", "requests", "total"),
        ("prompts", "gpus", "gpus_available", "cold_total"),
    ),
    "bandwidth_headroom": (("noise",), ("noise_sources", "duration", "rate_before", "rate_after")),
}


class Bound(_Strict):
    id: str
    kind: BoundKind = "cold_reuse"
    description: str = ""
    # cold_reuse (requests, prompts also serial_prefill)
    requests: str | None = Field(None, description="cold_reuse, serial_prefill: figure, number of requests")
    prompts: str | None = Field(
        None, description="cold_reuse, serial_prefill (optional): figure, number of distinct prompts"
    )
    claim: str | None = Field(
        None,
        description="cold_reuse: claim whose stated speedup is tested; "
        "serial_prefill (optional): speedup claim a reconciliation is held against",
    )
    stated: float | None = Field(None, description="cold_reuse: speedup to test when no claim is named")
    # prefill_scaling (also serial_prefill: the two uncached TTFT points the prefill model is fitted to)
    short_tokens: str | None = Field(None, description="prefill_scaling: figure, short prompt length")
    short_time: str | None = Field(None, description="prefill_scaling: figure, uncached TTFT at short length")
    long_tokens: str | None = Field(None, description="prefill_scaling: figure, long prompt length")
    long_time: str | None = Field(None, description="prefill_scaling: figure, uncached TTFT at long length")
    # serial_prefill: a recompute run's GPU time from the fitted prefill t(n) = a*n + c*n^2
    tokens: str | None = Field(None, description="serial_prefill: figure, prompt tokens of the whole run")
    total: str | None = Field(None, description="serial_prefill: figure, published total time of the run")
    gpus: str | None = Field(None, description="serial_prefill (optional): figure, GPUs the run used (1)")
    gpus_available: str | None = Field(
        None, description="serial_prefill (optional): figure, GPUs the node had"
    )
    cold_total: str | None = Field(
        None,
        description="serial_prefill (optional): figure, total time of a cold-cache run that computes "
        "each distinct prompt once",
    )
    # bandwidth_headroom: competing traffic plus the run's own transfer rate against capacities
    noise: str | None = Field(None, description="bandwidth_headroom: figure, competing traffic rate")
    noise_sources: str | None = Field(
        None, description="bandwidth_headroom (optional): figure, clients generating the competing traffic"
    )
    demand: list[str] = Field(
        default_factory=list, description="bandwidth_headroom: figures, the run's own transfer rate(s)"
    )
    sizing: str | None = Field(
        None,
        description="bandwidth_headroom (optional): sizing check whose fitting readings give more "
        "transfer rates (bytes / duration)",
    )
    duration: str | None = Field(
        None, description="bandwidth_headroom: figure, the run time the sizing readings are spread over"
    )
    capacities: list[Capacity] = Field(
        default_factory=list, description="bandwidth_headroom: the bandwidths to check"
    )
    rate_before: str | None = Field(
        None, description="bandwidth_headroom (optional): figure, throughput without the competing traffic"
    )
    rate_after: str | None = Field(
        None, description="bandwidth_headroom (optional): figure, throughput with the competing traffic"
    )

    def refs(self) -> list[str]:
        """Figure references this kind requires."""
        return list(_BOUND_REFS[self.kind][0])

    def optional_refs(self) -> list[str]:
        return list(_BOUND_REFS[self.kind][1])


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
    compare: list[Any] = Field(
        default_factory=list,
        description="measured-vs-published entries for run reports; validated by kvbench.report.published",
    )

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
        for key in b.optional_refs():
            ref = getattr(b, key)
            if ref is not None and ref not in seen:
                problems.append(f"bounds[{i}].{key}: unknown figure '{ref}'")
        if b.kind == "cold_reuse" and b.claim is None and b.stated is None:
            problems.append(f"bounds[{i}]: give `claim` or `stated`")
        if b.kind == "bandwidth_headroom":
            for j, ref in enumerate(b.demand):
                if ref not in seen:
                    problems.append(f"bounds[{i}].demand[{j}]: unknown figure '{ref}'")
            for j, cap in enumerate(b.capacities):
                if cap.figure not in seen:
                    problems.append(f"bounds[{i}].capacities[{j}].figure: unknown figure '{cap.figure}'")
            if not b.capacities:
                problems.append(f"bounds[{i}].capacities: required for kind {b.kind}")
            if not b.demand and b.sizing is None:
                problems.append(f"bounds[{i}]: give `demand` or `sizing` (the run's own transfer rate)")
            if b.sizing is not None:
                if b.sizing not in {s.id for s in cf.sizing}:
                    problems.append(f"bounds[{i}].sizing: unknown sizing check '{b.sizing}'")
                if b.duration is None:
                    problems.append(f"bounds[{i}].duration: required with `sizing`")
            if (b.rate_before is None) != (b.rate_after is None):
                problems.append(f"bounds[{i}]: give both `rate_before` and `rate_after`, or neither")
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


def _bound_value(figs: dict[str, FigureValue], b: Bound, ref: str | None) -> tuple[float, FigureValue]:
    """A bound's figure in base units (s, B, B/s, counts), with the figure it came from."""
    assert ref is not None
    fv = figs[ref]
    if fv.interval is None:
        raise UsageError(f"bounds {b.id}: figure '{ref}' has no value")
    return fv.interval.mid * parse_unit(fv.unit).factor, fv


def _basis(used: list[FigureValue]) -> str:
    """'published', or which of the figures a bound uses kvbench derived or solved for."""
    other = [f for f in used if f.kind != "published"]
    if not other:
        return "published"
    return "uses " + ", ".join(
        f"{f.id} ({f.kind}{' by ' + f.implied_by if f.implied_by else ''})" for f in other
    )


def fit_prefill(n1: float, t1: float, n2: float, t2: float) -> tuple[float, float]:
    """(a, c) of prefill time t(n) = a*n + c*n^2 through the points (n1, t1) and (n2, t2)."""
    det = n1 * n2**2 - n2 * n1**2
    return (t1 * n2**2 - t2 * n1**2) / det, (n1 * t2 - n2 * t1) / det


def suffix_time(a: float, c: float, n: float, shared: float) -> float:
    """Prefill time of the last (1-f)*n tokens of an n-token prompt whose first f*n are cached.

    The cold_reuse cost model with both terms: a*(1-f)*n + c*(1-f^2)*n^2 (the suffix
    still attends over the cached prefix).
    """
    return a * (1.0 - shared) * n + c * (1.0 - shared**2) * n * n


def shared_fraction_for_suffix(a: float, c: float, n: float, target: float) -> float | None:
    """The f at which suffix_time(a, c, n, f) equals `target` (0 if no sharing is needed; None: never)."""
    full = suffix_time(a, c, n, 0.0)
    if target >= full:
        return 0.0
    if target <= 0.0:
        return None
    # x = 1 - f:  c n^2 x (2 - x) + a n x = target  ->  c n^2 x^2 - (a n + 2 c n^2) x + target = 0
    qa, qb = c * n * n, a * n + 2.0 * c * n * n
    if abs(qa) < 1e-300:
        return 1.0 - target / qb
    return 1.0 - (qb - math.sqrt(qb * qb - 4.0 * qa * target)) / (2.0 * qa)


def _prefill_scaling(figs: dict[str, FigureValue], b: Bound) -> dict[str, Any]:
    n1, _ = _bound_value(figs, b, b.short_tokens)
    t1, f1 = _bound_value(figs, b, b.short_time)
    n2, _ = _bound_value(figs, b, b.long_tokens)
    t2, f2 = _bound_value(figs, b, b.long_time)
    a, c = fit_prefill(n1, t1, n2, t2)
    linear_pred = t2 * n1 / n2
    quad_pred = t2 * (n1 / n2) ** 2
    basis = _basis([f1, f2])
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


def _serial_prefill(figs: dict[str, FigureValue], b: Bound, claims: list[ClaimResult]) -> dict[str, Any]:
    """A recompute run's GPU time from the uncached TTFT: is its published total reachable?"""
    n1, fn1 = _bound_value(figs, b, b.short_tokens)
    t1, ft1 = _bound_value(figs, b, b.short_time)
    n2, fn2 = _bound_value(figs, b, b.long_tokens)
    t2, ft2 = _bound_value(figs, b, b.long_time)
    tokens, ftok = _bound_value(figs, b, b.tokens)
    requests, freq = _bound_value(figs, b, b.requests)
    total, ftot = _bound_value(figs, b, b.total)
    gpus = _bound_value(figs, b, b.gpus)[0] if b.gpus else 1.0
    a, c = fit_prefill(n1, t1, n2, t2)
    n = tokens / requests
    t_n = a * n + c * n * n
    serial = requests * t_n
    gpu_time = serial / gpus
    gain = gpu_time / total
    per_gpu = "" if gpus == 1 else f" per GPU ({fmt_num(gpus)} GPUs)"
    inside = min(n1, n2) <= n <= max(n1, n2)
    assumptions = [
        "a single uncached request's TTFT is compute-bound prefill that already saturates the GPU, so "
        "batching concurrent prefills on it gains little; its time is t(n) = a*n + c*n^2, fitted through "
        f"({fmt_num(n1)} tokens, {fmt_num(t1)} s) and ({fmt_num(n2)} tokens, {fmt_num(t2)} s)",
        "the TTFT test and the recompute run used the same server, model and settings"
        + ("" if gpus == 1 else f"; the run's work is spread evenly over its {fmt_num(gpus)} GPUs"),
        f"every request is {fmt_num(n)} tokens long ({b.tokens} / {b.requests}); t(n) is convex, so unequal "
        "lengths with the same total would take longer: the GPU time is a lower bound",
        "the recompute run caches nothing: every request is prefilled in full; decode, queueing and "
        "transfer time are ignored (they would only add to the GPU time)",
    ]
    if not inside:
        assumptions.append(
            f"{fmt_num(n)} tokens lies outside the fitted range [{fmt_num(min(n1, n2))}, "
            f"{fmt_num(max(n1, n2))}]: the fit is extrapolated"
        )
    reconcile: list[dict[str, Any]] = []
    reconcile.append(
        {
            "how": "batching",
            "text": f"batching concurrent prefills gains {gain:.2f}x over serial prefill{per_gpu} "
            "(contradicts the assumption that one prefill saturates the GPU)",
            "gain": gain,
        }
    )
    # shared prefixes kept in G1 during the recompute run, the cold_reuse model's f
    target_suffix = (total * gpus - t_n) / (requests - 1.0) if requests > 1 else total * gpus - t_n
    f_fit = shared_fraction_for_suffix(a, c, n, target_suffix)
    f_lin = shared_fraction_for_suffix(t_n / n, 0.0, n, target_suffix)
    f_quad = shared_fraction_for_suffix(0.0, t_n / (n * n), n, target_suffix)
    shared: dict[str, Any] = {
        "how": "shared_prefix",
        "shared_fraction": {"fit": f_fit, "linear": f_lin, "quadratic": f_quad},
    }
    if f_fit is None:
        shared["text"] = "no shared prefix suffices: even the first request alone exceeds the total"
    else:
        shared["text"] = (
            f"every prompt shares a prefix of >= {f_fit:.1%} of its tokens with all others "
            f"({f_lin:.1%} linear to {f_quad:.1%} quadratic cost), kept in GPU memory (G1) and reused "
            "by the recompute run"
        )
        if b.prompts is not None:
            prompts, _ = _bound_value(figs, b, b.prompts)
            s = suffix_time(a, c, n, f_fit)
            work_cached = t_n + (prompts - 1.0) * s
            cap = (t_n + (requests - 1.0) * s) / work_cached
            shared["cached_speedup_cap"] = cap
            vs = ""
            if b.claim is not None:
                stated = next(cl.stated for cl in claims if cl.id == b.claim)
                shared["claim"], shared["claim_stated"] = b.claim, stated
                vs = f", not the {fmt_num(stated)}x of {b.claim}"
            shared["text"] += (
                f"; but then a cold cache reusing whole prompts ({fmt_num(requests / prompts)} uses each, "
                f"the same f) beats that baseline by at most {cap:.2f}x{vs}"
            )
    reconcile.append(shared)
    gpus_needed = math.ceil(serial / total - 1e-9)
    gpu_row: dict[str, Any] = {
        "how": "gpus",
        "gpus_needed": gpus_needed,
        "text": f">= {gpus_needed} such GPUs working in parallel (serial {fmt_num(serial)} s / "
        f"{fmt_num(total)} s = {serial / total:.2f}), where the publication says {fmt_num(gpus)}",
    }
    if b.gpus_available is not None:
        avail, _ = _bound_value(figs, b, b.gpus_available)
        gpu_row["gpus_available"] = avail
        gpu_row["time_on_available_s"] = serial / avail
        gpu_row["text"] += (
            f"; all {fmt_num(avail)} GPUs of the node would still take {fmt_num(serial / avail)} s"
            if serial / avail > total
            else f"; the node's {fmt_num(avail)} GPUs would reach it ({fmt_num(serial / avail)} s)"
        )
    reconcile.append(gpu_row)
    reconcile.append(
        {
            "how": "faster_prefill",
            "text": f"a model or settings whose prefill is {gain:.2f}x faster than in the TTFT test "
            f"(t({fmt_num(n)}) <= {fmt_num(t_n / gain)} s instead of {fmt_num(t_n)} s)",
        }
    )
    out: dict[str, Any] = {
        "id": b.id,
        "kind": b.kind,
        "description": b.description,
        "basis": _basis([fn1, ft1, fn2, ft2, ftok, freq, ftot]),
        "points": [[n1, t1], [n2, t2]],
        "fit": {"a_s_per_token": a, "c_s_per_token2": c},
        "mean_tokens": n,
        "prefill_time_mean_s": t_n,
        "requests": requests,
        "gpus": gpus,
        "serial_gpu_time_s": serial,
        "gpu_time_s": gpu_time,
        "published_total_s": total,
        "needed_gain": gain,
        "reconcile": reconcile,
        "assumptions": assumptions,
        "note": "a two-point fit; the 30,000-token point may itself be implied, see the basis",
    }
    if gain > 1.0:
        alts = [f"batching gains {gain:.1f}x on a GPU that one prefill already saturates"]
        if f_fit is not None:
            cap_txt = ""
            if "cached_speedup_cap" in shared:
                cap_txt = (
                    f" (then a cold cache beats that baseline by at most {shared['cached_speedup_cap']:.2f}x"
                )
                cap_txt += f", not {fmt_num(shared['claim_stated'])}x)" if "claim_stated" in shared else ")"
            alts.append(f"prompts share >= {f_fit:.1%} as a prefix cached in G1{cap_txt}")
        node = f" (the node has {fmt_num(gpu_row['gpus_available'])})" if "gpus_available" in gpu_row else ""
        alts.append(f"it ran on >= {gpus_needed} GPUs{node} or a {gain:.1f}x faster model/setting")
        out["verdict"] = (
            f"inconsistent unless {', or '.join(alts)}: {fmt_num(requests)} x t({fmt_num(n)}) = "
            f"{fmt_num(requests)} x {fmt_num(t_n)} s = {fmt_num(gpu_time)} s of serial prefill{per_gpu}, "
            f"{gain:.2f}x the published {fmt_num(total)} s"
        )
    else:
        out["verdict"] = (
            f"consistent: {fmt_num(gpu_time)} s of serial prefill{per_gpu} fits in the published "
            f"{fmt_num(total)} s ({gain:.2f} of it)"
        )
    if b.cold_total is not None:
        cold, _ = _bound_value(figs, b, b.cold_total)
        if b.prompts is not None:
            prompts, _ = _bound_value(figs, b, b.prompts)
            first_uses = prompts * t_n / gpus
            out["cold_run"] = {
                "first_uses_gpu_time_s": first_uses,
                "published_total_s": cold,
                "needed_gain": first_uses / cold,
            }
            out["cold_run_text"] = (
                f"a cold-cache run ({b.cold_total} = {fmt_num(cold)} s) must still prefill each of the "
                f"{fmt_num(prompts)} prompts once: {fmt_num(prompts)} x {fmt_num(t_n)} s = "
                f"{fmt_num(first_uses)} s{per_gpu}, {first_uses / cold:.1f}x its total, unless prompts "
                "share prefixes (see the cold_reuse bound)"
            )
    return out


def _bandwidth_headroom(
    figs: dict[str, FigureValue], b: Bound, sizing: list[dict[str, Any]]
) -> dict[str, Any]:
    """Competing traffic plus the run's own transfer rate against each bandwidth it crosses."""
    noise, fnoise = _bound_value(figs, b, b.noise)
    rate_dims = parse_unit(fnoise.unit).dims
    show = parse_unit(figs[b.capacities[0].figure].unit)  # print rates in the first capacity's unit

    def gbs(x: float) -> str:
        return f"{fmt_num(x / show.factor, 1)} {show.text}"

    def same_dims(fv: FigureValue, role: str) -> None:
        if parse_unit(fv.unit).dims != rate_dims:
            raise UsageError(
                f"bounds {b.id}: {role} '{fv.id}' ({fv.unit}) is not a rate like {b.noise} ({fnoise.unit})"
            )

    demands: list[dict[str, Any]] = []
    used = [fnoise]
    for ref in b.demand:
        v, fv = _bound_value(figs, b, ref)
        same_dims(fv, "demand")
        used.append(fv)
        demands.append(
            {"source": ref, "text": f"{ref} ({fv.kind}{' = ' + fv.expr if fv.expr else ''})", "rate": v}
        )
    if b.sizing is not None:
        duration, fdur = _bound_value(figs, b, b.duration)
        sz = next(x for x in sizing if x["id"] == b.sizing)
        seen_bytes: set[float] = set()
        for srow in sz["rows"]:
            if not srow["fits"] or round(srow["bytes"]) in seen_bytes:
                continue
            seen_bytes.add(round(srow["bytes"]))
            demands.append(
                {
                    "source": f"sizing {b.sizing}",
                    "text": f"sizing {b.sizing}: {srow['tokens'].split(':')[0]} x {srow['layers']} "
                    f"= {fmt_num(srow['bytes'] / 1e9, 1)} GB, over {b.duration} "
                    f"({fmt_num(duration / parse_unit(fdur.unit).factor)} {fdur.unit})",
                    "rate": srow["bytes"] / duration,
                }
            )
    if not demands:
        raise UsageError(
            f"bounds {b.id}: no transfer rate to check (the sizing check has no fitting reading)"
        )
    demand = max(d["rate"] for d in demands)
    per_source = None
    if b.noise_sources is not None:
        sources, _ = _bound_value(figs, b, b.noise_sources)
        per_source = noise / sources
    keep = None  # throughput kept under the competing traffic (fraction)
    if b.rate_before is not None and b.rate_after is not None:
        before, fb = _bound_value(figs, b, b.rate_before)
        after, fa = _bound_value(figs, b, b.rate_after)
        used += [fb, fa]
        keep = after / before
    rows: list[dict[str, Any]] = []
    for cap in b.capacities:
        capacity, fcap = _bound_value(figs, b, cap.figure)
        same_dims(fcap, "capacity")
        used.append(fcap)
        shared = noise if cap.noise else 0.0
        load = demand + shared
        row: dict[str, Any] = {
            "figure": cap.figure,
            "description": cap.description or fcap.description,
            "capacity": capacity,
            "noise_shares": cap.noise,
            "load": load,
            "utilisation": load / capacity,
            "headroom": capacity - load,
            "fits": load <= capacity,
            # how many times the average rate the run's own traffic could burst to before saturating
            "burst_factor_to_saturate": (capacity - shared) / demand if capacity > shared else 0.0,
            "load_if_noise_shared": demand + noise,
        }
        if per_source is not None:
            row["noise_per_source_fits"] = per_source <= capacity
        if keep is not None:
            # saturation explains the drop only if the capacity left to the run is what it got under noise
            row["capacity_to_explain_drop"] = shared + demand * keep
        rows.append(row)
    fits = all(r["fits"] for r in rows)
    assumptions = [
        f"the run's own traffic moves at its average rate over the run: the largest reading, {gbs(demand)}; "
        "bursts are higher (see the burst factor)",
        f"the competing {gbs(noise)} is counted against a resource only where it passes through it: "
        + "; ".join(
            f"{r['figure']}: {'yes' if r['noise_shares'] else 'no (only the run itself)'}" for r in rows
        ),
        "bandwidths are the published maxima and add linearly; protocol overhead, erasure-coding "
        "traffic and writes of the cache fill are ignored",
    ]
    if per_source is not None:
        assumptions.append(
            f"the competing traffic is spread evenly over its {fmt_num(noise / per_source)} sources: "
            f"{gbs(per_source)} each"
        )
    out: dict[str, Any] = {
        "id": b.id,
        "kind": b.kind,
        "description": b.description,
        "basis": _basis(used),
        "unit": show.text,
        "noise": noise,
        "noise_per_source": per_source,
        "demand_readings": demands,
        "demand": demand,
        "rows": rows,
        "fits": fits,
        "throughput_drop": None if keep is None else 1.0 - keep,
        "assumptions": assumptions,
        "note": "average rates over a run; a bound from totals, not a measurement of the fabric",
    }
    parts = "; ".join(
        f"{r['figure']} {gbs(r['load'])} of {gbs(r['capacity'])} ({r['utilisation']:.0%}, "
        f"{gbs(r['headroom'])} {'headroom' if r['fits'] else 'OVER'})"
        for r in rows
    )
    drop = "" if keep is None else f" the {1.0 - keep:.1%} throughput drop"
    if fits:
        explain = ""
        if keep is not None:
            need = "; ".join(
                f"{r['figure']} to deliver only {gbs(r['capacity_to_explain_drop'])} "
                f"of its {gbs(r['capacity'])}"
                for r in rows
                if r["noise_shares"]
            )
            spared = [r["figure"] for r in rows if not r["noise_shares"]]
            explain = f" (saturation would need {need or 'a resource the competing traffic crosses'}"
            explain += f"; {', '.join(spared)} carries none of the competing traffic)" if spared else ")"
        out["verdict"] = (
            f"the totals fit: {parts}. Bandwidth saturation alone cannot explain{drop or ' a slowdown'}"
            f"{explain}: it points at contention elsewhere (switch buffers and queueing, added latency "
            "per block read, storage-server CPU) or at bursts well above the average rate"
        )
    else:
        over = ", ".join(r["figure"] for r in rows if not r["fits"])
        out["verdict"] = f"over capacity in {over}: {parts}. Saturation can explain{drop or ' a slowdown'}"
    return out


def _bound(
    cf: ClaimsFile,
    figs: dict[str, FigureValue],
    b: Bound,
    claims: list[ClaimResult],
    sizing: list[dict[str, Any]],
) -> dict[str, Any]:
    if b.kind == "prefill_scaling":
        return _prefill_scaling(figs, b)
    if b.kind == "serial_prefill":
        return _serial_prefill(figs, b, claims)
    if b.kind == "bandwidth_headroom":
        return _bandwidth_headroom(figs, b, sizing)
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
    bounds = [_bound(cf, figs, b, claims, sizing) for b in cf.bounds]
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


def _serial_prefill_lines(b: dict[str, Any]) -> list[str]:
    n, t = b["mean_tokens"], b["prefill_time_mean_s"]
    gpus = "1 GPU" if b["gpus"] == 1 else f"{fmt_num(b['gpus'])} GPUs"
    out = [
        f"  mean request {fmt_num(n)} tokens: t({fmt_num(n)}) = {fmt_num(t)} s",
        f"  serial GPU prefill of the run: {fmt_num(b['requests'])} x {fmt_num(t)} s = "
        f"{fmt_num(b['serial_gpu_time_s'])} s; on {gpus}: {fmt_num(b['gpu_time_s'])} s "
        f"against the published {fmt_num(b['published_total_s'])} s",
        f"  concurrency gain the run needs from batching prefills: {b['needed_gain']:.2f}x",
        "  what would reconcile it:",
    ]
    out += [f"    - {r['text']}" for r in b["reconcile"]]
    if "cold_run_text" in b:
        out.append(f"  also: {b['cold_run_text']}")
    return out


def _bandwidth_lines(b: dict[str, Any]) -> list[str]:
    u = b["unit"]
    k = parse_unit(u).factor

    def r(x: float) -> str:
        return fmt_num(x / k, 1)

    out = ["  the run's own transfer rate (the largest reading is used):"]
    out += [f"    - {d['text']}: {r(d['rate'])} {u}" for d in b["demand_readings"]]
    noise = f"  competing traffic: {r(b['noise'])} {u}"
    if b["noise_per_source"] is not None:
        noise += (
            f" ({r(b['noise_per_source'])} {u} from each of {fmt_num(b['noise'] / b['noise_per_source'])})"
        )
    out.append(noise)
    drop = b["throughput_drop"] is not None
    head = f"  {'bandwidth':<16} {'capacity':>9} {'noise?':>6} {'load':>9} {'use':>5} {'headroom':>9}"
    head += f" {'burst x':>8}"
    if drop:
        head += f" {'saturates at':>13}"
    out.append(head + f"   ({u}; burst x: run traffic over its average before saturating)")
    for row in b["rows"]:
        line = (
            f"  {row['figure']:<16} {r(row['capacity']):>9} {'yes' if row['noise_shares'] else 'no':>6} "
            f"{r(row['load']):>9} {row['utilisation']:>5.0%} {r(row['headroom']):>9} "
            f"{row['burst_factor_to_saturate']:>7.1f}x"
        )
        if drop:
            line += f" {r(row['capacity_to_explain_drop']):>13}"
        out.append(line)
    for row in b["rows"]:
        if not row["noise_shares"]:
            over = row["load_if_noise_shared"] > row["capacity"]
            out.append(
                f"  if the competing traffic did cross {row['figure']}: {r(row['load_if_noise_shared'])} "
                f"of {r(row['capacity'])} {u}: {'over capacity' if over else 'fits'}"
                + (
                    f"; each noise source ({r(b['noise_per_source'])} {u}) "
                    f"{'fits' if row['noise_per_source_fits'] else 'exceeds'} one such link"
                    if "noise_per_source_fits" in row
                    else ""
                )
            )
    if drop:
        out.append(
            f"  'saturates at': the capacity at which the {b['throughput_drop']:.1%} drop would be "
            "explained by saturation alone (the run's share falling to its rate under the competing traffic)"
        )
    return out


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
        if b["kind"] in ("prefill_scaling", "serial_prefill", "bandwidth_headroom"):
            out.append(f"  basis: {b['basis']}")
        if b["kind"] in ("prefill_scaling", "serial_prefill"):
            fit = b["fit"]
            out.append(
                f"  t(n) = a*n + c*n^2 through both points: a = {fit['a_s_per_token']:.3e} s/token, "
                f"c = {fit['c_s_per_token2']:.3e} s/token^2"
            )
        out.append("  assumptions:")
        for a in b["assumptions"]:
            out.append(f"    - {a}")
        if b["kind"] == "serial_prefill":
            out.extend(_serial_prefill_lines(b))
        if b["kind"] == "bandwidth_headroom":
            out.extend(_bandwidth_lines(b))
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
