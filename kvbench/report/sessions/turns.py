"""The sessions test in a report: the per-turn table and four plots, from turns.jsonl alone.

Pure functions in the style of report/core/plots.py: a DataFrame of turn rows in, a table or a
drawing on the Axes given out (Agg canvas via `matplotlib.figure.Figure`, no pyplot state);
`save_session_plots` is the thin driver that writes PNGs; `session_section_rows` gives the
table a report section renders. Nothing here talks to a server.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvbench.results.files import save_figure_atomic
from kvbench.results.turns import TIER_ORDER, TURNS, per_tier, per_turn

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes

CACHED_COLOR, BASELINE_COLOR = "#2471a3", "#c0392b"
TIER_COLORS = {"G1": "#1e8449", "G2": "#2471a3", "G3": "#d68910", "G4": "#7d3c98", "computed": "#bfc9ca"}


def read_turns(run_dir: Path) -> pd.DataFrame:
    """turns.jsonl as a DataFrame (empty, with the key columns, when the run has none)."""
    import pandas as pd

    from kvbench.results import read_jsonl

    path = run_dir / TURNS
    rows = list(read_jsonl(path)) if path.exists() else []
    cols = ["phase", "label", "session_id", "turn", "ok", "context_tokens", "cached_tokens", "ttft_ms"]
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=cols)


def turn_table(df: pd.DataFrame) -> pd.DataFrame:
    """The per-turn table (turn, users, context, TTFT cached vs baseline, speedup, hit ratio, tier)."""
    import pandas as pd

    records = _records(df)
    return pd.DataFrame(per_turn(records)) if records else pd.DataFrame()


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [{str(k): v for k, v in r.items()} for r in df.to_dict("records")] if len(df) else []


def _ok(df: pd.DataFrame, label: str) -> pd.DataFrame:
    if not len(df):
        return df
    sel = df[(df["label"] == label) & (df["ok"].astype(bool))]
    return sel[sel["ttft_ms"].notna()]


def _context(df: pd.DataFrame) -> pd.Series:
    ctx = df["context_tokens"]
    if "prompt_tokens_server" in df:
        ctx = ctx.fillna(df["prompt_tokens_server"])
    return ctx


def plot_ttft_vs_turn(ax: Axes, df: pd.DataFrame) -> None:
    """Median TTFT per turn index, cached and baseline, with the p10-p90 band."""
    from matplotlib.ticker import MaxNLocator

    for label, color in (("cached", CACHED_COLOR), ("baseline", BASELINE_COLOR)):
        sel = _ok(df, label)
        if not len(sel):
            continue
        g = sel.groupby("turn")["ttft_ms"]
        x = g.median().index.to_numpy()
        ax.plot(x, g.median().to_numpy(), marker="o", color=color, label=f"{label} (median)")
        ax.fill_between(x, g.quantile(0.1).to_numpy(), g.quantile(0.9).to_numpy(), color=color, alpha=0.15)
    ax.set_xlabel("turn")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("TTFT (ms)")
    ax.set_title("TTFT by turn")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()


def plot_ttft_vs_context(ax: Axes, df: pd.DataFrame) -> None:
    """Every turn's TTFT against its context length, cached and baseline."""
    for label, color in (("cached", CACHED_COLOR), ("baseline", BASELINE_COLOR)):
        sel = _ok(df, label)
        if len(sel):
            ax.scatter(_context(sel), sel["ttft_ms"], s=14, alpha=0.7, color=color, label=label)
    ax.set_xlabel("context (prompt tokens)")
    ax.set_ylabel("TTFT (ms)")
    ax.set_title("TTFT by context length")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()


def plot_hit_ratio(ax: Axes, df: pd.DataFrame) -> None:
    """Cached over context tokens per turn index (cached phase), with the speedup on a twin axis."""
    from matplotlib.ticker import MaxNLocator

    table = turn_table(df)
    if not len(table):
        return
    ax.bar(table["turn"], table["hit_ratio"].fillna(0), color=CACHED_COLOR, alpha=0.8, label="hit ratio")
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("turn")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("cached / context tokens")
    ax.set_title("Reuse per turn")
    if table["speedup"].notna().any():
        ax2 = ax.twinx()
        ax2.plot(table["turn"], table["speedup"], marker="s", color=BASELINE_COLOR, label="speedup")
        ax2.set_ylabel("speedup vs baseline (x)")


