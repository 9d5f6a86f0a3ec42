"""One run's summary: builds the typed `RunSummary` (summary_model.py) that summary.json, the report
and `compare` are made from.

`build_summary(run_dir)` reads only saved files (the manifest through `results.load_record`,
with `report.manifest`'s derived answers), runs the pure statistics of `stats` and `fits`, and,
when the run names a published dataset, the measured-vs-published comparison of `published`.
"""

from __future__ import annotations

import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from kvbench.errors import UsageError
from kvbench.report.core.manifest import RunManifest, read_run_manifest
from kvbench.report.published import comparison as published
from kvbench.report.summary_model import (
    REPORT_VERSION,
    NoiseImpact,
    PhaseSummary,
    RunInfo,
    RunSummary,
    ThroughputComparison,
    TtftAtLength,
    TtftSpeedup,
)
from kvbench.results.schema import Label

if TYPE_CHECKING:
    import pandas as pd

GROUND_TRUTH = "mock_ground_truth.jsonl"

STATUS_TEXT = {
    "complete": "complete",
    "interrupted": "interrupted (partial results)",
    "running": "did not finish (killed, or still running: manifest status is still 'running')",
    "failed": "failed",
}


def simulated_banner(run: RunManifest) -> str | None:
    """What the figures are not: a mock's model, or the kvbench lab's small real parts."""
    m = run.manifest
    if m.simulated:
        profile = m.target.mock_profile or "default"
        fitted = getattr(run.mock_profile_model(), "fit", None)
        if fitted is not None:  # a twin written by `kvbench fit`
            return (
                f"PREDICTION from a twin fitted to {', '.join(fitted.runs)} (kvbench's mock, profile "
                f"{profile}), not a measurement."
            )
        return (
            f"SIMULATED: these figures come from kvbench's mock server (profile {profile}), "
            "not from real hardware."
        )
    if m.lab is not None and m.lab.banner:
        return f"LAB: {m.lab.banner}."
    return None


def _read_noise(run_dir: Path) -> list[dict[str, Any]]:
    from kvbench.results import NOISE, read_jsonl

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read_jsonl(run_dir / NOISE)


def _load_requests(run_dir: Path) -> tuple[pd.DataFrame, list[str]]:
    from kvbench.report.core import stats
    from kvbench.results import load_run

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            df = load_run(run_dir)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return stats.normalise(df), [str(w.message) for w in caught]


def _run_info(run: RunManifest, n_requests: int, n_probes: int = 0) -> RunInfo:
    m = run.manifest
    failed = f": {m.error}" if m.status == "failed" and m.error else ""
    load, load_source = run.load_shape()
    return RunInfo(
        run_id=m.run_id,
        run_dir=str(run.run_dir),
        scenario=m.scenario_name,
        test=m.test,
        status=m.status,
        status_text=STATUS_TEXT.get(m.status, m.status) + failed,
        started_at=m.started_at,
        ended_at=m.ended_at,
        target=m.target.model_dump(mode="json"),
        simulated=m.simulated,
        reference=m.reference,
        requests=n_requests,
        probe_requests=n_probes,
        load=load,
        load_source=load_source if load is not None else None,
        trace=m.trace,
        sessions=m.sessions,
        time_scale=run.time_scale(),
    )


def build_summary(
    run_dir: Path | str, geometry: str | None = None, seed: int | None = None
) -> tuple[RunSummary, pd.DataFrame, list[dict[str, Any]]]:
    """(summary, requests DataFrame, noise rows) of one run directory."""
    from kvbench.report.core import fits, stats
    from kvbench.report.core.delivery import delivery_notes, phase_delivery

    run = read_run_manifest(run_dir)
    df, notes = _load_requests(run.run_dir)
    seed_ = stats.DEFAULT_SEED if seed is None else seed
    phase_list = stats.phase_stats(df, run, seed=seed_)
    if df.empty:
        notes.append("no requests were recorded")
    notes += run.phase_warnings()
    notes += [f"manifest: {n}" for n in run.record.notes if not n.startswith("load: ")]
    if run.record.unknown:
        unknown = ", ".join(run.record.unknown)
        notes.append(f"manifest fields this kvbench does not know (kept, not read): {unknown}")
    bound = phase_delivery(df)
    notes += delivery_notes(bound)
    errors = sum(p.errors for p in phase_list)
    if errors:
        notes.append(f"{errors} failed requests are counted as errors and left out of latency statistics")
    probes = int((df["label"] == str(Label.PROBE)).sum()) if "label" in df.columns else 0
    info = _run_info(run, len(df), probes)
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
    if run.manifest.test == "replay":
        from kvbench.report.replay.section import replay_summary

        summary = summary.model_copy(update={"replay": replay_summary(run.run_dir)})
    twin = _twin(run, df)
    if twin is not None:
        from kvbench.report.twin.range import warning_lines

        notes += warning_lines(twin)
        summary = summary.model_copy(update={"twin": twin, "notes": notes})
    if run.manifest.test == "sessions":
        from kvbench.report.sessions.turns import turns_summary

        # users' pauses pace a sessions phase: its req/s ratio to the baseline says nothing
        summary = summary.model_copy(update={"sessions": turns_summary(run.run_dir), "throughput": None})
    summary = summary.model_copy(update=_verdict_fields(run.run_dir))
    return summary, df, _read_noise(run.run_dir)


def _verdict_fields(run_dir: Path) -> dict[str, Any]:
    """An arm's run: the offload verdict its arms folder holds, typed (report.verdict.of_run)."""
    from kvbench.report.summary_model import VerdictRow
    from kvbench.report.verdict.of_run import run_verdict

    found = run_verdict(run_dir)
    if found is None:
        return {}
    from pydantic import ValidationError

    try:
        rows = [VerdictRow.model_validate(r) for r in found.rows]
    except ValidationError as exc:  # a hand-edited or newer verdict.json: say so, keep the report
        where = ".".join(str(p) for p in exc.errors()[0]["loc"])
        return {"verdict_note": f"{found.path}: verdict row field {where}: not readable by this kvbench"}
    return {"verdict": rows, "verdict_note": found.note}


def _twin(run: RunManifest, df: pd.DataFrame) -> Any:
    """The range check of a run on a twin profile (None for any other run)."""
    from kvbench.report.twin.range import twin_prediction

    profile = run.mock_profile_model()
    load = run.manifest.load
    return twin_prediction(getattr(profile, "fit", None), df, load.concurrency if load else None)


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
    from kvbench.report.noisy import attribution, effect
    from kvbench.report.noisy import explain as noise_explain

    truth: list[dict[str, Any]] = []
    gt_path = run.run_dir / GROUND_TRUTH
    if run.manifest.simulated and gt_path.exists():
        from kvbench.results import read_jsonl

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            truth = read_jsonl(gt_path)
    deltas = _read_json(run.run_dir / "metrics_deltas.json")
    adapter = None
    engine = run.manifest.target.engine
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


def _maybe(model: type[BaseModel], data: dict[str, Any] | None) -> Any:
    return None if data is None else model.model_validate(data)
