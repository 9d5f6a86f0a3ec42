"""One run's summary: the typed `RunSummary` that summary.json, the report and `compare` are built from.

`build_summary(run_dir)` reads only saved files (through `report.manifest`), runs
the pure statistics of `stats` and `fits`, and, when the run names a published
dataset, the measured-vs-published comparison of `published`. The models below
are the contract of summary.json: its shape is kept (fields are only ever added),
and a field a published comparison can point at declares its unit, so that a
dataset's `compare:` section is checked against this file, not against prose.
"""

from __future__ import annotations

import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from kvbench.errors import UsageError
from kvbench.report.attribution import PhaseAttribution
from kvbench.report.effect import NoiseEffect
from kvbench.report.manifest import LoadShape, RunManifest, TimeScale, read_run_manifest
from kvbench.report.noise_explain import NoiseExplanation

if TYPE_CHECKING:
    import pandas as pd

REPORT_VERSION = 1
GROUND_TRUTH = "mock_ground_truth.jsonl"

STATUS_TEXT = {
    "complete": "complete",
    "interrupted": "interrupted (partial results)",
    "running": "did not finish (killed, or still running: manifest status is still 'running')",
    "failed": "failed",
}


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
    load: LoadShape | None = F("how requests were issued (None: not recorded)", default=None)
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


def simulated_banner(run: RunManifest) -> str | None:
    """What the figures are not: a mock's model, or the kvbench lab's small real parts."""
    if run.simulated:
        profile = run.mock_profile_name or "default"
        return (
            f"SIMULATED: these figures come from kvbench's mock server (profile {profile}), "
            "not from real hardware."
        )
    lab = run.raw.get("lab")
    if isinstance(lab, dict) and lab.get("banner"):
        return f"LAB: {lab['banner']}."
    return None


def _read_noise(run_dir: Path) -> list[dict[str, Any]]:
    from kvbench.results import NOISE, read_jsonl

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read_jsonl(run_dir / NOISE)


def _load_requests(run_dir: Path) -> tuple[pd.DataFrame, list[str]]:
    from kvbench.report import stats
    from kvbench.results import load_run

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            df = load_run(run_dir)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return stats.normalise(df), [str(w.message) for w in caught]


def _run_info(run: RunManifest, n_requests: int) -> RunInfo:
    status = run.status
    error = run.error
    return RunInfo(
        run_id=run.run_id,
        run_dir=str(run.run_dir),
        scenario=run.scenario_name,
        test=run.test,
        status=status,
        status_text=STATUS_TEXT.get(status, status) + (f": {error}" if status == "failed" and error else ""),
        started_at=run.started_at,
        ended_at=run.ended_at,
        target=run.target,
        simulated=run.simulated,
        reference=run.reference,
        requests=n_requests,
        load=run.load_shape(),
        time_scale=run.time_scale(),
    )


