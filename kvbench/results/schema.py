"""The run-directory contract as types: what manifest.json holds, field by field.

The runner builds a `Manifest` and writes it; readers validate the same model, so a
writer and a reader cannot drift apart (a report once expected a dict where the
runner wrote a string). results/README.md documents every field here, and a test
checks that it does.

Rules: fields are only ever ADDED (an older run directory must keep loading, so a
new field has a default); a change of shape bumps MANIFEST_VERSION and adds a
migration step in results/reading.py, the one path every reader takes. Models are
strict (an unknown key is an error, so a typo in a writer fails a test instead of
writing a field nobody reads; the reader sets a newer kvbench's fields aside before
validating) and frozen (the runner replaces the manifest, it never edits one in
place from several modules).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import Field

from kvbench.results.load_schema import ContextFitRecord, LoadShape, Record, SessionsRecord, TraceRecord

# re-exported: readers import every manifest model from here
from kvbench.results.load_schema import LengthRangeInfo as LengthRangeInfo
from kvbench.results.load_schema import SessionsDone as SessionsDone


class Label(StrEnum):
    """What a request or a phase measured; the one spelling shared by writer and readers."""

    # TTFT test (request labels; the phase itself is labelled TTFT)
    TTFT = "ttft"
    COLD = "cold"
    WARM = "warm"
    EVICTED_WARM = "evicted-warm"
    FILLER = "filler"
    # cold-start verification, not a measurement
    PROBE = "probe"
    # throughput test (phase and request labels)
    BASELINE = "baseline"
    CACHED = "cached"
    QUIET = "quiet"
    NOISY = "noisy"
    FILL = "fill"
    PERSISTED = "persisted"


RunStatus = Literal["running", "complete", "interrupted", "failed"]

# The manifest's shape version; results/reading.py migrates every older one to it.
MANIFEST_VERSION = 4


class TargetRecord(Record):
    kind: Literal["mock", "server"] = Field(description="mock = kvbench's own mock; server = a real server.")
    base_url: str = Field(description="Server root the run used (credentials never included).")
    model: str = Field(description="Model name requested.")
    engine: str = Field(description="Engine kind, named or detected (vllm, sglang, mock, generic, ...).")
    api: str = Field(description="completions or chat.")
    mock_profile: str | None = Field(None, description="Mock profile name when kind is mock.")
    mock_time_scale: float | None = Field(
        None, description="Real seconds per modelled second of the embedded mock; null otherwise."
    )
    server_version: str | None = Field(None, description="What GET /version answered, if anything.")
    max_model_len: int | None = Field(None, description="Context length used for the up-front check.")
    headers: dict[str, str] = Field(
        default_factory=dict, description="Extra header NAMES sent; every value is `<redacted>`."
    )
    base_url_after: str | None = Field(
        None, description="Persistence test: the server measured after between_phases."
    )


class LabEngine(Record):
    instance: str = Field(description="Lab engine instance name (a, b).")
    url: str = Field(description="The URL the run used for it.")
    via: str = Field(description="g4-connector (restore/write-through over the shaped link) or llama-server.")


class LabRecord(Record):
    """When the target is a `kvbench lab` engine: the link the G4 tier sits behind."""

    banner: str = Field(description="What the figures are (a real engine on a shaped link), for the report.")
    engines: list[LabEngine] = Field(description="The lab engines this run used.")
    link: dict[str, Any] = Field(description="The veth link's shape (rate, delay, addresses), from lab up.")
    unloaded_read_mbit: float | None = Field(None, description="G4 mount read rate measured at lab up.")
    unloaded_write_mbit: float | None = Field(None, description="G4 mount write rate measured at lab up.")
    file_service: str = Field(description="How the G4 path is served over the link.")
    g4_mount: str | None = Field(None, description="Host path of the G4 mount.")
    neighbour_mount: str | None = Field(None, description="Host path the noisy tenant reads through.")
    lab_started_at: str | None = Field(None, description="UTC ISO-8601 time of lab up.")


class EnvironmentInfo(Record):
    python: str = Field(description="Python version of the kvbench process.")
    platform: str = Field(description="platform.platform() of the client host.")
    cpu_count: int | None = Field(description="CPUs of the client host.")
    hostname: str = Field(description="Client host name.")
    git_commit: str | None = Field(None, description="kvbench's git commit when run from a checkout.")


class OptionsInfo(Record):
    allow_unverified_cold: bool = Field(description="--allow-unverified-cold was given.")
    retries: int = Field(0, description="Retries per failed request.")
    api_key_env: str | None = Field(None, description="NAME of the API-key variable (never the key).")
    max_error_rate: float = Field(0.0, description="Failed fraction still counted a pass.")


class SessionsPhase(Record):
    """What a sessions phase did (its turns are rows of turns.jsonl)."""

    users: int = Field(description="Users (conversations) planned.")
    turns: int = Field(description="Turns sent (rows of turns.jsonl for the phase).")
    active_users: int = Field(description="Users allowed at once (closed loop, or the open loop's cap).")
    max_in_flight: int = Field(description="Most timed requests seen in flight at once.")
    stopped_at_context_cap: int = Field(description="Users stopped before a turn past max_context_tokens.")


class PhaseEntry(Record):
    name: str = Field(description="Phase name, unique in the run: ttft, baseline, cached, quiet-1, ...")
    label: Label = Field(description="What the phase measured (one Label).")
    repetition: int = Field(description="Repetition index, from 0.")
    started_ns: int = Field(description="Phase start, ns after clock_origin_ns.")
    ended_ns: int | None = Field(None, description="Phase end, ns after clock_origin_ns; null if cut short.")
    duration_s: float | None = Field(None, description="ended_ns - started_ns, seconds.")
    requests: int = Field(description="Rows written for the phase (final attempts).")
    errors: int = Field(description="Of those, rows that failed.")
    requests_ok_per_s: float | None = Field(None, description="Successful requests per second of phase.")
    cold_verified: bool | None = Field(None, description="TTFT: every cold request showed 0 cached tokens.")
    noise: dict[str, Any] | None = Field(
        None,
        description="Noisy phases: the noise summary (kind, config, mean/peak/target bytes per s, "
        "reached_target, warning).",
    )
    warning_burst: str | None = Field(
        None, description="Most answers came in one burst with their headers (a buffering proxy?)."
    )
    sessions: SessionsPhase | None = Field(None, description="Sessions test: the phase's users and turns.")
    pair: int | None = Field(None, description="Quiet/noisy phases: the pair (1-based) the phase belongs to.")
    load_backend: dict[str, Any] | None = Field(
        None,
        description="Load sent by load workers (`backend`: `processes` on this machine, or `ray`): each "
        "worker's host (or node), pid, cores, concurrency, rows, state (lost?), requests lost in flight or "
        "never issued, clock offset to the driver; `pinned`: local workers each on a core of its own.",
    )
    hit_rate: dict[str, Any] | None = Field(
        None,
        description="prompts.reuse.hit_rate set: requested, expected (whole blocks) and measured hit ratios "
        "(usage and /metrics), tolerance, requests off, hit_rate_off (kvbench/run/hit_rate.py).",
    )


class ColdStart(Record):
    method: Literal["salt", "salt+reset", "as_is"] = Field(description="How a cold cache was made.")
    reset: bool | None = Field(None, description="Did the reset succeed (null: not attempted).")
    verified: bool | None = Field(None, description="Did the probe show nothing cached (null: cannot say).")
    detail: str = Field("", description="Why, in words, when not verified.")
    probe_cached_tokens: int | None = Field(None, description="cached_tokens of the probe after the reset.")
    probe_hit_delta: float | None = Field(None, description="Hit-counter delta over the probe after reset.")


# tests whose prompt set is only the probe that checks the server; their load is built as they run
PROBE_ONLY_TESTS = frozenset({"replay", "sessions"})


class PromptsInfo(Record):
    """prompts.jsonl as built: the run's load, or (replay, sessions) only the probe before it."""

    role: Literal["load", "probe"] | None = Field(
        None,
        description="load: the prompts the run's phases send; probe: a set that only checks the server "
        "(replay and sessions build their load as they run: manifest.load / trace / sessions say it); "
        "null in runs written before it (Manifest.prompts_role infers it from the test).",
    )
    count: int = Field(description="Prompts built.")
    build_s: float = Field(description="Seconds spent building (and counting) them.")
    count_source: str | None = Field(None, description="server (its /tokenize) or estimate.")
    counted_as: str | None = Field(None, description="What was counted: raw text, or chat with template.")
    outside_tolerance: int = Field(0, description="Prompts whose count missed tolerance_tokens.")
    context: ContextFitRecord | None = Field(
        None,
        description="A dataset's requests over the model's context: skipped and clipped (null: no dataset).",
    )


