"""The sections of a run report, built from a `RunSummary`: what the reader sees, in order.

Each builder takes the summary and returns a `Section` (or None when the run has
nothing for it); `build_sections` puts them in order and `key_table` is the short
table printed on the terminal. Writing them out is `formats`' job.
"""

from __future__ import annotations

from pathlib import Path

from kvbench.report.core.formats import Section, Table, fmt, fmt_ci, fmt_interval, fmt_ms_as_s
from kvbench.report.mock_lateness import mock_lateness_section
from kvbench.report.noisy.section import noise_section
from kvbench.report.replay.trace_rows import trace_rows
from kvbench.report.sessions.load import sessions_load_rows
from kvbench.report.summary import RunSummary
from kvbench.report.twin.range import twin_section
from kvbench.report.verdict.section import verdict_section
from kvbench.results.schema import LengthRangeInfo, LoadShape


def load_rows(load: LoadShape | None, source: str | None = None) -> list[list[str]]:
    """The run's load shape as table rows (kind, concurrency or rate, requests, prompts, lengths)."""
    if load is None:
        return [["load", "not recorded (no manifest load section and no scenario.yaml that says)"]]
    if load.kind == "concurrent":
        shape = f"concurrent, {fmt(load.concurrency)} connections kept busy (closed loop)"
    elif load.kind == "rate":
        shape = f"rate, {fmt(load.rate)} requests/s, at most {fmt(load.concurrency)} in flight (open loop)"
    elif load.kind == "sequential":
        shape = "sequential, one request at a time"
    elif load.kind.startswith("replay-"):
        how = {
            "fixed": "on the trace's timestamps",
            "concurrent": f"{fmt(load.concurrency)} in flight (closed loop)",
        }
        mode = load.kind.removeprefix("replay-")
        shape = (
            f"replay of {fmt(load.requests)} trace rows, {how.get(mode, f'at {fmt(load.rate)} requests/s')}"
        )
    else:
        shape = load.kind
    rows = [
        ["load", f"{shape} (from {source or 'manifest load'})"],
        ["requests per phase", fmt(load.requests) if load.requests else "one per prompt"],
        ["prompts", fmt(load.prompt_count)],
        ["prompt lengths (tokens)", lengths_text(load.lengths)],
    ]
    if load.max_tokens:
        rows.append(["output tokens per request", fmt(load.max_tokens)])
    return rows


def lengths_text(lengths: list[int] | LengthRangeInfo) -> str:
    if isinstance(lengths, LengthRangeInfo):
        return f"{lengths.min:,}-{lengths.max:,} ({lengths.distribution})"
    shown = ", ".join(f"{n:,}" for n in lengths[:8])
    return shown + (f", ... ({len(lengths)} lengths)" if len(lengths) > 8 else "") if shown else "n/a"


def requests_text(requests: int, probes: int) -> str:
    """The test's requests; the cold-start probes beside them, never counted as its load."""
    if not probes:
        return fmt(requests)
    return f"{fmt(requests - probes)} (and {fmt(probes)} cold-start probe(s), not the test's load)"


def run_section(summary: RunSummary) -> Section:
    run = summary.run
    target = run.target
    rows = [
        ["run", run.run_id],
        ["scenario / test", f"{run.scenario} / {run.test}"],
        ["status", run.status_text],
        ["started / ended (UTC)", f"{run.started_at} / {run.ended_at or 'n/a'}"],
        ["target", f"{target.get('kind', '?')} {target.get('base_url') or ''}".strip()],
        [
            "model / engine",
            f"{target.get('model')} / {target.get('engine')} {target.get('server_version') or ''}",
        ],
        ["simulated", "yes (kvbench mock)" if run.simulated else "no"],
    ]
    if run.time_scale.value != 1.0:
        rows.append(
            ["time scale", f"{run.time_scale.value:g} of the modelled pace ({run.time_scale.source})"]
        )
    if run.test == "sessions":
        rows += sessions_load_rows(run.load, run.load_source, run.sessions)
    else:
        rows += load_rows(run.load, run.load_source)
    rows += trace_rows(run.trace)  # a replay's trace as run (none for other tests)
    rows += [
        ["reference", str(run.reference)],
        ["requests recorded", requests_text(run.requests, run.probe_requests)],
    ]
    paras = [f"**{summary.banner}**"] if summary.banner else []
    return Section("Run", paras, [Table(["", ""], rows)])


