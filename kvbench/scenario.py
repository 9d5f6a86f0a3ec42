"""Scenario files: strict pydantic models, and load_scenario() to read and validate one.

A scenario is validated once: the YAML plus only the CLI overrides the user
actually set. Unknown keys are errors everywhere (a typo must not silently
fall back to a default). Every problem becomes one `field.path: message` line.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from kvbench.errors import ScenarioError

MAX_SCENARIO_BYTES = 1_000_000

PACKAGE_SCENARIOS = Path(__file__).parent / "scenarios"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=False)


# --- target -----------------------------------------------------------------------------------------


class Timeouts(Strict):
    connect_s: float = Field(10.0, gt=0, description="TCP connect timeout, seconds.")
    first_token_s: float = Field(
        900.0, gt=0, description="Longest wait from sending a request to its first content token, seconds."
    )
    total_s: float = Field(3600.0, gt=0, description="Longest a whole request may take, seconds.")


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
    )
    model: str | None = Field(None, description="Model name to request. Absent: the first of GET /v1/models.")
    api: Literal["completions", "chat"] = Field(
        "completions", description="completions = /v1/completions; chat = /v1/chat/completions."
    )
    engine: Engine = Field(
        "auto", description="Server kind, used for cache reset and metrics. auto = detect."
    )
    api_key_env: str | None = Field(
        None,
        description="NAME of the environment variable holding the API key (never the key itself).",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
    )
    timeouts: Timeouts = Field(default_factory=Timeouts, description="Client timeouts.")
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="Extra HTTP headers sent with every request (values are redacted in results).",
    )
    mock_profile: str = Field(
        "ci", description="Mock profile used when base_url is absent (see `kvbench mock profiles`)."
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
        if v is None:
            return v
        if not re.match(r"^https?://[^\s/]+", v):
            raise ValueError("must start with http:// or https:// and name a host")
        return v.rstrip("/").removesuffix("/v1")


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


class Prompts(Strict):
    count: int | None = Field(
        None, gt=0, description="Distinct prompts. Absent: one per entry of `lengths` (list form)."
    )
    lengths: list[Annotated[int, Field(gt=0)]] | LengthRange = Field(
        ..., description="Prompt lengths in tokens: a list (cycled over prompts) or a {min, max} range."
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

    @field_validator("lengths")
    @classmethod
    def _nonempty(cls, v: list[int] | LengthRange) -> list[int] | LengthRange:
        if isinstance(v, list) and not v:
            raise ValueError("must list at least one length")
        return v

    def resolved_count(self) -> int:
        if self.count is not None:
            return self.count
        return len(self.lengths) if isinstance(self.lengths, list) else 1

    def max_length(self) -> int:
        return max(self.lengths) if isinstance(self.lengths, list) else self.lengths.max


# --- load -------------------------------------------------------------------------------------------


class SequentialLoad(Strict):
    kind: Literal["sequential"] = "sequential"


class ConcurrentLoad(Strict):
    kind: Literal["concurrent"] = "concurrent"
    concurrency: int = Field(..., gt=0, le=100_000, description="Connections kept busy (closed loop).")
    requests: int = Field(..., gt=0, le=10_000_000, description="Requests per phase.")
    sampling: Literal["each_equally", "random"] = Field(
        "each_equally",
        description="each_equally: every prompt used requests/count times, shuffled; random: seeded draws.",
    )
    seed: int = Field(0, description="Seed for the request order.")


class RateLoad(Strict):
    kind: Literal["rate"] = "rate"
    rate: float = Field(..., gt=0, description="Mean arrivals per second.")
    arrivals: Literal["poisson", "constant"] = Field("poisson", description="Inter-arrival distribution.")
    max_concurrency: int = Field(256, gt=0, description="Cap on requests in flight.")
    requests: int = Field(..., gt=0, le=10_000_000, description="Requests per phase.")
    seed: int = Field(0, description="Seed for arrivals and request order.")


Load = Annotated[SequentialLoad | ConcurrentLoad | RateLoad, Field(discriminator="kind")]


# --- output, cache, noise ---------------------------------------------------------------------------


class Output(Strict):
    max_tokens: int = Field(16, gt=0, description="Tokens to generate per request.")
    temperature: float = Field(0.0, ge=0, description="Sampling temperature; 0 makes outputs comparable.")
    ignore_eos: bool = Field(True, description="Ask the server to generate max_tokens (vLLM, SGLang, mock).")


class Cache(Strict):
    initial: Literal["cold", "as_is"] = Field(
        "cold", description="cold: reset (where possible) and verify before the first phase; as_is: leave it."
    )
    warm_repeats: int = Field(
        1, ge=0, description="TTFT test: warm requests of the identical prompt after cold."
    )
    reset: Literal["auto", "always", "never"] = Field(
        "auto", description="Reset the server's prefix cache before each cold step (auto = where supported)."
    )
    verify: Literal["required", "best_effort", "off"] = Field(
        "required",
        description="After a reset, probe that nothing is cached; "
        "required = refuse to call a run cold otherwise.",
    )
    eviction: Literal["none", "filler", "tier_reset", "slot_file"] = Field(
        "none",
        description="TTFT test: between cold and warm, evict the fast tiers so the warm hit must come "
        "from a lower one: filler prompts, a tier reset (mock: G1+G2), or llama.cpp's slot "
        "save/erase/restore through a file (the disk tier; the restore time is recorded beside TTFT).",
    )
    filler_tokens: int = Field(
        0, ge=0, description="eviction=filler: total tokens of filler prompts (should exceed G1+G2 capacity)."
    )


class NoNoise(Strict):
    kind: Literal["none"] = "none"


class TcpNoise(Strict):
    kind: Literal["tcp"] = "tcp"
    targets: list[str] = Field(
        default_factory=list,
        description="host:port sinks (`kvbench noise sink`). Empty with the mock: its fabric port.",
    )
    senders: int = Field(4, gt=0, le=64, description="Parallel sender processes (the published test used 4).")
    rate_bytes_per_s: float | None = Field(
        None, gt=0, description="Target total rate; absent = as fast as possible."
    )
    chunk_bytes: int = Field(262_144, gt=0, le=64 * 1024 * 1024, description="Bytes per send call.")
    max_duration_s: float = Field(3600.0, gt=0, description="Hard stop for the generator.")


class Iperf3Noise(Strict):
    kind: Literal["iperf3"] = "iperf3"
    servers: list[str] = Field(..., min_length=1, description="iperf3 servers, host or host:port.")
    parallel: int = Field(4, gt=0, le=128, description="Streams per client (-P).")
    bitrate: str | None = Field(None, description="iperf3 -b target, e.g. 10G; absent = unlimited.")
    max_duration_s: float = Field(3600.0, gt=0, description="Hard stop for the generator.")


class FioNoise(Strict):
    kind: Literal["fio"] = "fio"
    path: str = Field(..., description="Directory or file to contend on.")
    rw: Literal["read", "write", "randread", "randwrite", "rw", "randrw"] = Field(
        "read", description="fio rw."
    )
    block_size: str = Field("1M", description="fio bs.")
    jobs: int = Field(4, gt=0, le=256, description="fio numjobs.")
    size: str = Field("1G", description="fio size per job.")
    max_duration_s: float = Field(3600.0, gt=0, description="Hard stop for the generator.")


Noise = Annotated[NoNoise | TcpNoise | Iperf3Noise | FioNoise, Field(discriminator="kind")]


class Noisy(Strict):
    """Quiet/noisy pairs of the throughput test (`--noisy`).

    By default the published reading: one unmeasured fill of every prompt, then alternating
    quiet and noisy phases (ABBA: quiet-noisy, noisy-quiet, ...) that all read the same filled
    cache, so the noise meets the cache reads it can slow. The empty-cache variant
    (`cache_start: cold`, `--empty-cache`) starts each phase from an empty cache instead: the
    phase then includes the fill, usually bound by prefill compute, which noise cannot slow.
    """

    enabled: bool = Field(False, description="Run quiet and noisy phases as pairs (`--noisy`).")
    order: Literal["alternate", "quiet_first", "noisy_first"] = Field(
        "alternate",
        description="Order within a pair; alternate = quiet first in odd pairs, noisy first in even "
        "ones (ABBA), so a drift of the machine falls on both sides.",
    )
    pairs: int | None = Field(
        None,
        gt=0,
        le=100,
        description="Quiet/noisy pairs; absent = 4 from a filled cache, 2 from an empty one "
        "(each empty-cache phase recomputes its fill). The effect's interval needs two or more.",
    )
    cache_start: Literal["cold", "filled"] = Field(
        "filled",
        description="filled (the published 'same cached requests' reading): an unmeasured fill of "
        "every prompt, then every quiet and noisy phase reads the same filled cache; cold (the "
        "empty-cache variant, `--empty-cache`): each phase starts from an empty cache and its fill "
        "is measured.",
    )
    refill: bool = Field(
        False, description="filled only: fill again (new salt, reset) before every phase, not once."
    )
    settle_s: float = Field(
        1.0,
        ge=0,
        le=600,
        description="Pause after a noisy phase so the traffic has drained before the next phase.",
    )
    min_effect_pct: float = Field(
        1.0,
        ge=0,
        le=100,
        description="Smallest change in time per request the report calls distinguishable (%).",
    )
    capacity_bytes_per_s: float | None = Field(
        None,
        gt=0,
        description="Capacity of the resource the noise competes for (fabric or storage), B/s: the "
        "report shows the noise's share of it (the mock states its own).",
    )

    def resolved_pairs(self) -> int:
        if self.pairs is not None:
            return self.pairs
        return 4 if self.cache_start == "filled" else 2


class BetweenPhases(Strict):
    command: str | None = Field(
        None, description="Shell command run after the fill phase (e.g. restart the server)."
    )
    wait_healthy_s: float = Field(120.0, gt=0, description="How long to wait for /health afterwards.")
    base_url: str | None = Field(
        None, description="Measure against this server after the fill (persistence test)."
    )


class Telemetry(Strict):
    metrics: Literal["auto", "off"] = Field("auto", description="Scrape /metrics when the server has it.")
    interval_s: float = Field(1.0, gt=0, description="Scrape period during a phase, seconds.")


# --- the scenario -----------------------------------------------------------------------------------


class Scenario(Strict):
    name: str = Field(..., min_length=1, max_length=80, description="Short name, used in the run directory.")
    description: str = Field("", description="What this scenario reproduces.")
    test: Literal["ttft", "throughput"] = Field(..., description="Which published test this runs.")
    target: Target = Field(default_factory=Target, description="The server under test.")
    prompts: Prompts = Field(..., description="The prompt set.")
    load: Load = Field(default_factory=SequentialLoad, description="How requests are issued.")
    output: Output = Field(default_factory=Output, description="Generation settings.")
    cache: Cache = Field(default_factory=Cache, description="Cache state and control.")
    baseline: bool = Field(
        False, description="Throughput: also run the no-reuse baseline (every request its own salt)."
    )
    noise: Noise = Field(default_factory=NoNoise, description="Background traffic for noisy phases.")
    noisy: Noisy = Field(default_factory=Noisy, description="Quiet/noisy pairing.")
    between_phases: BetweenPhases = Field(default_factory=BetweenPhases, description="Persistence-test hook.")
    telemetry: Telemetry = Field(default_factory=Telemetry, description="Server metrics scraping.")
    repetitions: int = Field(1, gt=0, le=1000, description="Repeat the whole measurement this many times.")
    max_error_rate: float = Field(
        0.0, ge=0, le=1, description="Failed-request fraction still counted a pass."
    )
    retries: int = Field(
        0, ge=0, le=10, description="Retries per failed request (off by default: retries distort timing)."
    )
    reference: str | None = Field("ibm-g4", description="Published dataset to compare against, or null.")

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        if self.test == "ttft" and not isinstance(self.load, SequentialLoad):
            raise ValueError("load.kind: the ttft test issues one request at a time; use kind: sequential")
        if self.target.max_model_len is not None:
            need = self.prompts.max_length() + self.output.max_tokens
            if need > self.target.max_model_len:
                raise ValueError(
                    f"prompts.lengths: longest prompt + max_tokens = {need} exceeds "
                    f"target.max_model_len {self.target.max_model_len}"
                )
        shared = self.prompts.shared_prefix_tokens
        if shared and isinstance(self.prompts.lengths, list) and shared >= min(self.prompts.lengths):
            raise ValueError("prompts.shared_prefix_tokens: must be shorter than the shortest prompt")
        if self.noisy.enabled and self.test != "throughput":
            raise ValueError("noisy.enabled: quiet/noisy pairs apply to the throughput test")
        return self


# --- loading ----------------------------------------------------------------------------------------


def scenario_search_path() -> list[Path]:
    return [Path.cwd() / "scenarios", PACKAGE_SCENARIOS]


def resolve_scenario_path(name_or_path: str) -> Path:
    """A path if it looks like one; else a name looked up in ./scenarios then the package's copies."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or "/" in name_or_path or p.exists():
        if not p.exists():
            raise ScenarioError([f"file not found: {name_or_path}"])
        if p.is_dir():
            raise ScenarioError([f"{name_or_path} is a directory, not a scenario file"])
        return p
    for folder in scenario_search_path():
        for ext in (".yaml", ".yml"):
            candidate = folder / f"{name_or_path}{ext}"
            if candidate.is_file():
                return candidate
    known = sorted({c.stem for f in scenario_search_path() if f.is_dir() for c in f.glob("*.yaml")})
    raise ScenarioError([f"no scenario named '{name_or_path}' (known: {', '.join(known) or 'none'})"])


