"""The sections every scenario shares: target, prompts, output, cache, telemetry.

Strict models (unknown keys are errors: a typo must not silently fall back to a
default), frozen, every field described. Test-specific knobs live in scenario/tests.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator


def check_base_url(v: str) -> str:
    """A server root that a connection can be opened to, normalised (no trailing / or /v1).

    Checked at validation so that a typo is exit 2 naming the field, not exit 3 "cannot reach"."""
    if not re.match(r"^https?://[^\s/]+", v):
        raise ValueError("must start with http:// or https:// and name a host")
    try:
        parts = urlsplit(v)
        port = parts.port  # raises on a port that is not a number or out of range
    except ValueError as exc:
        raise ValueError(f"not a valid URL ({exc})") from None
    if not parts.hostname:
        raise ValueError("must name a host")
    if port == 0:
        raise ValueError("port must be between 1 and 65535")
    return v.rstrip("/").removesuffix("/v1")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=False)


def flag(name: str) -> dict[str, Any]:
    """Field metadata: the `kvbench run --NAME` option that sets this field (see scenario.flag_keys)."""
    return {"flag": name}


# --- target -----------------------------------------------------------------------------------------


class Timeouts(Strict):
    connect_s: float = Field(10.0, gt=0, description="TCP connect timeout, seconds.")
    first_token_s: float = Field(
        900.0, gt=0, description="Longest wait from sending a request to its first content token, seconds."
    )
    total_s: float = Field(3600.0, gt=0, description="Longest a whole request may take, seconds.")
    idle_s: float = Field(
        60.0, gt=0, description="Longest gap between response chunks once the first token came, seconds."
    )


def _known_engine(name: str) -> str:
    # checked against the adapter registry when validated, so an adapter registered later counts
    from kvbench.engines.adapters import engine_help, engine_names

    if name != "auto" and name not in engine_names():
        raise ValueError(f"unknown engine {name!r}; known: {engine_help()}")
    return name


Engine = Annotated[str, AfterValidator(_known_engine)]


class Target(Strict):
    base_url: str | None = Field(
        None,
        description="Server root, e.g. http://127.0.0.1:8000 (without /v1). Absent: kvbench starts its mock.",
        json_schema_extra=flag("base_url"),
    )
    model: str | None = Field(
        None,
        description="Model name to request. Absent: the first of GET /v1/models.",
        json_schema_extra=flag("model"),
    )
    api: Literal["completions", "chat"] = Field(
        "completions",
        description="completions = /v1/completions; chat = /v1/chat/completions.",
        json_schema_extra=flag("api"),
    )
    engine: Engine = Field(
        "auto",
        description="Server kind, used for cache reset and metrics. auto = detect.",
        json_schema_extra=flag("engine"),
    )
    api_key_env: str | None = Field(
        None,
        description="NAME of the environment variable holding the API key (never the key itself).",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        json_schema_extra=flag("api_key_env"),
    )
    timeouts: Timeouts = Field(default_factory=Timeouts, description="Client timeouts.")
    transport: Literal["auto", "http1", "aiohttp"] = Field(
        "auto",
        description="Timed-request transport: auto = kvbench's HTTP/1.1 for http://, aiohttp for https://.",
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="Extra HTTP headers sent with every request (values are redacted in results).",
    )
    mock_profile: str = Field(
        "ci",
        description="Mock profile used when base_url is absent (see `kvbench mock profiles`).",
        json_schema_extra=flag("mock_profile"),
    )
    mock_overrides: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        description="Embedded mock only: profile fields to override, e.g. {time_scale: 0.05}.",
    )
    max_model_len: int | None = Field(
        None, gt=0, description="Context length, when known; prompts longer than this are rejected up front."
    )

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        return None if v is None else check_base_url(v)


# --- prompts ----------------------------------------------------------------------------------------


class LengthRange(Strict):
    min: int = Field(..., gt=0, description="Shortest prompt, tokens.")
    max: int = Field(..., gt=0, description="Longest prompt, tokens.")
    distribution: Literal["uniform", "fixed_mean"] = Field(
        "uniform", description="uniform: seeded uniform draws in [min, max]; fixed_mean: evenly spaced."
    )

    @model_validator(mode="after")
    def _order(self) -> LengthRange:
        if self.min > self.max:
            raise ValueError("min must not exceed max")
        return self


class Reuse(Strict):
    hit_rate: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Share of each measured prompt's tokens that comes from a primed prefix (0..1); "
        "the rest is a fresh suffix that can never hit. Absent: prompts repeat whole (the plain cached "
        "phase).",
    )
    tolerance: float = Field(
        0.05,
        ge=0,
        le=1,
        description="Accepted |measured - expected| hit ratio (absolute) before a phase is flagged "
        "hit_rate_off.",
    )
    prime: bool = Field(
        True, description="Send each primed prefix once, unmeasured, before the measured phase."
    )


# kvbench.datasets.FORMATS names these (a test holds the two equal; that package sits above this one)
DatasetFormatName = Literal[
    "auto", "custom", "sharegpt", "random", "prefix_repetition", "single_turn", "multi_turn", "mooncake_trace"
]


class Prompts(Strict):
    count: int | None = Field(
        None,
        gt=0,
        description="Distinct prompts. Absent: one per entry of `lengths` (list form).",
        json_schema_extra=flag("prompt_count"),
    )
    lengths: list[Annotated[int, Field(gt=0)]] | LengthRange = Field(
        ...,
        description="Prompt lengths in tokens: a list (cycled over prompts) or a {min, max} range.",
        json_schema_extra=flag("lengths"),
    )
    shared_prefix_tokens: int = Field(
        0, ge=0, description="Tokens of a document shared by every prompt of the run (after the salt)."
    )
    seed: int = Field(0, description="Seed for prompt text and length draws.")
    salt: Literal["per_run", "per_request", "none"] = Field(
        "per_run",
        description=(
            "per_run: a random salt at the very start of every prompt, new each run, so nothing an earlier "
            "run cached can hit; per_request: every request unique (no reuse at all); none: replay exactly."
        ),
    )
    tolerance_tokens: int = Field(
        0,
        ge=0,
        description="Accepted |actual - requested| prompt length, tokens (chat adds template overhead).",
    )
    reuse: Reuse = Field(
        default_factory=Reuse, description="The hit-rate dial: a primed prefix share per measured prompt."
    )
    dataset: str | None = Field(
        None,
        min_length=1,
        description="A vLLM-bench or AIPerf dataset file whose requests replace `lengths` "
        "(kvbench.datasets); count, when set, takes its first `count` requests.",
        json_schema_extra=flag("dataset"),
    )
    dataset_format: DatasetFormatName = Field(
        "auto",
        description="The dataset's format; auto = detected from its first entry.",
        json_schema_extra=flag("dataset_format"),
    )
    over_context: Literal["fail", "skip", "clip"] = Field(
        "fail",
        description="A dataset request whose prompt and answer exceed the model's context: fail (one line "
        "naming its line), skip it, or clip a length-built prompt to fit (a text prompt is skipped); "
        "counted in manifest.prompts.context.",
    )

    @field_validator("lengths")
    @classmethod
    def _nonempty(cls, v: list[int] | LengthRange) -> list[int] | LengthRange:
        if isinstance(v, list) and not v:
            raise ValueError("must list at least one length")
        return v

    @field_validator("dataset")
    @classmethod
    def _dataset_exists(cls, v: str | None) -> str | None:
        if v is not None and not Path(v).expanduser().is_file():
            raise ValueError(f"no such file {v!r}")
        return v

    def resolved_count(self) -> int:
        if self.count is not None:
            return self.count
        return len(self.lengths) if isinstance(self.lengths, list) else 1

    def max_length(self) -> int:
        return max(self.lengths) if isinstance(self.lengths, list) else self.lengths.max


def reuse_problem(prompts: Prompts, test: Any, load: Any) -> str | None:
    """Where the hit-rate dial cannot apply: it shapes the throughput test's one cached phase."""
    if prompts.reuse.hit_rate is None:
        return None
    where = "prompts.reuse.hit_rate:"
    if getattr(test, "kind", None) != "throughput":
        return f"{where} only the throughput test has a measured cached phase to dial"
    if test.noisy.enabled or test.between_phases.command or test.between_phases.base_url:
        return f"{where} dials the plain cached phase; leave test.noisy and test.between_phases off"
    if getattr(load, "workers", None):
        return f"{where} not with load.workers yet (the measured texts are built per request here)"
    return None


