"""The claims file as strict pydantic models (the shape; `reader.py` reads and validates files).

What the models refuse is a file error (exit 2): unknown keys, NaN/inf numbers, absurd
decimals, a yes/no where a number is meant (`value: yes` would otherwise be read as 1), an
unknown bound kind. The schema is documented in `kvbench/audit/__init__.py`.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kvbench.audit.bound_fields import BOUND_FIELDS
from kvbench.audit.expr import FUNCTIONS

SCHEMA = "kvbench-claims/1"
_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CLAIM_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
FROM_MODEL = (
    "bytes_per_token_full_only",
    "bytes_per_token_all_layers",
    "bytes_per_token_per_layer",
    "context_length",
    "num_layers",
    "sliding_window",
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _finite(v: float | None) -> float | None:
    if v is not None and not math.isfinite(v):
        raise ValueError("must be a finite number (not NaN or infinity)")
    return v


def _no_bool(v: Any) -> Any:
    """YAML reads yes/no/true/false as booleans, which pydantic would take as 1 and 0; a quoted
    number would lose how it is written (its default decimals): both are refused."""
    if isinstance(v, bool):
        raise ValueError(f"a number is meant, not the yes/no value {str(v).lower()}")
    if isinstance(v, str):
        # every unquoted number form (2.4e9 included) is read as a number, so text that is a
        # number was quoted; other text (2,400 or 24M) is not a number at all
        try:
            float(v.replace("_", ""))
        except ValueError:
            raise ValueError(f"a number is meant, not the text {v[:20]!r} (write digits only)") from None
        raise ValueError(f"a number is meant, not the text {v[:20]!r} (write it without quotes)")
    return v


class Source(_Strict):
    title: str = Field(description="title of the publication")
    date: str | None = Field(None, description="publication date as printed")
    url: str | None = Field(None, description="where to read it")


class ModelSpec(_Strict):
    geometry: str | dict[str, Any] = Field(
        description="kvbench preset, config.json path (relative to the claims file), or KVGeometry fields"
    )
    note: str | None = Field(None, description="free text")


class Figure(_Strict):
    id: str = Field(description="identifier used in expressions")
    value: float | None = Field(None, description="the value as published; null = not published")
    expr: str | None = Field(None, description="derived figure: expression over other figures")
    from_model: str | None = Field(None, description="figure computed from the model geometry")
    unit: str = Field("", description="unit, e.g. s, GB, req/s, B/token")
    decimals: int | None = Field(
        None, ge=-15, le=15, description="decimals as printed (negative: 10s...); default: as written"
    )
    source: str | None = Field(None, description="key into sources")
    label: str | None = Field(
        None, description="short human name used in readings (default: from description)"
    )
    description: str = Field("", description="what the figure is")
    test: str | list[str] | None = Field(None, description="tag(s) grouping related figures")

    @field_validator("value", "decimals", mode="before")
    @classmethod
    def _not_bool(cls, v: Any) -> Any:
        return _no_bool(v)

    @field_validator("value")
    @classmethod
    def _value_ok(cls, v: float | None) -> float | None:
        return _finite(v)

    @field_validator("id")
    @classmethod
    def _id_ok(cls, v: str) -> str:
        if not _ID.match(v):
            raise ValueError(f"'{v}' is not a valid figure id (letters, digits, _)")
        if v in FUNCTIONS:
            raise ValueError(f"'{v}' is a function name; choose another figure id")
        return v

    @field_validator("from_model")
    @classmethod
    def _from_model_ok(cls, v: str | None) -> str | None:
        if v is not None and v not in FROM_MODEL:
            raise ValueError(f"unknown '{v}' (known: {', '.join(FROM_MODEL)})")
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
    decimals: int | None = Field(
        None, ge=-15, le=15, description="decimals as printed; default: as the stated value is written"
    )
    source: str | None = Field(None, description="key into sources")
    description: str = Field("", description="the claim in words")
    assumptions: list[str] = Field(default_factory=list, description="assumptions this check makes")

    @field_validator("stated", "decimals", mode="before")
    @classmethod
    def _not_bool(cls, v: Any) -> Any:
        return _no_bool(v)

    @field_validator("stated")
    @classmethod
    def _stated_ok(cls, v: float | None) -> float | None:
        return _finite(v)

    @field_validator("id")
    @classmethod
    def _id_ok(cls, v: str) -> str:
        if not _CLAIM_ID.match(v):
            raise ValueError(f"'{v}' is not a valid claim id")
        return v


class SizingCheck(_Strict):
    id: str = Field(description="identifier")
    description: str = Field("", description="the question in words")
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


class Bound(_Strict):
    """A model-based limit; `kind` picks the module in `kvbench.audit.bounds` that computes it."""

    id: str = Field(description="identifier")
    kind: str = Field("cold_reuse", description=f"one of {', '.join(BOUND_FIELDS)}")
    description: str = Field("", description="the question in words")
    requests: str | None = Field(None, description="figure: number of requests")
    prompts: str | None = Field(None, description="figure: number of distinct prompts")
    claim: str | None = Field(None, description="claim whose stated speedup is tested")
    stated: float | None = Field(None, description="cold_reuse: speedup to test when no claim is named")
    short_tokens: str | None = Field(None, description="figure: short prompt length")
    short_time: str | None = Field(None, description="figure: uncached TTFT at the short length")
    long_tokens: str | None = Field(None, description="figure: long prompt length")
    long_time: str | None = Field(None, description="figure: uncached TTFT at the long length")
    tokens: str | None = Field(None, description="serial_prefill: figure, prompt tokens of the whole run")
    total: str | None = Field(None, description="serial_prefill: figure, published total time of the run")
    gpus: str | None = Field(None, description="serial_prefill: figure, GPUs the run used (1)")
    gpus_available: str | None = Field(None, description="serial_prefill: figure, GPUs the node had")
    cold_total: str | None = Field(
        None, description="serial_prefill: figure, total time of a cold-cache run computing each prompt once"
    )
    noise: str | None = Field(None, description="bandwidth_headroom: figure, competing traffic rate")
    noise_sources: str | None = Field(None, description="bandwidth_headroom: figure, competing clients")
    demand: list[str] = Field(default_factory=list, description="bandwidth_headroom: the run's own rate(s)")
    sizing: str | None = Field(None, description="bandwidth_headroom: sizing check giving more rates")
    duration: str | None = Field(
        None, description="bandwidth_headroom: figure, run time for the sizing rates"
    )
    capacities: list[Capacity] = Field(default_factory=list, description="bandwidth_headroom: bandwidths")
    rate_before: str | None = Field(None, description="bandwidth_headroom: figure, throughput without noise")
    rate_after: str | None = Field(None, description="bandwidth_headroom: figure, throughput with noise")

    @field_validator("stated", mode="before")
    @classmethod
    def _not_bool(cls, v: Any) -> Any:
        return _no_bool(v)

    @field_validator("stated")
    @classmethod
    def _stated_ok(cls, v: float | None) -> float | None:
        return _finite(v)

    @field_validator("kind")
    @classmethod
    def _kind_ok(cls, v: str) -> str:
        if v not in BOUND_FIELDS:
            raise ValueError(f"unknown bound kind '{v}' (known: {', '.join(BOUND_FIELDS)})")
        return v

    def refs(self) -> dict[str, str]:
        """Figure fields this kind requires, with the dimension each needs."""
        return dict(BOUND_FIELDS[self.kind].required)

    def optional_refs(self) -> dict[str, str]:
        return dict(BOUND_FIELDS[self.kind].optional)


class ClaimsFile(_Strict):
    schema_: str = Field(SCHEMA, alias="schema", description="kvbench-claims/1")
    name: str = Field(description="short name of the dataset")
    title: str = Field("", description="title")
    sources: dict[str, Source] = Field(default_factory=dict, description="publications cited")
    model: ModelSpec | None = Field(None, description="the model whose KV geometry figures use")
    units: list[str] = Field(default_factory=list, description="extra counted things this file uses")
    figures: list[Figure] = Field(description="the numbers")
    claims: list[Claim] = Field(default_factory=list, description="statements to check")
    sizing: list[SizingCheck] = Field(default_factory=list, description="KV sizing checks")
    bounds: list[Bound] = Field(default_factory=list, description="model-based limits")
    compare: list[Any] | None = Field(
        None, description="measured-vs-published rows for run reports (read by kvbench.report, not here)"
    )
    base_dir: Path | None = Field(None, exclude=True, description="folder of the file (set by the loader)")
    source: str = Field("claims", exclude=True, description="the file's name in messages (set by the loader)")

    @field_validator("schema_")
    @classmethod
    def _schema_ok(cls, v: str) -> str:
        if v != SCHEMA:
            raise ValueError(f"unsupported schema '{v}' (expected {SCHEMA})")
        return v


__all__ = [
    "SCHEMA",
    "Bound",
    "Capacity",
    "Claim",
    "ClaimsFile",
    "Figure",
    "ModelSpec",
    "SizingCheck",
    "Source",
]