def build_summary(
    run_dir: Path | str, geometry: str | None = None, seed: int | None = None
) -> tuple[RunSummary, pd.DataFrame, list[dict[str, Any]]]:
    """(summary, requests DataFrame, noise rows) of one run directory."""
    from kvbench.report import fits, published, stats
    from kvbench.report.delivery import delivery_notes, phase_delivery

    run = read_run_manifest(run_dir)
    df, notes = _load_requests(run.run_dir)
    seed_ = stats.DEFAULT_SEED if seed is None else seed
    phase_list = stats.phase_stats(df, run, seed=seed_)
    if df.empty:
        notes.append("no requests were recorded")
    notes += run.phase_warnings()
    bound = phase_delivery(df)
    notes += delivery_notes(bound)
    errors = sum(p.errors for p in phase_list)
    if errors:
        notes.append(f"{errors} failed requests are counted as errors and left out of latency statistics")
    info = _run_info(run, len(df))
    if info.time_scale.value != 1.0:
        notes.append(
            f"the mock ran at time scale {info.time_scale.value:g} ({info.time_scale.source}): its times are "
            f"{1 / info.time_scale.value:g}x shorter than the modelled hardware's"
        )
    summary = RunSummary(
        kvbench_report_version=REPORT_VERSION,
        generated_at=datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        run=info,
        banner=simulated_banner(run),
        phases=[
            PhaseSummary.model_validate({**p.to_dict(), "delivery": bound.get(p.phase)}) for p in phase_list
        ],
        ttft_by_length=[TtftAtLength.model_validate(r) for r in stats.ttft_by_length(df, seed=seed_)],
        ttft_speedups=[TtftSpeedup.model_validate(r) for r in stats.ttft_speedups(df, seed=seed_)],
        throughput=_maybe(ThroughputComparison, stats.throughput_comparison(phase_list, seed=seed_)),
        noise=_maybe(NoiseImpact, stats.noise_impact(phase_list, seed=seed_)),
        fits=fits.fit_run(df, run, geometry),
        notes=notes,
        published=None,
    )
    summary = summary.model_copy(update=_noise_fields(run, df, phase_list, summary.noise))
    comparison, why_not = published.published_comparison(summary)
    if why_not:
        notes.append(why_not)
    summary = summary.model_copy(update={"published": comparison, "notes": notes})
    if run.test == "sessions":
        from kvbench.report.sessions import turns_summary

        # users' pauses pace a sessions phase: its req/s ratio to the baseline says nothing
        summary = summary.model_copy(update={"sessions": turns_summary(run.run_dir), "throughput": None})
    return summary, df, _read_noise(run.run_dir)


def _read_json(path: Path) -> Any:
    import json

    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _pair_key(meta: dict[str, dict[str, Any]], phase: str) -> str | None:
    m = meta.get(phase, {})
    return None if m.get("pair") is None else f"{m['pair']}-r{m.get('repetition', 0)}"


def _noise_fields(
    run: RunManifest, df: pd.DataFrame, phase_list: list[Any], impact: NoiseImpact | None
) -> dict[str, Any]:
    """attribution, noise_effect and noise_explained (report.attribution, report.effect)."""
    from kvbench.report import attribution, effect, noise_explain

    truth: list[dict[str, Any]] = []
    gt_path = run.run_dir / GROUND_TRUTH
    if run.simulated and gt_path.exists():
        from kvbench.results import read_jsonl

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            truth = read_jsonl(gt_path)
    deltas = _read_json(run.run_dir / "metrics_deltas.json")
    adapter = None
    engine = run.target.get("engine")
    if engine:
        from kvbench.engines.adapters import REGISTRY, get_adapter

        adapter = get_adapter(str(engine)) if str(engine) in REGISTRY else None
    attr = attribution.attribute_run(df, truth, deltas if isinstance(deltas, dict) else None, adapter)
    meta = run.phase_meta()
    phases = [
        {
            "name": p.phase,
            "label": p.label,
            "duration_s": p.duration_s,
            "ok": p.ok,
            "pair": _pair_key(meta, p.phase),
        }
        for p in phase_list
    ]
    kinds = [p.noise.get("kind") for p in phase_list if p.noise and p.noise.get("kind")]
    noisy = run.noisy_settings()
    explained = noise_explain.explain_noise(
        attr,
        kinds[0] if kinds else None,
        sender_bytes_per_s=impact.noise_mean_bytes_per_s if impact is not None else None,
        capacity_bytes_per_s=noisy.get("capacity_bytes_per_s"),
    )
    return {
        "attribution": attr,
        "noise_effect": effect.noise_effect(
            phases, min_effect_pct=float(noisy.get("min_effect_pct") or effect.MIN_EFFECT_PCT)
        ),
        "noise_explained": explained,
    }


def _maybe(model: type[_Model], data: dict[str, Any] | None) -> Any:
    return None if data is None else model.model_validate(data)