class TtftStep(Record):
    rep: int = Field(description="Repetition index.")
    prompt_id: int = Field(description="Index into prompts.jsonl.")
    tokens: int = Field(description="Requested prompt length.")
    cold_ttft_s: float | None = Field(None, description="TTFT of the cold request, seconds.")
    warm_ttft_s: float | None = Field(None, description="Best TTFT of the warm requests, seconds.")
    speedup: float | None = Field(None, description="cold / warm.")
    cold_cached_tokens: int | None = Field(None, description="cached_tokens of the cold request.")
    warm_cached_tokens: int | None = Field(None, description="cached_tokens of the last warm request.")
    verified: bool | None = Field(None, description="The cold request showed 0 cached tokens.")
    reset: bool | None = Field(None, description="The reset before the cold request succeeded.")
    outputs_match: bool | None = Field(None, description="Warm outputs equal the cold output.")
    eviction: str | None = Field(None, description="Eviction between cold and warm (filler, ...).")
    filler_requests: int | None = Field(None, description="eviction=filler: filler requests sent.")
    slot_file: str | None = Field(None, description="eviction=slot_file: the file llama.cpp wrote.")
    n_saved: int | None = Field(None, description="slot_file: tokens saved.")
    bytes_written: int | None = Field(None, description="slot_file: bytes written.")
    save_ms: float | None = Field(None, description="slot_file: server's save time.")
    n_erased: int | None = Field(None, description="slot_file: slots erased.")
    n_restored: int | None = Field(None, description="slot_file: tokens restored.")
    bytes_read: int | None = Field(None, description="slot_file: bytes read back.")
    restore_ms: float | None = Field(None, description="slot_file: server's restore time.")
    restore_client_ms: float | None = Field(None, description="slot_file: restore call, end to end.")


