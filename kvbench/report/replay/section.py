"""The replay test in a report: measured hits beside the trace's ideal, TTFT by reuse, lateness.

Read from saved files only: replay.jsonl (what the trace allows each request), requests.jsonl
(what the server reported and when each was sent), mock_ground_truth.jsonl where the target was
kvbench's mock, replay.json (the run's trace, calibration and lateness).

The hit table, per phase and overall, in shares of prompt tokens:
  ideal     the trace's own view: every leading id an unbounded cache already holds (as the
            Mooncake paper counts), capped at input_length
  engine    the same in the engine's blocks (whole blocks stored, one token always computed):
            what a perfect prefix cache of that block size can give (where the block is known)
  reported  usage cached_tokens the server reported
  mock      the mock's own ground truth (its log of cached tokens), where present
The gap (reported - ideal) splits into block alignment (engine - ideal: the engine's block and
its last-token rule, nothing a cache can do better) and the rest (reported - engine: eviction at
the tiers' capacities, requests in flight together that could not share yet, a server that
under-reports); rows without a reported figure are counted apart (the server not reporting).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvbench.errors import UsageError
from kvbench.report.core.formats import Section, Table, fmt
from kvbench.report.replay.model import ContextRecord, ReplayHits, ReplaySummary, ReplayTable
from kvbench.report.replay.trace_rows import why_text
from kvbench.results import read_jsonl
from kvbench.results.files import save_figure_atomic
from kvbench.results.replay_rows import REPLAY_ROWS, REPLAY_SUMMARY
from kvbench.results.schema import TraceRecord

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes

BUCKETS: tuple[tuple[float, float, str], ...] = (
    (0.0, 0.0, "0%"),
    (0.0, 0.25, "(0, 25%]"),
    (0.25, 0.5, "(25, 50%]"),
    (0.5, 0.75, "(50, 75%]"),
    (0.75, 1.0, "(75, 100%]"),
)


def replay_frame(run_dir: Path) -> pd.DataFrame:
    """One row per replayed request: replay.jsonl joined with its requests.jsonl row (and the
    mock's ground truth where there is one); empty when the run has no replay rows."""
    import pandas as pd

    rows = read_jsonl(run_dir / REPLAY_ROWS)
    if not rows:
        return pd.DataFrame()
    keep = ["request_id", "status", "cached_tokens", "prompt_tokens_server", "ttft_ms", "dispatch_delay_ms"]
    reqs = pd.DataFrame(read_jsonl(run_dir / "requests.jsonl"))
    df = pd.DataFrame(rows).merge(reqs[[c for c in keep if c in reqs]], on="request_id", how="left")
    truth = read_jsonl(run_dir / "mock_ground_truth.jsonl")
    if truth:
        gt = pd.DataFrame(truth)[["request_id", "cached_tokens"]].rename(
            columns={"cached_tokens": "mock_cached"}
        )
        df = df.merge(gt.drop_duplicates("request_id", keep="last"), on="request_id", how="left")
    df["expected_share"] = df["expected_cached_tokens"] / df["input_length"].clip(lower=1)
    return df


def _share(part: Any, whole: float) -> float | None:
    return float(part) / whole if whole else None


def hit_stats(name: str, df: pd.DataFrame) -> ReplayHits:
    """One row of the hit table as numbers (shares of the ok requests' prompt tokens)."""
    ok = df[df["status"] == "ok"]
    tokens = float(ok["input_length"].sum())
    reported = ok["cached_tokens"].dropna()
    ideal = _share(ok["expected_cached_tokens"].sum(), tokens)
    engine = (
        _share(ok["engine_expected_tokens"].sum(), tokens)
        if ok["engine_expected_tokens"].notna().all()
        else None
    )
    measured = _share(reported.sum(), float(ok.loc[reported.index, "input_length"].sum()))
    mock = (
        _share(ok["mock_cached"].sum(), tokens)
        if "mock_cached" in ok and ok["mock_cached"].notna().all()
        else None
    )
    less = lambda a, b: None if a is None or b is None else a - b  # noqa: E731
    return ReplayHits(
        phase=name,
        requests=len(df),
        prompt_tokens=int(tokens),
        ideal=ideal,
        engine_blocks=engine,
        reported=measured,
        mock_truth=mock,
        gap=less(measured, ideal),
        alignment=less(engine, ideal),
        rest=less(measured, engine),
        not_reported=len(ok) - len(reported),
    )


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def pts(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:+.2f} pts"


def hit_cells(h: ReplayHits) -> list[str]:
    """The hit table's row as the report shows it (HIT_HEAD's order)."""
    return [
        h.phase,
        fmt(h.requests),
        fmt(h.prompt_tokens),
        pct(h.ideal),
        pct(h.engine_blocks),
        pct(h.reported),
        pct(h.mock_truth),
        pts(h.gap),
        pts(h.alignment),
        pts(h.rest),
        fmt(h.not_reported),
    ]


HIT_CAPTION = "hits: measured vs the trace's ideal"
HIT_HEAD = [
    "phase",
    "requests",
    "prompt tokens",
    "ideal (trace)",
    "engine blocks",
    "reported",
    "mock truth",
    "gap",
    "of it: alignment",
    "of it: rest",
    "not reported",
]


def ttft_rows(df: pd.DataFrame) -> list[list[str]]:
    """TTFT p50 / p99 of successful requests by the share of their prompt the trace says is reusable."""
    ok = df[(df["status"] == "ok") & df["ttft_ms"].notna()]
    out = []
    for lo, hi, name in BUCKETS:
        share = ok["expected_share"]
        sel = ok[share == 0] if hi == 0 else ok[(share > lo) & (share <= hi)]
        if len(sel):
            q = sel["ttft_ms"].quantile([0.5, 0.99]).tolist()
            out.append([name, fmt(len(sel)), fmt(float(sel["input_length"].mean())), fmt(q[0]), fmt(q[1])])
    return out


def lateness_rows(df: pd.DataFrame, summary: dict[str, Any]) -> list[list[str]]:
    if "dispatch_delay_ms" not in df:
        return []
    late = df["dispatch_delay_ms"].dropna()
    if not len(late):
        return []
    q = late.quantile([0.5, 0.99]).tolist()
    schedule = summary.get("schedule", "?")
    note = (
        "closed loop: from a worker being free"
        if schedule == "concurrent"
        else "open loop: from the arrival time"
    )
    return [[schedule, fmt(len(late)), fmt(q[0]), fmt(q[1]), fmt(float(late.max())), note]]


def replay_summary(run_dir: Path) -> ReplaySummary | None:
    """summary.json's replay part: the hit table as numbers, the window's ideals, and the section's
    text and tables as the report renders them (None: the run has no replay rows)."""
    df = replay_frame(run_dir)
    if not len(df):
        return None
    path = run_dir / REPLAY_SUMMARY
    summary: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    trace = _manifest_trace(run_dir)
    hits = [hit_stats(str(p), g) for p, g in df.groupby("phase", sort=False)]
    if len(hits) > 1:
        hits.append(hit_stats("overall", df))
    ctx = summary.get("context")
    tables = [ReplayTable(caption=HIT_CAPTION, head=HIT_HEAD, rows=[hit_cells(h) for h in hits])]
    tt = ttft_rows(df)
    if tt:
        head = ["expected reusable share", "requests", "mean input", "TTFT p50 ms", "TTFT p99 ms"]
        tables.append(ReplayTable(head=head, rows=tt))
    lr = lateness_rows(df, summary)
    if lr:
        head = ["schedule", "requests", "lateness p50 ms", "p99 ms", "max ms", "measured"]
        tables.append(ReplayTable(head=head, rows=lr))
    return ReplaySummary(
        hits=hits,
        ideal_with_history=trace.ideal_with_history if trace is not None else None,
        rows_before=trace.rows_before if trace is not None else None,
        context=ContextRecord.model_validate(ctx) if ctx else None,
        paragraphs=replay_paragraphs(summary, trace, hits[-1]),
        tables=tables,
    )


def _manifest_trace(run_dir: Path) -> TraceRecord | None:
    """manifest.trace (None for a run written before it, or one whose manifest does not read)."""
    from kvbench.results.reading import load_record

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the summary reports the manifest's own notes once
            return load_record(run_dir).manifest.trace
    except (UsageError, ValueError, OSError):
        return None


def replay_paragraphs(summary: dict[str, Any], trace: TraceRecord | None, overall: ReplayHits) -> list[str]:
    """The section's text: what the shares mean, the token-exact check, rows left out, the window."""
    about = summary.get("trace", {})
    paras = [
        f"Trace {about.get('path', '?')} ({about.get('format', '?')}, "
        f"{about.get('block_tokens', '?')} tokens a block; "
        f"engine block {summary.get('engine_block_tokens') or 'unknown'}), schedule "
        f"{summary.get('schedule', '?')}. Shares of prompt tokens: ideal = what an unbounded prefix cache "
        "could reuse by the trace's ids; engine blocks = the same in the engine's whole blocks (one token "
        "always computed); reported = usage cached_tokens; gap = reported - ideal, split into block "
        "alignment (engine - ideal) and the rest (eviction at the tiers' capacities, requests in flight "
        "together, a server under-reporting)."
    ]
    sample = summary.get("token_exact_sample") or {}
    if sample.get("checked"):
        paras.append(
            f"Token-exact check: {sample['exact']} of {sample['checked']} prompts counted by the server "
            "as their input_length."
        )
    ctx = summary.get("context") or {}
    if ctx.get("skipped") or ctx.get("clipped"):
        # the manifest's reasons first (the record), replay.json's for a run written before them
        why = (trace.skipped_why if trace is not None else {}) or ctx.get("skipped_why") or {}
        paras.append(
            f"Rows over the model's context {ctx.get('max_model_len')}: {ctx.get('skipped', 0)} "
            f"skipped{why_text(why)}, {ctx.get('clipped', 0)} clipped to fit "
            f"(trace.over_context={ctx.get('policy')})."
        )
    window = window_paragraph(summary.get("selection") or {}, trace, overall)
    if window:
        paras.append(window)
    warning = (summary.get("lateness") or {}).get("warning")
    if warning:
        paras.append(f"**Warning:** {warning}.")
    return paras


def window_paragraph(sel: dict[str, Any], trace: TraceRecord | None, overall: ReplayHits) -> str | None:
    """A window's cold start in words, with the ideal it would have had with the trace's history."""
    if not (sel.get("start_ms") or sel.get("window_ms")):
        return None
    width = sel.get("window_ms")
    span = f"rows from {sel.get('start_ms', 0):g} ms " + (
        f"for {width:g} ms of the trace" if width else "to the end of the trace"
    )
    if trace is None:  # a run written before manifest.trace: no history figure
        return (
            f"**This window starts from an empty cache:** its ideal counts only reuse inside the window "
            f"({span}); a prefix the trace shared before the window is a miss here, so the whole trace's "
            "share is higher (`kvbench trace analyze` gives it)."
        )
    if not trace.starts_cold:
        return f"This window ({span}) starts at the trace's first row: an empty cache loses no history."
    return (
        f"**This window starts from an empty cache:** ideal {pct(overall.ideal)}; with the trace's "
        f"{fmt(trace.rows_before)} earlier rows cached it would be {pct(trace.ideal_with_history)} "
        f"({span}): a prefix shared with those rows is a miss here."
    )


def replay_section(rs: ReplaySummary | None) -> Section | None:
    """The replay section, rendered from summary.json's replay part (so the two agree)."""
    if rs is None:
        return None
    tables = [Table(t.head, t.rows, caption=t.caption) for t in rs.tables]
    return Section("Replay: hits vs the trace", list(rs.paragraphs), tables)


def key_rows(run_dir: Path) -> list[list[str]]:
    """The terminal's key table: reported hits beside the trace's ideal, TTFT and lateness."""
    df = replay_frame(run_dir)
    ok = df[df["status"] == "ok"] if len(df) else df
    if not len(ok):
        return []
    tokens = float(ok["input_length"].sum())
    ideal = 100 * float(ok["expected_cached_tokens"].sum()) / tokens
    reported = 100 * float(ok["cached_tokens"].fillna(0).sum()) / tokens
    late = ok["dispatch_delay_ms"].dropna()
    return [
        [
            "replay hits",
            "trace ideal -> reported",
            f"{ideal:.1f}% -> {reported:.1f}% of prompt tokens",
            f"TTFT p50 {fmt(float(ok['ttft_ms'].median()))} ms, lateness p99 "
            f"{fmt(float(late.quantile(0.99))) if len(late) else 'n/a'} ms",
        ]
    ]


def plot_ttft_vs_share(ax: Axes, df: pd.DataFrame) -> None:
    ok = df[(df["status"] == "ok") & df["ttft_ms"].notna()]
    measured = ok["cached_tokens"] / ok["input_length"].clip(lower=1)
    points = ax.scatter(
        100 * ok["expected_share"], ok["ttft_ms"], c=100 * measured, cmap="viridis", s=14, vmin=0, vmax=100
    )
    ax.figure.colorbar(points, ax=ax, label="server-reported cached share (%)")
    ax.set_xlabel("expected reusable share of the prompt (trace ideal, %)")
    ax.set_ylabel("TTFT (ms)")
    ax.set_yscale("log")
    ax.set_title("TTFT vs the share of the prompt the trace says is reusable")
    ax.grid(True, alpha=0.3)


def plot_hits_over_time(ax: Axes, df: pd.DataFrame, bins: int = 40) -> None:
    """Shares of prompt tokens per slice of the replay (trace order): the trace's ideal, the engine's
    blocks and what the server reported, so a gap that opens as the cache fills shows where."""
    ok = df[df["status"] == "ok"].sort_values("index")
    size = max(1, -(-len(ok) // bins))
    groups = ok.groupby(ok["index"].rank(method="first").sub(1).floordiv(size))
    tokens = groups["input_length"].sum().clip(lower=1)
    x = groups["index"].median()
    series = [("ideal (trace)", "expected_cached_tokens", "#7f8c8d", "--"),
              ("engine blocks", "engine_expected_tokens", "#d68910", ":"),
              ("reported", "cached_tokens", "#2471a3", "-")]  # fmt: skip
    for name, col, color, style in series:
        if ok[col].notna().any():
            ax.plot(x, 100 * groups[col].sum() / tokens, style, color=color, label=name, marker=".")
    ax.set_xlabel("request (trace order)")
    ax.set_ylabel("cached share of prompt tokens (%)")
    ax.set_ylim(0, 100)
    ax.set_title(f"Hits over the replay ({size} requests a point)")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(True, alpha=0.3)


def save_replay_plots(run_dir: Path) -> list[Path]:
    df = replay_frame(run_dir)
    if not len(df) or not (df["status"] == "ok").any():
        return []
    from kvbench.report.core.plots import new_figure

    out = []
    for name, fn in (("ttft_vs_reuse", plot_ttft_vs_share), ("hits_over_time", plot_hits_over_time)):
        fig, (ax,) = new_figure()
        fn(ax, df)
        path = run_dir / f"replay_{name}.png"
        save_figure_atomic(fig, path, dpi=110)
        out.append(path)
    return out