# --- output, cache, noise ---------------------------------------------------------------------------


class Output(Strict):
    max_tokens: int = Field(
        16, gt=0, description="Tokens to generate per request.", json_schema_extra=flag("max_tokens")
    )
    temperature: float = Field(0.0, ge=0, description="Sampling temperature; 0 makes outputs comparable.")
    ignore_eos: bool = Field(True, description="Ask the server to generate max_tokens (vLLM, SGLang, mock).")


class Cache(Strict):
    initial: Literal["cold", "as_is"] = Field(
        "cold", description="cold: reset (where possible) and verify before the first phase; as_is: leave it."
    )
    reset: Literal["auto", "always", "never"] = Field(
        "auto", description="Reset the server's prefix cache before each cold step (auto = where supported)."
    )
    verify: Literal["required", "best_effort", "off"] = Field(
        "required",
        description="After a reset, probe that nothing is cached; "
        "required = refuse to call a run cold otherwise.",
    )


class Exporter(Strict):
    url: str = Field(..., description="The exporter's metrics URL, e.g. http://gpu-node:9400/metrics.")
    kind: Literal["node", "dcgm", "prometheus"] = Field(
        ..., description="node: node-exporter (network, disk); dcgm: NVIDIA DCGM (GPU); prometheus: any."
    )

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        check_base_url(v)  # scheme, host and port; the path (default /metrics) is kept
        return v if urlsplit(v).path not in ("", "/") else v.rstrip("/") + "/metrics"


class Telemetry(Strict):
    metrics: Literal["auto", "off"] = Field("auto", description="Scrape /metrics when the server has it.")
    interval_s: float = Field(
        1.0, ge=0.1, description="Scrape period during a phase, seconds (0.1 at least), on the run's clock."
    )
    exporters: list[Exporter] = Field(
        default_factory=list, description="Host and GPU exporters scraped on the same interval."
    )
    host: bool = Field(True, description="Sample this host's /proc/net/dev and /proc/diskstats too.")
    slice_s: float | None = Field(
        None, gt=0, description="The report's time-slice width, seconds. Absent: chosen from the run's span."
    )