def speedup_section(summary: RunSummary) -> Section | None:
    if not summary.ttft_speedups:
        return None
    rows = [
        [
            fmt(s.tokens),
            s.label,
            f"{fmt_ms_as_s(s.baseline_p50_ms)} (n={s.n_baseline})",
            f"{fmt_ms_as_s(s.p50_ms)} (n={s.n})",
            fmt(s.speedup),
            fmt_ci(s.speedup_ci),
        ]
        for s in summary.ttft_speedups
    ]
    return Section(
        "TTFT speedup per prompt length",
        [
            "Baseline: the **cold** requests (prefix recomputed). "
            "Speedup = median cold TTFT / median TTFT of "
            "the other label at the same requested length; 95% CI by a seeded bootstrap."
        ],
        [Table(["prompt tokens", "vs", "cold TTFT p50 (s)", "TTFT p50 (s)", "speedup (x)", "95% CI"], rows)],
    )


def throughput_section(summary: RunSummary) -> Section | None:
    t = summary.throughput
    if t is None:
        return None
    rows = [
        ["requests/s ratio", t.rate_ratio_what, fmt(t.rate_ratio), fmt_ci(t.rate_ratio_ci)],
        ["total-time ratio", t.time_ratio_what, fmt(t.time_ratio), "n/a"],
    ]
    detail = [
        ["cached", fmt(t.cached_ok), fmt(t.cached_requests_per_s), fmt(t.cached_total_s)],
        ["baseline", fmt(t.baseline_ok), fmt(t.baseline_requests_per_s), fmt(t.baseline_total_s)],
    ]
    paras = [f"Baseline: {t.baseline}. Compared: {t.cached}."]
    if not t.same_request_count:
        paras.append(
            "The two sides completed different numbers of requests: the total-time ratio is not a "
            "like-for-like comparison; prefer the requests/s ratio."
        )
    if t.rate_ratio_ci is None:
        paras.append("No CI for the rate ratio: each side has a single phase (repeat the phases for one).")
    return Section(
        "Throughput: cached vs baseline",
        paras,
        [
            Table(["speedup", "definition", "value (x)", "95% CI"], rows),
            Table(["side", "ok requests", "requests/s", "total time (s)"], detail),
        ],
    )


def phase_section(summary: RunSummary) -> Section | None:
    if not summary.phases:
        return None
    rows1, rows2 = [], []
    for p in summary.phases:
        t, i, e, d = p.ttft_ms, p.itl_ms, p.e2e_ms, p.dispatch_delay_ms
        rows1.append(
            [
                p.phase,
                p.label,
                fmt(p.requests),
                fmt(p.errors),
                fmt(p.requests_per_s),
                fmt(p.output_tokens_per_s),
                fmt(p.duration_s),
                p.duration_source,
            ]
        )
        rows2.append(
            [
                *(
                    p.phase + (" (TTFT delivery-bound)" if p.delivery else ""),
                    p.label,
                    fmt(t.mean),
                    fmt(t.p50),
                    fmt_ci(p.ttft_p50_ci_ms),
                    fmt(t.p90),
                    fmt(t.p99),
                ),
                *(fmt(t.min), fmt(t.max), fmt(i.p50), fmt(e.p50), fmt(e.p99), fmt(d.p50), fmt(d.max)),
            ]
        )
    head1 = ["phase", "label", "requests", "errors", "req/s", "output tok/s", "wall time (s)", "time source"]
    head2 = ["phase", "label", "TTFT mean", "TTFT p50", "p50 95% CI", "TTFT p90", "TTFT p99", "TTFT min"]
    head2 += ["TTFT max", "ITL p50", "E2E p50", "E2E p99", "dispatch p50", "dispatch max"]
    return Section(
        "Per phase and label",
        [
            "requests/s = completed ok requests / phase wall time "
            "(manifest duration_s when the phase has one "
            "label, else the span of its requests). Latencies in ms over ok requests; ITL is the per-request "
            "mean gap; dispatch delay (sent - scheduled) is kept apart from TTFT."
        ],
        [Table(head1, rows1), Table(head2, rows2)],
    )