def tier_shares(df: pd.DataFrame, bins: int = 10) -> pd.DataFrame:
    """Share of prompt tokens served per tier (and computed) over the cached phase, in time bins."""
    import pandas as pd

    sel = _ok(df, "cached")
    if not len(sel) or "sent_ns" not in sel or sel["sent_ns"].isna().all():
        return pd.DataFrame()
    t = (sel["sent_ns"] - sel["sent_ns"].min()) / 1e9
    edges = pd.cut(t, bins=max(1, min(bins, len(sel))), include_lowest=True)
    rows = []
    for interval, part in sel.groupby(edges, observed=True):
        total = float(_context(part).fillna(0).sum())
        by = {k: 0.0 for k in TIER_ORDER}
        for d in part.get("tokens_by_tier", pd.Series([{}] * len(part))):
            for k, v in (d or {}).items():
                if k in by:
                    by[k] += float(v)
        cached = float(part["cached_tokens"].fillna(0).sum())
        # tokens reused but not attributed to a tier (no ground truth, counters overlapped)
        unattributed = max(0.0, cached - sum(by.values()))
        row = {"t_s": float(interval.mid), **{k: v / total if total else 0.0 for k, v in by.items()}}
        row["unattributed"] = unattributed / total if total else 0.0
        row["computed"] = max(0.0, 1.0 - sum(v for k, v in row.items() if k != "t_s"))
        rows.append(row)
    return pd.DataFrame(rows)


def plot_tier_shares(ax: Axes, df: pd.DataFrame) -> None:
    """Stacked shares of prompt tokens by the tier that served them, over the cached phase."""
    shares = tier_shares(df)
    if not len(shares):
        return
    keys = [k for k in (*TIER_ORDER, "unattributed", "computed") if k in shares and shares[k].any()]
    ax.stackplot(
        shares["t_s"],
        [shares[k] for k in keys],
        labels=keys,
        colors=[TIER_COLORS.get(k, "#7f8c8d") for k in keys],
        alpha=0.85,
    )
    ax.set_ylim(0, 1)
    ax.set_xlabel("time in cached phase (s)")
    ax.set_ylabel("share of prompt tokens")
    ax.set_title("Prompt tokens by serving tier")
    ax.legend(loc="upper left", fontsize=8)


def save_session_plots(df: pd.DataFrame, out_dir: Path, prefix: str = "sessions") -> list[Path]:
    """Write the four plots as PNGs; returns their paths (none when there are no turns)."""
    if not len(df):
        return []
    from kvbench.report.core.plots import new_figure

    out: list[Path] = []
    for name, fn in (
        ("ttft_by_turn", plot_ttft_vs_turn),
        ("ttft_by_context", plot_ttft_vs_context),
        ("hit_ratio", plot_hit_ratio),
        ("tier_shares", plot_tier_shares),
    ):
        fig, (ax,) = new_figure()
        fn(ax, df)
        path = out_dir / f"{prefix}_{name}.png"
        save_figure_atomic(fig, path, dpi=110)
        out.append(path)
    return out


