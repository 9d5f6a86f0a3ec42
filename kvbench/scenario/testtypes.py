"""Per-test sections: what only one test type reads, discriminated on `test.kind`.

    test: ttft                              # shorthand for {kind: ttft}, every knob at its default
    test: {kind: ttft, warm_repeats: 2, eviction: filler, filler_tokens: 64000}
    test: {kind: throughput, baseline: true, noisy: {enabled: true}}
    test: {kind: sessions, users: 16, turns: 6, active_users: 8, baseline: true}
    test: {kind: replay, trace: {path: traces/ci.jsonl}, schedule: concurrent, concurrency: 4}

Why a section per test: knobs that only one test reads used to sit in shared sections
(`cache.warm_repeats`, top-level `baseline`), and each new test type would have added a third
set there. A new test type is a new section here (registered in SECTIONS) plus its plan in
kvbench/run/ (registered in run/registry.py); a test checks the two registries agree.

Files written for the old layout get one line per moved field that names its new place
(`MOVED`), and `--set` keys of the old layout are translated (`translate_key`).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from kvbench.scenario.replay import TraceSource
from kvbench.scenario.sections import Strict, check_base_url, flag
from kvbench.scenario.sessions import ThinkTime, TurnsRange
from kvbench.scenario.view import ScenarioView


class SectionBase(Strict):
    """Base of a test section: `kind` names the test; `check` holds rules that need the whole scenario."""

    kind: str
    summary: ClassVar[str] = ""
    # the prompts section when a file leaves it out (None: required); a test whose prompts come
    # from elsewhere (replay: the trace) still gets the small set every run builds
    default_prompts: ClassVar[dict[str, Any] | None] = None

    @model_validator(mode="before")
    @classmethod
    def _other_tests_fields(cls, data: Any) -> Any:
        # a knob of another test type: say which test reads it, not just "unknown key"
        if isinstance(data, dict):
            for key in data:
                if key in cls.model_fields:
                    continue
                owners = [k for k, m in SECTIONS.items() if key in m.model_fields and m is not cls]
                if owners:
                    raise ValueError(f"test.{key}: applies to the {owners[0]} test, not {data.get('kind')}")
        return data

    def check(self, scn: ScenarioView) -> None:
        """Cross-section rules of this test type; raise ValueError('field.path: message')."""

    @property
    def noisy_phases(self) -> bool:
        """Some phase runs background traffic (an embedded mock then opens its fabric port)."""
        return False

    @property
    def restarts_server(self) -> bool:
        """The server is restarted between phases (an embedded mock then persists its disk tier)."""
        return False

    @property
    def max_in_flight(self) -> int | None:
        """Requests this test keeps in flight when it sets its own load (None: `load` says)."""
        return None

    @property
    def mock_defaults(self) -> dict[str, str | int | float | bool]:
        """Embedded-mock profile fields this test sets; target.mock_overrides wins on the same field."""
        return {}


class TtftSection(SectionBase):
    kind: Literal["ttft"] = "ttft"
    summary: ClassVar[str] = "TTFT cold vs cached, one request at a time"
    warm_repeats: int = Field(1, ge=0, description="Warm requests of the identical prompt after cold.")
    eviction: Literal["none", "filler", "tier_reset", "slot_file"] = Field(
        "none",
        description="Between cold and warm, evict the fast tiers so the warm hit must come "
        "from a lower one: filler prompts, a tier reset (mock: G1+G2), or llama.cpp's slot "
        "save/erase/restore through a file (the disk tier; the restore time is recorded beside TTFT).",
    )
    filler_tokens: int = Field(
        0, ge=0, description="eviction=filler: total tokens of filler prompts (should exceed G1+G2 capacity)."
    )

    def check(self, scn: ScenarioView) -> None:
        if scn.load.kind != "sequential":
            raise ValueError("load.kind: the ttft test issues one request at a time; use kind: sequential")


EMPTY_CACHE = "cold"  # the value `--empty-cache` gives noisy.cache_start


class Noisy(Strict):
    """Quiet/noisy pairs of the throughput test (`--noisy`).

    By default the published reading: one unmeasured fill of every prompt, then alternating
    quiet and noisy phases (ABBA: quiet-noisy, noisy-quiet, ...) that all read the same filled
    cache, so the noise meets the cache reads it can slow. The empty-cache variant
    (`cache_start: cold`, `--empty-cache`) starts each phase from an empty cache instead: the
    phase then includes the fill, usually bound by prefill compute, which noise cannot slow.
    """

    enabled: bool = Field(
        False, description="Run quiet and noisy phases as pairs (`--noisy`).", json_schema_extra=flag("noisy")
    )
    order: Literal["alternate", "quiet_first", "noisy_first"] = Field(
        "alternate",
        description="Order within a pair; alternate = quiet first in odd pairs, noisy first in even "
        "ones (ABBA), so a drift of the machine falls on both sides.",
    )
    pairs: int | None = Field(
        None,
        gt=0,
        le=100,
        json_schema_extra=flag("pairs"),
        description="Quiet/noisy pairs; absent = 6 from a filled cache, 2 from an empty one "
        "(each empty-cache phase recomputes its fill). The effect's interval needs two or more.",
    )
    cache_start: Literal["cold", "filled"] = Field(
        "filled",
        json_schema_extra=flag("empty_cache"),  # --empty-cache sets EMPTY_CACHE
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
        description="Pause between a noisy phase's noise starting and its first request (the target's "
        "view of the traffic ramps up: the mock measures it over 0.5 s), and after the phase (it drains).",
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
    mock_overrides: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        description="Embedded mock, noisy runs from a filled cache only: profile fields to override, e.g. "
        "{time_scale: 0.02} (a pace at which the modelled phase, not the machine running the mock, bounds "
        "a filled-cache phase; an empty-cache phase is bound by prefill); target.mock_overrides wins on "
        "the same field.",
    )

    def resolved_pairs(self) -> int:
        if self.pairs is not None:
            return self.pairs
        return 6 if self.cache_start == "filled" else 2


class BetweenPhases(Strict):
    command: str | None = Field(
        None, description="Shell command run after the fill phase (e.g. restart the server)."
    )
    wait_healthy_s: float = Field(120.0, gt=0, description="How long to wait for /health afterwards.")
    base_url: str | None = Field(
        None, description="Measure against this server after the fill (persistence test)."
    )

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        return None if v is None else check_base_url(v)


class ThroughputSection(SectionBase):
    kind: Literal["throughput"] = "throughput"
    summary: ClassVar[str] = "requests per second over a phase: cached, baseline, quiet/noisy, persisted"
    baseline: bool = Field(
        False,
        description="Also run the no-reuse baseline (every request its own salt).",
        json_schema_extra=flag("baseline"),
    )
    noisy: Noisy = Field(default_factory=Noisy, description="Quiet/noisy pairing.")
    between_phases: BetweenPhases = Field(default_factory=BetweenPhases, description="Persistence-test hook.")

    @property
    def noisy_phases(self) -> bool:
        return self.noisy.enabled

    @property
    def restarts_server(self) -> bool:
        return bool(self.between_phases.command)

    @property
    def mock_defaults(self) -> dict[str, str | int | float | bool]:
        noisy = self.noisy
        return dict(noisy.mock_overrides) if noisy.enabled and noisy.cache_start == "filled" else {}


class SessionsSection(SectionBase):
    kind: Literal["sessions"] = "sessions"
    summary: ClassVar[str] = "multi-turn conversations: TTFT and serving tier per turn, vs a no-reuse replay"
    users: int = Field(8, ge=1, le=100_000, description="Conversations (users) in a phase.")
    turns: int | TurnsRange = Field(
        4, description="Turns per user: an int, or {min, max} drawn uniformly per user (seeded)."
    )
    system_prompt_tokens: int = Field(
        1000, ge=0, le=1_000_000, description="System prompt shared by every user, tokens (0: none)."
    )
    first_message_tokens: int = Field(500, ge=1, le=1_000_000, description="The first user message, tokens.")
    turn_tokens: int = Field(
        100, ge=1, le=1_000_000, description="Each later user message, tokens (the answer comes before it)."
    )
    think_time: ThinkTime = Field(default_factory=ThinkTime, description="Pause before each later turn.")
    active_users: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description="Users holding a conversation at once (closed loop; a finished user is replaced by "
        "the next). Also the cap of the open loop. Default: all users at once.",
    )
    arrival_rate_per_s: float | None = Field(
        None, gt=0, description="Open loop: new users per second (null: closed loop)."
    )
    arrivals: Literal["poisson", "constant"] = Field(
        "poisson", description="Open loop: inter-arrival distribution of new users."
    )
    max_context_tokens: int = Field(
        130_000,
        ge=16,
        description="A user stops before a turn whose history would pass this (the published maximum is "
        "130,000); the model's context length caps it too.",
    )
    seed: int = Field(0, description="Seed for turn counts, pauses, arrivals and message text.")
    baseline: bool = Field(
        False,
        description="Also replay every turn with a fresh salt (`--baseline`): the same messages, nothing "
        "reusable, the no-reuse TTFT beside each cached turn.",
        json_schema_extra=flag("baseline"),
    )

    def check(self, scn: ScenarioView) -> None:
        if scn.target.api != "chat":
            raise ValueError("target.api: the sessions test sends chat histories; set target.api: chat")
        if scn.load.kind != "sequential":
            raise ValueError(
                "load: the sessions test sets its own load (test.active_users, test.arrival_rate_per_s); "
                "leave load out"
            )

    @property
    def max_active(self) -> int:
        return min(self.active_users or self.users, self.users)

    @property
    def max_in_flight(self) -> int | None:
        return self.max_active  # one request per active user at most


class ReplaySection(SectionBase):
    """A trace replayed token-exact: each hash id one block of `block_tokens` tokens (kvbench.traces)."""

    kind: Literal["replay"] = "replay"
    summary: ClassVar[str] = "a Mooncake/Bailian/WEKA trace replayed token-exact: hits vs the trace's ideal"
    default_prompts: ClassVar[dict[str, Any] | None] = {"lengths": [16]}
    trace: TraceSource = Field(..., description="The trace file and the part of it to replay.")
    schedule: Literal["fixed", "concurrent", "rate"] = Field(
        "fixed",
        description="fixed: the trace's timestamps (/ trace.speedup, open loop); concurrent: `concurrency` "
        "requests kept in flight in trace order (closed loop); rate: arrivals at `rate` per second.",
    )
    concurrency: int = Field(8, ge=1, le=100_000, description="schedule concurrent: requests kept in flight.")
    rate: float | None = Field(None, gt=0, description="schedule rate: arrivals per second (required there).")
    arrivals: Literal["poisson", "constant"] = Field(
        "poisson", description="schedule rate: inter-arrival distribution (seeded by `seed`)."
    )
    max_concurrency: int = Field(
        256,
        ge=1,
        le=100_000,
        description="fixed and rate: cap on requests in flight (a later arrival waits: its lateness shows).",
    )
    output_tokens: Literal["trace", "scenario"] = Field(
        "trace", description="Answer length: each row's output_length, or output.max_tokens for every row."
    )
    realise_ahead: int = Field(
        256,
        ge=1,
        le=100_000,
        description="Prompts realised ahead of the schedule: memory holds this many, never the whole trace.",
    )
    late_warn_ms: float = Field(
        10.0, gt=0, description="Warn when the client falls behind: dispatch lateness p99 above this, ms."
    )
    engine_block_tokens: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="The server's own prefix-cache block, tokens (vLLM: 16), for the exact engine-side "
        "expected hits; absent: the embedded mock's, else only the trace's ideal is given.",
    )
    workers: int = Field(
        0,
        ge=0,
        le=1024,
        description="0: this process sends the replay; K >= 1: K load workers share it, Ray actors with "
        "cluster.backend: ray, else K worker processes on this machine (either prepares every request "
        "before the phase: memory holds them all).",
    )
    seed: int = Field(0, description="Seed for block text and rate arrivals (the salt stays per run).")

    def check(self, scn: ScenarioView) -> None:
        if scn.target.api != "completions":
            raise ValueError(
                "target.api: the replay test sends raw prompts whose blocks must line up with the trace's; "
                "a chat template would shift every block (use completions)"
            )
        if scn.load.kind != "sequential":
            raise ValueError("load: the replay test sets its own schedule (test.schedule); leave load out")
        if scn.prompts.salt == "per_request":
            raise ValueError(
                "prompts.salt: per_request would make every block unique; a replay keeps the trace's "
                "sharing (per_run: cold by construction; none: replay exactly)"
            )
        if self.schedule == "rate" and self.rate is None:
            raise ValueError("test.rate: schedule rate needs a rate (arrivals per second)")
        if self.schedule != "rate" and self.rate is not None:
            raise ValueError(f"test.rate: applies to schedule rate, not {self.schedule}")

    @property
    def max_in_flight(self) -> int | None:
        return self.concurrency if self.schedule == "concurrent" else self.max_concurrency


# name -> section model; the union below and run/registry.py are built from it
SECTIONS: dict[str, type[SectionBase]] = {
    "ttft": TtftSection,
    "throughput": ThroughputSection,
    "sessions": SessionsSection,
    "replay": ReplaySection,
}


def _shorthand(v: Any) -> Any:
    return {"kind": v} if isinstance(v, str) else v


# `test: ttft` is short for `test: {kind: ttft}`
TestSection = Annotated[
    TtftSection | ThroughputSection | SessionsSection | ReplaySection,
    Field(discriminator="kind"),
    BeforeValidator(_shorthand),
]

# old dotted key -> (new dotted key, the test type that reads it)
MOVED: dict[str, tuple[str, str]] = {
    "cache.warm_repeats": ("test.warm_repeats", "ttft"),
    "cache.eviction": ("test.eviction", "ttft"),
    "cache.filler_tokens": ("test.filler_tokens", "ttft"),
    "baseline": ("test.baseline", "throughput"),
    "noisy": ("test.noisy", "throughput"),
    "between_phases": ("test.between_phases", "throughput"),
}


def moved_fields(data: dict[str, Any]) -> list[str]:
    """One line per field a file sets at its pre-section place, naming where it lives now."""
    lines = []
    for old, (new, test) in MOVED.items():
        head, _, leaf = old.partition(".")
        present = (
            leaf in data[head] if leaf and isinstance(data.get(head), dict) else not leaf and head in data
        )
        if present:
            lines.append(
                f"{old}: moved to {new} (write `test: {{kind: {test}, {new.split('.', 1)[1]}: ...}}`)"
            )
    return lines


def translate_key(dotted: str) -> str:
    """A `--set` key of the old layout, as its new path (`noisy.enabled` -> `test.noisy.enabled`)."""
    for old, (new, _) in MOVED.items():
        if dotted == old or dotted.startswith(old + "."):
            return new + dotted[len(old) :]
    return dotted