def fit_section(summary: RunSummary) -> Section | None:
    f = summary.fits
    if not (f.get("warm") or f.get("cold")):
        return None
    paras = [f"Geometry for KV bytes: {f['geometry'] or 'none'} (from {f['geometry_source']})."]
    tables = []
    for kind in ("cold", "warm"):
        fit = f.get(kind)
        if not fit:
            continue
        params = ", ".join(f"{k} = {v:.4g}" for k, v in fit["params"].items())
        paras.append(
            f"**{kind}**: {fit['formula']}; {params}; RMSE {fmt(fit['rmse_ms'])} ms, "
            f"R² {fmt(fit['r2'], 4)}. " + " ".join(fit["notes"])
        )
        rows = [
            [fmt(int(p["tokens"])), fmt(p["measured_ms"]), fmt(p["fitted_ms"]), fmt(p["residual_ms"])]
            for p in fit["points"]
        ]
        rows += [
            [
                fmt(p["tokens"]),
                "—",
                fmt(p["ttft_ms"]),
                "EXTRAPOLATION (outside the measured range)" if p["extrapolated"] else "interpolated",
            ]
            for p in fit["predictions"]
        ]
        lo, hi = fit["measured_range"]
        tables.append(
            Table(
                ["prompt tokens", "measured p50 (ms)", "fitted (ms)", "residual (ms) / note"],
                rows,
                caption=f"{kind} TTFT fit, measured {lo:,}–{hi:,} tokens",
            )
        )
    return Section("Model fits", paras, tables)


def _or_unscaled(x: float | None) -> str:
    return fmt(x) if x is not None else "not scaled"


def published_section(summary: RunSummary) -> Section | None:
    p = summary.published
    if p is None:
        return None
    paras = []
    if p.simulated:
        paras.append(
            f"**{summary.banner}** The measured column is a simulation: agreement with the published "
            "figures checks the mock's calibration, not any hardware."
        )
    scaled = p.time_scale != 1.0
    if scaled:
        paras.append(
            f"This run's server ran at **{p.time_scale:g} of the modelled pace** "
            f"(1 modelled second = {p.time_scale * 1000:g} ms). Times and rates are compared at that "
            "scale: each published time is multiplied by it and each published rate divided by it "
            "(ratios and percentages are left alone); the measured value brought back to real pace "
            "is shown next to the published one. Fixed costs that do not scale (HTTP, the client: a few ms) "
            "weigh more at this pace, so the shortest times (warm TTFT) read high."
        )
    paras.append(
        f"Published figures: {p.title or p.reference} (kvbench/reference/{p.reference}.yaml, its "
        "`compare:` section); `kvbench audit` checks them against each other. Published claims found "
        "inconsistent: " + (", ".join(p.discrepancies) or "none") + "."
    )
    if scaled:
        head = ["metric", "measured", "published, run's pace", "measured, real pace", "published"]
        rows = [
            [
                *(r.metric, fmt(r.measured), _or_unscaled(r.published_at_scale)),
                *(_or_unscaled(r.measured_scaled_back), fmt(r.published)),
                *(r.unit, fmt(r.measured_over_published), r.note),
            ]
            for r in p.rows
        ]
        head += ["unit", "measured / published (same pace)", "note"]
    else:
        head = ["metric", "measured", "published", "unit", "measured / published", "note"]
        rows = [
            [r.metric, fmt(r.measured), fmt(r.published), r.unit, fmt(r.measured_over_published), r.note]
            for r in p.rows
        ]
    if not rows:
        paras.append("None of this run's measurements corresponds to a published figure.")
    return Section(f"Measured vs published ({p.reference})", paras, [Table(head, rows)])


def sessions_section(summary: RunSummary) -> Section | None:
    """Sessions test: the per-turn table and the later turns by the tier that served them."""
    if not summary.sessions:
        return None
    from kvbench.report.sessions.turns import session_rows_from_table, tier_rows

    header, rows = session_rows_from_table(summary.sessions["per_turn"])
    th, tr = tier_rows(summary.sessions)
    return Section(
        "Sessions: per turn",
        [
            "Median per turn index; speedup = baseline TTFT / cached TTFT for the same user and turn "
            "(median over users); hit ratio = cached / context tokens; tier = the tier that served "
            "most cached tokens (`none`: recomputed). Below: later turns by the tier that served them."
        ],
        [Table(header, rows), Table(th, tr)],
    )