class MockPhaseLateness(Record):
    """One phase's embedded-mock lateness (kvbench.report.mock_lateness computes it)."""

    phase: str = Field(description="Phase name.")
    requests: int = Field(description="Requests of the phase found in the mock's ground truth.")
    late_ms_mean: float = Field(
        description="Mean of how much later than its model each first token was ready, ms."
    )
    late_ms_p99: float = Field(description="p99 of that lateness, ms.")
    modelled_ttft_ms_mean: float = Field(
        description="Mean modelled TTFT (the mock's TTFT less its lateness), ms."
    )
    share: float = Field(description="late_ms_mean / modelled_ttft_ms_mean.")
    exceeded: bool = Field(description="share > threshold_share (never for the cold-start probes).")


class MockLateness(Record):
    """The embedded mock's own lateness per phase: where it exceeded threshold_share, that phase's
    TTFT is partly the machine running the mock, not the model (set at the end of a mock run)."""

    threshold_share: float = Field(description="Share of a phase's modelled TTFT above which it is flagged.")
    phases: list[MockPhaseLateness] = Field(description="One entry per phase the ground truth covers.")
    exceeded_phases: list[str] = Field(description="The flagged phases' names (probes never).")


class ClockInfo(Record):
    """Where the timed requests' receive times came from: the kernel's RX stamps or the event loop."""

    clock_source: Literal["kernel", "user"] = Field(
        description="kernel: SO_TIMESTAMPNS receive stamps mapped onto the run's clock; user: the loop's."
    )
    reason: str | None = Field(None, description="user: why kernel stamps were not used.")
    stamp: str | None = Field(None, description="kernel: which stamp (SO_TIMESTAMPNS, software RX).")
    offset_start_ns: int | None = Field(None, description="CLOCK_REALTIME - perf_counter_ns at start.")
    offset_end_ns: int | None = Field(None, description="The same offset sampled at the end.")
    drift_ns: int | None = Field(None, description="offset_end_ns - offset_start_ns.")
    offset_span_ns: int | None = Field(None, description="Largest - smallest offset sampled during the run.")
    calibration_window_ns: int | None = Field(
        None, description="Widest bracket of the offset samples: the mapping's uncertainty."
    )
    kernel_stamped_reads: int | None = Field(None, description="Reads whose time came from the kernel.")
    rejected_stamps: int | None = Field(
        None, description="Kernel stamps later than the loop's own (not trusted; the loop's was used)."
    )
    first_token_reads_with_later_tokens: int | None = Field(
        None, description="kernel: first-token reads that also held later tokens (TTFT = the later arrival)."
    )


