"""sweep.json: the sweep's plan and every point's status, rewritten after each point so that an
interrupted sweep resumes at the first point not complete."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kvbench.errors import UsageError
from kvbench.redact import REDACTED, redact
from kvbench.results import write_json_atomic
from kvbench.results.schema import LoadShape, SessionsRecord, TraceRecord

SWEEP_JSON = "sweep.json"
POINTS = "points"
SWEEP_VERSION = 1

PointStatus = Literal["pending", "complete", "failed", "interrupted", "skipped"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SearchPlan(Strict):
    field: str = Field(description="The load field searched (load.concurrency, load.rate, ...).")
    lo: float = Field(description="Lowest load tried.")
    hi: float = Field(description="Highest load tried.")
    step: float = Field(
        description="Resolution: the search stops when meeting and missing loads are this close."
    )
    integer: bool = Field(description="Loads are whole numbers (concurrency).")
    max_repeats: int = Field(description="Runs of one load at most while its interval straddles the target.")


class BaselinePlan(Strict):
    """The second arm: every point again with offload off, so its overhead is measured."""

    url: str | None = Field(None, description="The same server with offload off (--baseline-url).")
    sets: dict[str, str] = Field(default_factory=dict, description="--baseline-set overrides of that arm.")
    offload_off: bool = Field(
        False, description="The embedded mock with tiers G2-G4 not caching (--baseline-offload-off)."
    )


class SweepPlan(Strict):
    """What was asked; a rerun into the same directory must ask the same."""

    scenario: str = Field(description="Scenario name or path, as given.")
    sets: dict[str, str] = Field(default_factory=dict, description="--set overrides common to every point.")
    over: list[tuple[str, list[str]]] = Field(
        default_factory=list, description="Grid: (field, values) per axis."
    )
    search: SearchPlan | None = Field(None, description="Goodput search instead of a grid.")
    slo: dict[str, float] = Field(
        default_factory=dict, description="SLO bounds in ms by name (ttft_p99_ms, ...)."
    )
    attainment: float = Field(0.9, description="Share of requests that must meet the SLO.")
    label: str | None = Field(
        None, description="Request label measured (None: the most common measured one)."
    )
    stop_at_saturation: bool = Field(True, description="A one-field load grid stops once saturated.")
    tiers: str | None = Field(
        None, description="--tiers as given: tier sizes for the tier-cliff map (kvbench.sweep.tiers)."
    )
    baseline: BaselinePlan | None = Field(
        None, description="Run every point on a second, offload-off arm too (arm A then arm B)."
    )


class PointRun(Strict):
    """What a point's run was, read from its manifest: the load it sent (never its probe) and its pace."""

    run_id: str = Field(description="The point's run id (its manifest's run_id).")
    test: str = Field(description="Test type the point ran.")
    load: str = Field(description="The point's load in words, as its report's Run table says it.")
    pace: str = Field(description="How fast it ran: the mock's time scale, a replay's schedule and speedup.")
    load_shape: LoadShape | None = Field(
        None, description="The run's manifest.load (replay: the trace as run)."
    )
    trace: TraceRecord | None = Field(None, description="Replay: the run's manifest.trace.")
    sessions: SessionsRecord | None = Field(None, description="Sessions: the run's manifest.sessions.")
    probe_requests: int = Field(
        0, description="Cold-start probe rows of the run, not in the point's figures."
    )


class PointState(Strict):
    name: str = Field(description="Folder under points/, unique in the sweep.")
    index: int = Field(description="Order in which the point ran, from 0.")
    assignment: dict[str, str] = Field(description="Field -> value (as typed) this point sets.")
    repeat: int = Field(0, description="Run of the same load again (search), from 0.")
    arm: Literal["main", "baseline"] = Field(
        "main", description="main: the sweep as asked (A); baseline: its offload-off arm (B)."
    )
    status: PointStatus = Field("pending", description="Where the point is.")
    run_dir: str | None = Field(None, description="The point's run directory.")
    exit_code: int | None = Field(None, description="The run's exit code.")
    metrics: dict[str, Any] | None = Field(None, description="goodput.PointMetrics plus label and hit ratio.")
    run: PointRun | None = Field(
        None, description="The point's run as run (id, load, pace), from its manifest; null before it ran."
    )
    note: str = Field("", description="Why skipped or failed, in words.")


class SweepState(Strict):
    sweep_version: int = Field(SWEEP_VERSION, description="Shape of this file.")
    kvbench_version: str = Field(description="kvbench that wrote it.")
    status: Literal["running", "complete", "interrupted", "failed"] = Field(
        description="How the sweep stands."
    )
    plan: SweepPlan = Field(description="What was asked.")
    points: list[PointState] = Field(default_factory=list, description="Every point, in run order.")
    notes: list[str] = Field(default_factory=list, description="Saturation and other sweep-wide findings.")
    search: dict[str, Any] | None = Field(None, description="search.SearchResult of a goodput search.")
    cliff: dict[str, Any] | None = Field(
        None, description="Working-set sweep: predicted tier boundaries and predicted vs observed."
    )

    def point(self, name: str) -> PointState | None:
        return next((p for p in self.points if p.name == name), None)


def read_state(sweep_dir: Path) -> SweepState | None:
    path = sweep_dir / SWEEP_JSON
    if not path.exists():
        return None
    try:
        return SweepState.model_validate_json(path.read_bytes())
    except (OSError, ValueError) as exc:
        first = str(exc).splitlines()[0]
        raise UsageError(f"{path}: not a sweep file kvbench can read ({first})") from None


def write_state(sweep_dir: Path, state: SweepState) -> None:
    """sweep.json, every credential masked (a URL's userinfo in --base-url, --set, --baseline-url)."""
    write_json_atomic(sweep_dir / SWEEP_JSON, redact(state.model_dump(mode="json")))


def check_resumable(plan: SweepPlan, sweep_dir: Path) -> None:
    """A plan read back holds no credentials (they are never written): `--resume` alone cannot send them."""
    dumped = plan.model_dump_json()
    if REDACTED in dumped:
        raise UsageError(
            f"--resume {sweep_dir}: the sweep's credentials were not stored (sweep.json never holds "
            "them); run the same sweep command again with --out "
            + f"{sweep_dir} to go on from its last point"
        )


def check_same_plan(found: SweepPlan, asked: SweepPlan, sweep_dir: Path) -> None:
    """Resuming into a directory that holds another sweep would mix two experiments; the stored plan
    is compared with the one asked as it would be stored (credentials masked)."""
    a, b = found.model_dump(), redact(asked.model_dump())
    differ = [k for k in a if a[k] != b[k]]
    if differ:
        raise UsageError(
            f"{sweep_dir} holds another sweep (its {', '.join(differ)} differ); "
            "resume it with `kvbench sweep --resume DIR` alone, or give a new --out"
        )
