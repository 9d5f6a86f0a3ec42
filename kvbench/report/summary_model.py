"""summary.json as types: the `RunSummary` a run's report, `compare` and the published comparison read.

The models are the contract of summary.json: its shape is kept (fields are only ever added;
a change of shape bumps REPORT_VERSION), and a field a published comparison can point at
declares its unit, so that a dataset's `compare:` section is checked against this file, not
against prose. Building a summary is summary.py's job; comparing it with a published dataset
is published.py's: both import these types from here, below them.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kvbench.report.core.manifest import TimeScale
from kvbench.report.noisy.attribution import PhaseAttribution
from kvbench.report.noisy.effect import NoiseEffect
from kvbench.report.noisy.explain import NoiseExplanation
from kvbench.report.replay.model import ReplaySummary
from kvbench.report.twin.range import TwinPrediction
from kvbench.results.schema import LoadShape, SessionsRecord, TraceRecord

# 2: run.load is the manifest's own load shape (results.schema.LoadShape), its origin in run.load_source
REPORT_VERSION = 2


def F(description: str, unit: str | None = None, default: Any = ...) -> Any:
    """A described field; `unit` marks a measured quantity a `compare:` entry may point at."""
    return Field(default, description=description, json_schema_extra={"unit": unit} if unit else None)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Pair = tuple[float, float]


class Distribution(_Model):
    count: int = F("finite values")
    mean: float | None = F("mean", "ms")
    p50: float | None = F("median", "ms")
    p90: float | None = F("90th percentile", "ms")
    p99: float | None = F("99th percentile", "ms")
    min: float | None = F("smallest", "ms")
    max: float | None = F("largest", "ms")


class PhaseSummary(_Model):
    phase: str = F("phase name")
    label: str = F("request label: cold, warm, baseline, cached, quiet, noisy ...")
    requests: int = F("requests recorded")
    ok: int = F("requests that succeeded")
    errors: int = F("requests that failed")
    error_types: dict[str, int] = F("failed requests per error type")
    ttft_ms: Distribution = F("time to first token of ok requests, ms")
    itl_ms: Distribution = F("mean inter-token gap per ok request, ms")
    e2e_ms: Distribution = F("end-to-end latency of ok requests, ms")
    dispatch_delay_ms: Distribution = F("sent - scheduled, all requests, ms")
    ttft_p50_ci_ms: Pair | None = F("bootstrap 95% CI of the median TTFT, ms")
    duration_s: float | None = F("wall time of the phase", "s")
    duration_source: str = F("where duration_s comes from")
    requests_per_s: float | None = F("ok requests / wall time", "req/s")
    output_tokens_per_s: float | None = F("output tokens / wall time", "tokens/s")
    output_tokens: int = F("output tokens of ok requests")
    prompt_tokens_requested: list[int] = F("distinct requested prompt lengths")
    noise: dict[str, Any] | None = F("the manifest's noise record of the phase")
    cold_verified: bool | None = F("whether the cold cache was verified before the phase")
    delivery: str | None = F(
        "why TTFT is delivery-bound (a proxy's, not the server's); null if not", default=None
    )


class TtftAtLength(_Model):
    label: str = F("request label")
    tokens: int = F("requested prompt length", "tokens")
    n: int = F("ok requests")
    ttft_p50_ms: float = F("median TTFT", "ms")
    ttft_p10_ms: float = F("10th percentile TTFT", "ms")
    ttft_p90_ms: float = F("90th percentile TTFT", "ms")
    ci_ms: Pair | None = F("bootstrap 95% CI of the median, ms")


class TtftSpeedup(_Model):
    tokens: int = F("requested prompt length", "tokens")
    baseline: str = F("label of the baseline (cold)")
    label: str = F("label compared with the baseline")
    baseline_p50_ms: float = F("median TTFT of the baseline", "ms")
    p50_ms: float = F("median TTFT of the label", "ms")
    n_baseline: int = F("baseline requests")
    n: int = F("compared requests")
    speedup: float | None = F("median baseline TTFT / median TTFT", "x")
    speedup_ci: Pair | None = F("bootstrap 95% CI of the speedup")
    what: str = F("the definition in words")


class ThroughputComparison(_Model):
    baseline: str = F("the baseline side in words")
    cached: str = F("the compared side in words")
    cached_label: str = F("label of the compared side (cached, or quiet in a --noisy run)")
    cached_requests_per_s: float | None = F("pooled rate of the cached side", "req/s")
    baseline_requests_per_s: float | None = F("pooled rate of the baseline", "req/s")
    cached_total_s: float | None = F("summed wall time of the cached side", "s")
    baseline_total_s: float | None = F("summed wall time of the baseline", "s")
    cached_ok: int = F("ok requests, cached side", "requests")
    baseline_ok: int = F("ok requests, baseline", "requests")
    rate_ratio: float | None = F("requests/s cached / requests/s baseline", "x")
    rate_ratio_what: str = F("rate_ratio in words")
    rate_ratio_ci: Pair | None = F("bootstrap 95% CI over repeated phases")
    time_ratio: float | None = F("total time baseline / total time cached", "x")
    time_ratio_what: str = F("time_ratio in words")
    same_request_count: bool = F("both sides completed the same number of requests")


class NoiseImpact(_Model):
    baseline: str = F("the quiet side in words")
    noisy: str = F("the noisy side in words")
    quiet_requests_per_s: float | None = F("pooled rate without competing traffic", "req/s")
    noisy_requests_per_s: float | None = F("pooled rate with competing traffic", "req/s")
    quiet_total_s: float | None = F("summed wall time, quiet", "s")
    noisy_total_s: float | None = F("summed wall time, noisy", "s")
    rate_drop_pct: float | None = F("1 - noisy rate / quiet rate", "%")
    rate_drop_what: str = F("rate_drop_pct in words")
    rate_drop_ci_pct: Pair | None = F("bootstrap 95% CI of the drop, %")
    time_increase_pct: float | None = F("noisy time / quiet time - 1", "%")
    time_increase_what: str = F("time_increase_pct in words")
    noise_mean_bytes_per_s: float | None = F("mean competing traffic reached", "B/s")
    same_request_count: bool = F("both sides completed the same number of requests")


class RunInfo(_Model):
    run_id: str = F("run id (the run directory's name)")
    run_dir: str = F("run directory as given")
    scenario: str | None = F("scenario name")
    test: str | None = F("test type: ttft | throughput | sessions")
    status: str = F("manifest status")
    status_text: str = F("status in words (with the error of a failed run)")
    started_at: str | None = F("UTC start")
    ended_at: str | None = F("UTC end")
    target: dict[str, Any] = F("the manifest's target record")
    simulated: bool = F("measured on kvbench's mock")
    reference: str | None = F("published dataset the run compares with")
    requests: int = F("requests recorded")
    probe_requests: int = F(
        "of `requests`: the cold-start probes (label probe), not the test's load", default=0
    )
    load: LoadShape | None = F("how requests were issued (None: not recorded)", default=None)
    load_source: str | None = F("where the load shape was read from", default=None)
    trace: TraceRecord | None = F("replay test: the manifest's trace as run (None otherwise)", default=None)
    sessions: SessionsRecord | None = F(
        "sessions test: the manifest's users and turns as run (None otherwise, or an older run)", default=None
    )
    time_scale: TimeScale = F("the server's time scale (mock profiles may run faster than real time)")


class PublishedRow(_Model):
    id: str = F("the compare entry's id")
    metric: str = F("what is compared, in words")
    measured: float | None = F("the run's value, in `unit`")
    published: float | None = F("the published value (or claim), in `unit`, at real pace")
    published_at_scale: float | None = F("`published` at the run's time scale (None when it is 1)")
    measured_scaled_back: float | None = F("`measured` brought back to real pace (None at scale 1)")
    unit: str = F("unit of measured and published")
    measured_over_published: float | None = F("measured / published at the run's time scale")
    source: str = F("figure, claim or expression of the dataset the published value is")
    note: str = F("context for the reader")


class PublishedComparison(_Model):
    reference: str = F("dataset name")
    title: str = F("dataset title")
    rows: list[PublishedRow] = F("one row per compared quantity")
    simulated: bool = F("the measured column comes from the mock")
    time_scale: float = F("the run's time scale the published values were brought to")
    discrepancies: list[str] = F("claims of the dataset `kvbench audit` finds inconsistent")


class VerdictRow(_Model):
    """One row of the offload verdict (kvbench.report.verdict.table): a figure, offload vs one arm."""

    figure: str = F("hit ratio, hit share <tier>, TTFT p50 (ms), TTFT p99 (ms) or goodput at SLO")
    arm: str = F("the arm set against offload: no-offload or no-reuse")
    offload: float | None = F("the figure in the offload arm")
    other: float | None = F("the figure in that arm")
    change: float | None = F("that arm minus offload (ratios), or its relative change (TTFT)")
    ci: list[float] | None = F("95% interval of the change")
    distinguishable: bool | None = F("whether the interval excludes no change")


class RunSummary(_Model):
    kvbench_report_version: int = F("summary.json format version")
    generated_at: str = F("UTC time the summary was built")
    run: RunInfo = F("the run")
    banner: str | None = F("the SIMULATED banner, when measured on the mock")
    phases: list[PhaseSummary] = F("per phase and label")
    ttft_by_length: list[TtftAtLength] = F("median TTFT per label and requested length")
    ttft_speedups: list[TtftSpeedup] = F("cold / other-label TTFT per length")
    throughput: ThroughputComparison | None = F("cached vs baseline, when the run has both")
    noise: NoiseImpact | None = F("noisy vs quiet, when the run has both")
    fits: dict[str, Any] = F("model fits of TTFT (report.fits)")
    notes: list[str] = F("what the reader must know about this run's data")
    published: PublishedComparison | None = F("measured vs published, when the run names a dataset")
    plots: list[str] = F("PNG files written next to the report", default=[])
    attribution: list[PhaseAttribution] = F(
        "where each phase's request time went: queue, prefill, onboarding per tier, decode", default=[]
    )
    noise_effect: NoiseEffect | None = F(
        "the noise effect over the quiet/noisy pairs, with its interval", default=None
    )
    noise_explained: NoiseExplanation | None = F(
        "the share of time on the resource the noise competed for, and the noise achieved", default=None
    )
    sessions: dict[str, Any] | None = F(
        "sessions test: per_turn and per_tier tables from turns.jsonl (report.sessions)", default=None
    )
    replay: ReplaySummary | None = F(
        "replay test: the hit table as numbers, a window's ideal with the trace's history, and the "
        "section as the report shows it (paragraphs; tables with caption, head, rows: hits first)",
        default=None,
    )
    twin: TwinPrediction | None = F(
        "a run on a twin (kvbench fit): the ranges it left and the error its validation found", default=None
    )
    verdict_note: str | None = F(
        "an arm of `kvbench run replay --arms`: which arm this run is, the arms in run order, and where "
        "the verdict is (its rows are `verdict`)",
        default=None,
    )
    verdict: list[VerdictRow] = F(
        "offload on vs off (and vs no reuse), one row per figure and arm", default=[]
    )
