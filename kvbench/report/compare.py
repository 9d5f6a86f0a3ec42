"""`kvbench compare`: several runs side by side; the FIRST run is the baseline of every ratio.

Three steps, each on its own: `compare_tables` (sections from the summaries, pure),
`compare_plots` (PNGs into the output folder) and `compare_runs` (read, write, print).
Runs are matched by label (cold, warm, baseline, cached, quiet, noisy).
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kvbench.errors import UsageError
from kvbench.report.core.formats import (
    Section,
    Table,
    fmt,
    fmt_ci,
    print_table,
    to_html,
    to_markdown,
    write_json,
)
from kvbench.report.summary import RunSummary

PHASE_HEAD = ["run", "phase", "label", "ok", "errors", "req/s", "req/s vs {base}", "TTFT p50 (ms)"]
PHASE_HEAD += ["TTFT p50 vs {base}", "E2E p50 (ms)"]
EFFECT_HEAD = ["run", "comparison", "rate reading", "time reading"]


def default_compare_dir() -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    base = Path("results") if Path("results").is_dir() else Path(".")
    return base / f"compare-{stamp}"


def short_name(run_id: str) -> str:
    """A run id without its timestamp: 20261130T141500Z-throughput-7b2e90 -> throughput-7b2e90."""
    parts = run_id.split("-")
    return "-".join(parts[1:]) if len(parts) > 2 and parts[0][:8].isdigit() else run_id


def _ratio(value: float | None, base: float | None) -> str:
    return fmt(value / base) if base and value else "n/a"


def _shown(label: str, arm: str | None) -> str:
    """A phase's label as shown: an arm run's replay phase is its arm, never "cached" for an arm
    that could not hit."""
    return arm if arm is not None and label == "cached" else label


def phase_table(names: list[str], summaries: list[RunSummary], arms: list[str | None] | None = None) -> Table:
    """Every run's phases, with req/s and TTFT against the baseline run's phase of the same label."""
    arms = arms or [None] * len(names)
    base_rates = {p.label: p.requests_per_s for p in summaries[0].phases}
    base_ttft = {p.label: p.ttft_ms.p50 for p in summaries[0].phases}
    rows = [
        [
            n,
            p.phase,
            _shown(p.label, arm),
            fmt(p.ok),
            fmt(p.errors),
            fmt(p.requests_per_s),
            _ratio(p.requests_per_s, base_rates.get(p.label)),
            fmt(p.ttft_ms.p50),
            _ratio(p.ttft_ms.p50, base_ttft.get(p.label)),
            fmt(p.e2e_ms.p50),
        ]
        for n, s, arm in zip(names, summaries, arms, strict=True)
        for p in s.phases
    ]
    return Table([h.format(base=names[0]) for h in PHASE_HEAD], rows)


MAX_LENGTH_ROWS = 8  # more distinct lengths than this (a trace: one per row) collapse into bins


def _bin(tokens: int) -> str:
    """The power-of-two length bin a prompt length falls in, e.g. 1,024-2,047 tokens."""
    lo = 1 << max(0, int(tokens).bit_length() - 1)
    return f"{lo:,}-{2 * lo - 1:,} tokens"


def _binned(values: dict[tuple[str, int], float]) -> dict[tuple[str, str], float]:
    import numpy as np

    groups: dict[tuple[str, str], list[float]] = {}
    for (label, tokens), v in values.items():
        groups.setdefault((label, _bin(tokens)), []).append(v)
    return {k: float(np.median(v)) for k, v in groups.items()}


def _length_pairs(
    mine: dict[tuple[str, int], float], base: dict[tuple[str, int], float], binned: bool
) -> list[tuple[tuple[str, str], float, float]]:
    """(label, length or bin) -> this run's and the base run's TTFT p50, where both have it; per
    bin (median of the lengths' medians) when there are too many lengths to show one a row."""
    if binned:
        a, b = _binned(mine), _binned(base)
        return [
            (k, a[k], b[k])
            for k in sorted(a, key=lambda k: (k[0], int(k[1].split("-")[0].replace(",", ""))))
            if k in b
        ]
    return [((lab, f"{t} tokens"), v, base[(lab, t)]) for (lab, t), v in mine.items() if (lab, t) in base]


ERROR_HEAD = ["run", "metric", "{base}", "this run", "error vs {base}"]


def _err(value: float | None, base: float | None) -> str:
    return f"{(value - base) / base * 100:+.1f}%" if base and value is not None else "n/a"


def error_table(names: list[str], summaries: list[RunSummary], arms: list[str | None] | None = None) -> Table:
    """Each later run's relative error against the first (a twin's prediction error vs the real run)."""
    arms = arms or [None] * len(names)
    base = summaries[0]
    phases = {p.label: p for p in base.phases}
    lengths = {(r.label, r.tokens): r.ttft_p50_ms for r in base.ttft_by_length}
    rows = []
    for n, s, arm in zip(names[1:], summaries[1:], arms[1:], strict=True):
        for p in s.phases:
            b = phases.get(p.label)
            if b is None:
                continue
            for metric, v, bv in (
                ("req/s", p.requests_per_s, b.requests_per_s),
                ("TTFT p50 (ms)", p.ttft_ms.p50, b.ttft_ms.p50),
                ("E2E p50 (ms)", p.e2e_ms.p50, b.e2e_ms.p50),
            ):
                rows.append([n, f"{_shown(p.label, arm)}: {metric}", fmt(bv), fmt(v), _err(v, bv)])
        binned = len({t for _, t in lengths}) > MAX_LENGTH_ROWS
        mine = {(r.label, r.tokens): r.ttft_p50_ms for r in s.ttft_by_length}
        for (label, what), v, bv in _length_pairs(mine, lengths, binned):
            rows.append([n, f"{_shown(label, arm)} TTFT p50 at {what} (ms)", fmt(bv), fmt(v), _err(v, bv)])
    return Table([h.format(base=names[0]) for h in ERROR_HEAD], rows)


def effect_rows(names: list[str], summaries: list[RunSummary]) -> list[list[str]]:
    """The within-run effects: cached vs baseline, noisy vs quiet."""
    rows = []
    for n, s in zip(names, summaries, strict=True):
        t, q = s.throughput, s.noise
        if t is not None:
            rows.append(
                [
                    n,
                    "cached vs baseline",
                    f"{fmt(t.rate_ratio)}x req/s ratio",
                    f"{fmt(t.time_ratio)}x total-time ratio",
                ]
            )
        if q is not None:
            rows.append(
                [
                    n,
                    "noisy vs quiet",
                    f"-{fmt(q.rate_drop_pct)}% req/s (vs quiet rate)",
                    f"+{fmt(q.time_increase_pct)}% time (vs quiet time)",
                ]
            )
    return rows


def mixed_tests_note(names: list[str], summaries: list[RunSummary]) -> str | None:
    """One line when the runs are of different tests: their phases share labels, not meaning."""
    tests = [str(s.run.test) for s in summaries]
    if len(set(tests)) < 2:
        return None
    which = ", ".join(f"{n} is {t}" for n, t in zip(names, tests, strict=True))
    return f"these runs are of different tests ({which}): phases are matched by label only"


def compare_tables(
    names: list[str], summaries: list[RunSummary], arms: list[str | None] | None = None
) -> list[Section]:
    """The compare report's sections (without plots)."""
    overview = [
        [
            n,
            str(s.run.test),
            s.run.status_text,
            "yes" if s.run.simulated else "no",
            f"{s.run.target.get('engine')} {s.run.target.get('model')}",
            fmt(s.run.requests),
        ]
        for n, s in zip(names, summaries, strict=True)
    ]
    sections = [
        Section(
            "Runs",
            [f"Baseline of every ratio below: **{names[0]}** (the first run given), matched by label."]
            + [f"**Warning:** {note}" for note in [mixed_tests_note(names, summaries)] if note]
            + [f"**{n}**: {s.banner}" for n, s in zip(names, summaries, strict=True) if s.banner],
            [Table(["run", "test", "status", "simulated", "target", "requests"], overview)],
        ),
        Section("Per phase and label", [], [phase_table(names, summaries, arms)]),
        Section(
            "Relative error vs the first run (a twin's prediction error when it is the real run)",
            [],
            [error_table(names, summaries, arms)],
        ),
    ]
    speed_rows = [
        [n, fmt(sp.tokens), sp.label, fmt(sp.speedup), fmt_ci(sp.speedup_ci)]
        for n, s in zip(names, summaries, strict=True)
        for sp in s.ttft_speedups
    ]
    if speed_rows:
        head = ["run", "prompt tokens", "vs", "speedup (x)", "95% CI"]
        sections.append(Section("TTFT speedups (baseline: cold, per run)", [], [Table(head, speed_rows)]))
    effects = effect_rows(names, summaries)
    if effects:
        sections.append(
            Section("Throughput and noise effects (within each run)", [], [Table(EFFECT_HEAD, effects)])
        )
    return sections


ARM_HEAD = ["figure", "run", "{base}", "this run", "change", "95% interval", "distinguishable"]
ARM_TESTS = ("replay", "sessions")


def _measured(s: RunSummary) -> list[Any]:
    """The run's measured phases (the cold-start probe left out)."""
    return [p for p in s.phases if p.label != "probe"]


def arm_of(run_dir: Path) -> str | None:
    """The arm a run was, from its folder under `kvbench run replay --arms` (arms-*/<i>-<arm>/)."""
    from kvbench.report.verdict.table import ARMS

    head, _, arm = Path(run_dir).resolve().parent.name.partition("-")
    return arm if head.isdigit() and arm in ARMS else None


def arm_table(names: list[str], run_dirs: list[Path], summaries: list[RunSummary]) -> Table | None:
    """Replays and sessions: hit ratio, cached tokens, TTFT p50/p99, goodput at the first run's SLO
    and req/s of every run against the first, with the change and its 95% interval."""
    from kvbench.report.slo_section import saved_slo
    from kvbench.report.verdict.table import verdict_rows

    if not all(str(s.run.test) in ARM_TESTS for s in summaries):
        return None
    from kvbench.report.core.goodput import per_request_bounds
    from kvbench.results.files import REQUESTS, read_jsonl

    def measured(d: Path, s: RunSummary) -> list[dict[str, Any]]:
        phases = {p.phase for p in _measured(s)}
        return [r for r in read_jsonl(Path(d) / REQUESTS) if r.get("phase") in phases]

    bounds = per_request_bounds(saved_slo(Path(run_dirs[0])))
    base = measured(run_dirs[0], summaries[0])
    base_rate = sum(p.requests_per_s or 0 for p in _measured(summaries[0]))
    rows = []
    for n, d, s in zip(names[1:], run_dirs[1:], summaries[1:], strict=True):
        mine = measured(d, s)
        for r in verdict_rows({"base": base, n: mine}, bounds, reference="base"):
            ci, dist = r["ci"], {True: "yes", False: "no", None: "—"}[r["distinguishable"]]
            rows.append(
                [r["figure"], n, fmt(r["offload"]), fmt(r["other"]), fmt(r["change"]), fmt_ci(ci), dist]
            )
        cached = [
            sum(int(x.get("cached_tokens") or 0) for x in rs if x.get("status") == "ok")
            for rs in (base, mine)
        ]
        rate = sum(p.requests_per_s or 0 for p in _measured(s))
        for figure, b, v in (("cached tokens", cached[0], cached[1]), ("req/s", base_rate, rate)):
            rows.append([figure, n, fmt(b), fmt(v), _err(v, b), "—", "—"])
    return Table([h.format(base=names[0]) for h in ARM_HEAD], rows)


def compare_plots(names: list[str], summaries: list[RunSummary], out: Path) -> list[Path]:
    """compare_rates.png (every phase's rate) and, when any run has TTFT per length, compare_ttft.png."""
    from kvbench.report.core import plots

    fig, (ax,) = plots.new_figure(width=9)
    bar_names = [f"{p.label} {n}:{p.phase}" for n, s in zip(names, summaries, strict=True) for p in s.phases]
    bar_vals = [p.requests_per_s for s in summaries for p in s.phases]
    plots.plot_bars(
        ax,
        bar_names,
        bar_vals,
        "completed requests per second",
        "Throughput per run and phase (ok requests / phase wall time)",
    )
    images = [plots.save(fig, out / "compare_rates.png")]
    if any(s.ttft_by_length for s in summaries):
        fig, (ax,) = plots.new_figure()
        for n, s in zip(names, summaries, strict=True):
            if s.ttft_by_length:
                plots.plot_ttft_vs_length(
                    ax, [r.model_dump() for r in s.ttft_by_length], log=True, series=f"{n}: "
                )
        ax.set_title("TTFT vs prompt length, all runs (log scale)")
        images.append(plots.save(fig, out / "compare_ttft.png"))
    return images


def compare_runs(run_dirs: list[Path], out_dir: Path | None = None, quiet: bool = False) -> Path:
    """Side-by-side tables and plots for any runs; the FIRST run is the baseline of every ratio."""
    from kvbench.report.summary import build_summary

    if len(run_dirs) < 2:
        raise UsageError("compare: give at least two run directories")
    out = Path(out_dir) if out_dir else default_compare_dir()
    from kvbench.report.sweep.tables import is_sweep_dir

    if any(is_sweep_dir(Path(d)) for d in run_dirs):  # sweep directories: point by point
        from kvbench.report.sweep.compare import compare_sweeps

        return compare_sweeps([Path(d) for d in run_dirs], out, quiet=quiet)
    out.mkdir(parents=True, exist_ok=True)
    summaries = [build_summary(d)[0] for d in run_dirs]
    names = [short_name(s.run.run_id) for s in summaries]
    arms = [arm_of(Path(d)) for d in run_dirs]
    names = [f"{n} ({a})" if a else n for n, a in zip(names, arms, strict=True)]
    sections = compare_tables(names, summaries, arms)
    arm_tab = arm_table(names, [Path(d) for d in run_dirs], summaries)
    if arm_tab is not None:
        head = f"Hit ratio, cached tokens, TTFT, goodput at the SLO, req/s: each run vs {names[0]}"
        sections.insert(1, Section(head, [], [arm_tab]))
    images = compare_plots(names, summaries, out)
    if any(s.sessions for s in summaries):
        from kvbench.report.sessions.turns import compare_sessions

        section, image = compare_sessions(names, run_dirs, out)
        if section is not None:
            sections.append(Section(*section))
            images.append(image)
    sections.append(Section("Plots", [], [], images))
    title = "kvbench compare: " + " vs ".join(names)
    (out / "compare.md").write_text(to_markdown(title, sections), encoding="utf-8")
    html_path = out / "compare.html"
    html_path.write_text(to_html(title, sections), encoding="utf-8")
    write_json(out / "summary.json", {"baseline": names[0], "runs": summaries})
    note = mixed_tests_note(names, summaries)
    if note:
        print(f"compare: warning: {note}", file=sys.stderr)
    if not quiet:
        print_table(phase_table(names, summaries, arms), f"compare (baseline: {names[0]})")
        if arm_tab is not None:
            print_table(arm_tab, f"each run vs {names[0]}, 95% intervals")
        print_table(error_table(names, summaries, arms), f"relative error vs {names[0]}")
        effects = effect_rows(names, summaries)
        if effects:
            print_table(Table(EFFECT_HEAD, effects), "within-run effects")
        print(f"compare: {html_path}")
    return html_path
