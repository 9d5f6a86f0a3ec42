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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvbench.report.core.formats import Section, Table, fmt
from kvbench.results import read_jsonl
from kvbench.results.files import save_figure_atomic
from kvbench.results.replay_rows import REPLAY_ROWS, REPLAY_SUMMARY

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


def hit_row(name: str, df: pd.DataFrame) -> list[str]:
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
    pct = lambda x: "n/a" if x is None else f"{100 * x:.1f}%"  # noqa: E731
    pts = lambda a, b: "n/a" if a is None or b is None else f"{100 * (a - b):+.2f} pts"  # noqa: E731
    return [
        name,
        fmt(len(df)),
        fmt(int(tokens)),
        pct(ideal),
        pct(engine),
        pct(measured),
        pct(mock),
        pts(measured, ideal),
        pts(engine, ideal),
        pts(measured, engine),
        fmt(len(ok) - len(reported)),
    ]


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


def replay_section(run_dir: Path) -> Section | None:
    df = replay_frame(run_dir)
    if not len(df):
        return None
    path = run_dir / REPLAY_SUMMARY
    summary: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    trace = summary.get("trace", {})
    rows = [hit_row(str(p), g) for p, g in df.groupby("phase", sort=False)]
    if len(rows) > 1:
        rows.append(hit_row("overall", df))
    paras = [
        f"Trace {trace.get('path', '?')} ({trace.get('format', '?')}, "
        f"{trace.get('block_tokens', '?')} tokens a block; "
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
        paras.append(
            f"Rows over the model's context {ctx.get('max_model_len')}: {ctx.get('skipped', 0)} skipped, "
            f"{ctx.get('clipped', 0)} clipped to fit (trace.over_context={ctx.get('policy')})."
        )
    sel = summary.get("selection") or {}
    if sel.get("start_ms") or sel.get("window_ms"):
        paras.append(
            "**This window starts from an empty cache:** its ideal counts only reuse inside the window "
            f"(rows from {sel.get('start_ms', 0):g} ms, for {sel.get('window_ms') or 'the rest'} ms of the "
            "trace); a prefix the trace shared before the window is a miss here, so the whole trace's "
            "share is higher (`kvbench trace analyze` gives it)."
        )
    warning = (summary.get("lateness") or {}).get("warning")
    if warning:
        paras.append(f"**Warning:** {warning}.")
    tables = [Table(HIT_HEAD, rows, caption="hits: measured vs the trace's ideal")]
    tt = ttft_rows(df)
    if tt:
        tables.append(
            Table(["expected reusable share", "requests", "mean input", "TTFT p50 ms", "TTFT p99 ms"], tt)
        )
    lr = lateness_rows(df, summary)
    if lr:
        tables.append(Table(["schedule", "requests", "lateness p50 ms", "p99 ms", "max ms", "measured"], lr))
    return Section("Replay: hits vs the trace", paras, tables)


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