# keys a manifest has only once known (absent rather than null, as kvbench has always written them)
OMIT_WHEN_NONE = frozenset(
    {
        "load",
        "requests",
        "prompts",
        "cold_start",
        "ttft_steps",
        "error",
        "lab",
        "cluster",
        "clock_source",
        "clock",
        "trace",
        "sessions",
    }
)


class Manifest(Record):
    """manifest.json: what ran, where, how hard, and how it ended."""

    manifest_version: int = Field(
        MANIFEST_VERSION, description="The manifest's shape version (absent before 4: recognised by shape)."
    )
    kvbench_version: str = Field(description="kvbench version that wrote the run.")
    run_id: str = Field(description="<UTC stamp>-<scenario>-<short id>.")
    run_dir: str = Field(description="Where the run directory was written.")
    scenario_name: str = Field(description="The scenario's name.")
    test: str = Field(description="Test type: ttft or throughput (see the test registry).")
    status: RunStatus = Field(description="running (after a kill -9: did not finish), complete, ...")
    started_at: str = Field(description="UTC ISO-8601 wall clock at start (one of two wall-clock times).")
    ended_at: str | None = Field(None, description="UTC ISO-8601 wall clock at the end.")
    clock_origin_ns: int = Field(description="perf_counter_ns() at run start; every *_ns is relative to it.")
    target: TargetRecord = Field(description="The server under test.")
    simulated: bool = Field(description="True when the target is kvbench's mock: figures are simulated.")
    reference: str | None = Field(None, description="Published dataset to compare against.")
    environment: EnvironmentInfo = Field(description="The client host.")
    options: OptionsInfo = Field(description="Run options that change how results read.")
    load: LoadShape | None = Field(None, description="The load shape (absent in runs before it existed).")
    trace: TraceRecord | None = Field(
        None, description="Replay test: the trace as run (file, rows used and skipped, pace, window)."
    )
    sessions: SessionsRecord | None = Field(
        None,
        description="Sessions test: the users and turns as run (planned, done), sizes, think time, loop.",
    )
    phases: list[PhaseEntry] = Field(default_factory=list, description="One entry per phase, in order.")
    error_counts: dict[str, int] = Field(default_factory=dict, description="error_type -> failed rows.")
    requests: int | None = Field(None, description="Rows written, probes included (set at the end).")
    prompts: PromptsInfo | None = Field(None, description="How the prompt set was built.")
    cold_start: ColdStart | None = Field(None, description="How cold was made and checked.")
    ttft_steps: list[TtftStep] | None = Field(None, description="TTFT test: one entry per prompt and rep.")
    error: str | None = Field(None, description="Message when status is failed.")
    lab: LabRecord | None = Field(None, description="The kvbench lab's link when the target is a lab engine.")
    cluster: dict[str, Any] | None = Field(
        None,
        description="cluster.backend ray: the Ray session (address, mode, version, driver node, limits) "
        "and the load workers (placement, nodes, clock offsets, lost ones).",
    )
    clock_source: Literal["kernel", "user"] | None = Field(
        None, description="Which clock the timed requests' receive times came from (set at the end)."
    )
    clock: ClockInfo | None = Field(None, description="The receive clock in detail (set at the end).")
    mock_lateness: MockLateness | None = Field(
        None, description="Embedded mock only: its own lateness per phase, flagged above a stated share."
    )

    def to_json_dict(self) -> dict[str, Any]:
        """The dict written to manifest.json (optional sections absent until known)."""
        data = self.model_dump(mode="json")
        prompts = data.get("prompts")
        for key in ("role", "context"):  # an older run's set stays as written (no nulls added)
            if prompts is not None and prompts.get(key) is None:
                del prompts[key]
        return {k: v for k, v in data.items() if not (k in OMIT_WHEN_NONE and v is None)}

    def replace(self, **changes: Any) -> Manifest:
        """A validated copy with some fields changed (the manifest is frozen)."""
        return Manifest.model_validate({**self.model_dump(), **changes})

    def prompts_role(self) -> Literal["load", "probe"] | None:
        """What prompts.jsonl was: as recorded, or for an older run what its test made it."""
        if self.prompts is None:
            return None
        if self.prompts.role is not None:
            return self.prompts.role
        return "probe" if self.test in PROBE_ONLY_TESTS else "load"

    def with_phase(self, entry: PhaseEntry) -> Manifest:
        return self.replace(phases=[*self.phases, entry])