MAX_EXPANDED_NODES = 100_000


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    """Nodes the document has once aliases are expanded (what a validator would walk)."""
    key = id(node)
    if key in memo:
        return memo[key]
    memo[key] = 1  # a recursive alias counts once instead of looping
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(child, memo) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    memo[key] = size = min(size, MAX_EXPANDED_NODES + 1)
    return size


def _safe_load_bounded(text: str) -> Any:
    """yaml.safe_load, refusing alias bombs: safe_load shares aliased objects, but anything that walks
    the result (validation, dumping) expands them, so the expanded size is capped before constructing."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node, {}) > MAX_EXPANDED_NODES:
            raise yaml.YAMLError(
                f"the document expands to more than {MAX_EXPANDED_NODES:,} nodes (YAML aliases); refusing"
            )
        return loader.construct_document(node)
    finally:
        loader.dispose()


def parse_yaml_text(raw: bytes, source: str) -> dict[str, Any]:
    if len(raw) > MAX_SCENARIO_BYTES:
        raise ScenarioError(
            [f"file is {len(raw):,} bytes; scenarios are limited to {MAX_SCENARIO_BYTES:,}"], source
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError([f"not UTF-8 text (byte {exc.start})"], source) from None
    try:
        data = _safe_load_bounded(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ScenarioError([f"YAML syntax error: {where}{problem}"], source) from None
    if data is None:
        raise ScenarioError(["the file is empty"], source)
    if not isinstance(data, dict):
        raise ScenarioError([f"top level must be a mapping, not {type(data).__name__}"], source)
    return data


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Set dotted keys (`target.base_url`) in a copy of the raw scenario dict."""
    import copy

    out = copy.deepcopy(data)
    for dotted, value in overrides.items():
        node = out
        parts = dotted.split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        node[parts[-1]] = value
    return out