def session_section_rows(df: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the per-turn table, formatted for a report section."""
    return session_rows_from_table(per_turn(_records(df)))


def session_rows_from_table(table: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The per-turn table (kvbench.results.turns.per_turn) as report cells."""
    header = ["turn", "users", "context tokens", "TTFT cached ms", "TTFT baseline ms", "speedup"]
    header += ["hit ratio", "tier"]

    def f(x: Any, spec: str) -> str:
        return "-" if x is None or x != x else format(x, spec)

    rows = [
        [
            str(t["turn"]),
            str(t["users"]),
            f(t["context_tokens"], ",.0f"),
            f(t["ttft_cached_ms"], ",.1f"),
            f(t["ttft_baseline_ms"], ",.1f"),
            f(t["speedup"], ".1f"),
            f(t["hit_ratio"], ".1%"),
            t["tier"] or "-",
        ]
        for t in table
    ]
    return header, rows


def compare_turns(frames: Sequence[tuple[str, pd.DataFrame]]) -> pd.DataFrame:
    """Two or more sessions runs side by side: median cached TTFT and hit ratio per turn."""
    import pandas as pd

    parts = []
    for name, df in frames:
        t = turn_table(df)
        if len(t):
            parts.append(t[["turn", "ttft_cached_ms", "hit_ratio"]].assign(run=name))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def turns_summary(run_dir: Path) -> dict[str, Any] | None:
    """What summary.json holds for a sessions run: the per-turn and per-tier tables (None if no turns)."""
    df = read_turns(run_dir)
    if not len(df):
        return None
    records = _records(df)
    return {"per_turn": per_turn(records), "per_tier": per_tier(records), "turns": len(records)}


def tier_rows(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the by-serving-tier table (turns after the first, cached phase)."""

    def f(x: Any, spec: str) -> str:
        return "-" if x is None or x != x else format(x, spec)

    header = ["served from", "turns", "TTFT p50 ms", "context p50", "pause before p50 s"]
    rows = [
        [
            t["tier"],
            str(t["turns"]),
            f(t["ttft_ms"], ",.1f"),
            f(t["context_tokens"], ",.0f"),
            f(t["since_prev_turn_s"], ".2f"),
        ]
        for t in summary.get("per_tier") or []
    ]
    return header, rows


def compare_rows(names: Sequence[str], run_dirs: Sequence[Path]) -> tuple[list[str], list[list[str]]]:
    """Per-turn cached TTFT and hit ratio of several sessions runs, side by side (first = reference)."""
    frames = [(n, read_turns(Path(d))) for n, d in zip(names, run_dirs, strict=True)]
    both = compare_turns(frames)
    if not len(both):
        return [], []
    ref = both[both["run"] == names[0]].set_index("turn")["ttft_cached_ms"]
    header = ["run", "turn", "TTFT cached p50 ms", f"vs {names[0]}", "hit ratio"]
    rows = []
    for r in both.to_dict("records"):
        base = ref.get(r["turn"])
        ratio = r["ttft_cached_ms"] / base if base and r["ttft_cached_ms"] == r["ttft_cached_ms"] else None
        rows.append(
            [
                str(r["run"]),
                str(r["turn"]),
                "-" if r["ttft_cached_ms"] != r["ttft_cached_ms"] else f"{r['ttft_cached_ms']:,.1f}",
                "-" if ratio is None else f"{ratio:.2f}x",
                "-"
                if r["hit_ratio"] is None or r["hit_ratio"] != r["hit_ratio"]
                else f"{r['hit_ratio']:.1%}",
            ]
        )
    return header, rows


def plot_compare_ttft(ax: Axes, frames: Sequence[tuple[str, pd.DataFrame]]) -> None:
    """Median cached TTFT by turn, one line per run."""
    for name, df in frames:
        t = turn_table(df)
        if len(t):
            ax.plot(t["turn"], t["ttft_cached_ms"], marker="o", label=name)
    ax.set_xlabel("turn")
    ax.set_ylabel("TTFT cached p50 (ms)")
    ax.set_title("Sessions: cached TTFT by turn, all runs")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()


def compare_sessions(
    names: Sequence[str], run_dirs: Sequence[Path], out: Path
) -> tuple[tuple[str, list[str], list[Any]] | None, Path]:
    """`kvbench compare` on sessions runs: (title, paragraphs, [table]) and the per-turn TTFT plot."""
    from kvbench.report.core.formats import Table
    from kvbench.report.core.plots import new_figure

    path = out / "compare_sessions_ttft.png"
    header, rows = compare_rows(names, run_dirs)
    if not rows:
        return None, path
    fig, (ax,) = new_figure()
    plot_compare_ttft(ax, [(n, read_turns(Path(d))) for n, d in zip(names, run_dirs, strict=True)])
    save_figure_atomic(fig, path, dpi=110)
    return ("Sessions: cached TTFT per turn", [], [Table(header, rows)]), path