def build_sections(
    summary: RunSummary, images: list[Path], extra: list[Section] | None = None
) -> list[Section]:
    """The report's sections in order; `extra` (built from the run directory: over time) before the notes."""
    secs = [run_section(summary)]
    if (twin := twin_section(summary.twin)) is not None:
        secs.append(twin)
    if (sessions := sessions_section(summary)) is not None:
        secs.append(sessions)
    if summary.run.test == "replay":
        from kvbench.report.replay.section import replay_section

        if (replay := replay_section(summary.replay)) is not None:
            secs.append(replay)
    for make in (
        verdict_section,
        speedup_section,
        throughput_section,
        noise_section,
        published_section,
        phase_section,
        mock_lateness_section,
        fit_section,
    ):
        s = make(summary)
        if s is not None:
            secs.append(s)
    secs += extra or []
    if summary.notes:
        secs.append(Section("Notes", [f"- {n}" for n in summary.notes]))
    if images:
        secs.append(Section("Plots", [], [], images))
    return secs


def _bound(delivery: str | None) -> str:
    """The mark on a TTFT a proxy's delivery set (the Notes say why)."""
    return " (delivery-bound: not the server's TTFT)" if delivery else ""


def _signed(pct: float | None) -> str:
    return "n/a" if pct is None else f"{'+' if pct >= 0 else '-'}{fmt(abs(pct))}%"


def key_table(summary: RunSummary) -> Table:
    """The table printed on the terminal: the headline comparisons of the run."""
    rows: list[list[str]] = []
    bound = {p.label: p.delivery for p in summary.phases if p.delivery}
    for s in summary.ttft_speedups:
        rows.append(
            [
                f"TTFT speedup @ {s.tokens:,} tok",
                f"cold / {s.label}",
                f"{fmt(s.speedup)}x{fmt_interval(s.speedup_ci)}"
                + _bound(bound.get(s.label) or bound.get(s.baseline)),
                f"{fmt_ms_as_s(s.baseline_p50_ms)} s -> {fmt_ms_as_s(s.p50_ms)} s",
            ]
        )
    t = summary.throughput
    if t is not None:
        side = f"baseline -> {t.cached_label}"
        rows.append(
            [
                "throughput speedup",
                side,
                f"{fmt(t.rate_ratio)}x (req/s ratio)",
                f"{fmt(t.baseline_requests_per_s)} -> {fmt(t.cached_requests_per_s)} req/s",
            ]
        )
        rows.append(
            [
                "throughput speedup",
                side,
                f"{fmt(t.time_ratio)}x (total-time ratio)",
                f"{fmt(t.baseline_total_s)} -> {fmt(t.cached_total_s)} s",
            ]
        )
    n = summary.noise
    if n is not None:
        rates = f"{fmt(n.quiet_requests_per_s)} -> {fmt(n.noisy_requests_per_s)} req/s"
        drop = None if n.rate_drop_pct is None else -n.rate_drop_pct
        rows.append(["noisy neighbour", "quiet -> noisy", f"{_signed(drop)} req/s (vs quiet rate)", rates])
        times = f"{fmt(n.quiet_total_s)} -> {fmt(n.noisy_total_s)} s"
        rows.append(
            [
                "noisy neighbour",
                "quiet -> noisy",
                f"{_signed(n.time_increase_pct)} time (vs quiet time)",
                times,
            ]
        )
    for t in (summary.sessions or {}).get("per_turn") or []:
        rows.append(
            [
                f"sessions turn {t['turn']} ({fmt(t['context_tokens'])} tok)",
                "baseline -> cached",
                f"{fmt(t['speedup'])}x, hit {fmt((t['hit_ratio'] or 0) * 100)}%, {t['tier'] or '-'}",
                f"{fmt(t['ttft_baseline_ms'])} -> {fmt(t['ttft_cached_ms'])} ms",
            ]
        )
    if summary.run.test == "replay":
        from kvbench.report.replay.section import key_rows

        rows += key_rows(Path(summary.run.run_dir))
    if not rows:
        for p in summary.phases:
            rows.append(
                [
                    f"phase {p.phase}",
                    p.label,
                    f"{fmt(p.requests_per_s)} req/s",
                    f"TTFT p50 {fmt(p.ttft_ms.p50)} ms{_bound(p.delivery)}, {p.errors} errors",
                ]
            )
    return Table(["measure", "baseline -> compared", "value", "from"], rows, caption="key results")