_UNION_FIELDS = {"load": ("sequential", "concurrent", "rate"), "noise": ("none", "tcp", "iperf3", "fio")}


def _clean_loc(loc: tuple[Any, ...]) -> tuple[str, ...]:
    """Drop what pydantic adds for unions: the discriminator tag after `load`/`noise`, member names."""
    out: list[str] = []
    for i, part in enumerate(loc):
        text = str(part)
        if i > 0 and str(loc[i - 1]) in _UNION_FIELDS and text in _UNION_FIELDS[str(loc[i - 1])]:
            continue
        if "[" in text:  # e.g. list[int], function-after[_order(), LengthRange]
            continue
        out.append(text)
    return tuple(out)


def format_validation_error(exc: ValidationError) -> list[str]:
    errors = [(_clean_loc(e["loc"]), e) for e in exc.errors()]
    lines = []
    for loc, err in errors:
        # a union reports every member; a member-type mismatch next to a real error is noise
        if err["type"] in ("list_type", "dict_type", "model_type", "model_attributes_type") and any(
            other is not err and other_loc[: len(loc)] == loc for other_loc, other in errors
        ):
            continue
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        where = ".".join(loc)
        if msg.startswith(where + ":"):
            msg = msg[len(where) + 1 :].strip()
        # a cross-field check names its own field
        self_named = not where and re.match(r"^[\w.]+: ", msg)
        line = msg if self_named else f"{where or '(top level)'}: {msg}"
        if line not in lines:
            lines.append(line)
    return lines


def validate_scenario(data: dict[str, Any], source: str | None = None) -> Scenario:
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(format_validation_error(exc), source) from None


def load_scenario(name_or_path: str, overrides: dict[str, Any] | None = None) -> tuple[Scenario, Path]:
    path = resolve_scenario_path(name_or_path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ScenarioError([f"cannot read: {exc.strerror}"], str(path)) from None
    data = parse_yaml_text(raw, str(path))
    if overrides:
        data = apply_overrides(data, overrides)
    return validate_scenario(data, str(path)), path


def scenario_to_yaml(scenario: Scenario, redact: bool = False) -> str:
    """The resolved scenario as YAML; `redact` hides header values (they may carry credentials)."""
    data = scenario.model_dump(mode="json")
    if redact:
        data["target"]["headers"] = {k: "<redacted>" for k in data["target"]["headers"]}
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
