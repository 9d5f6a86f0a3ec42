"""Plots. Each `plot_*` draws on an Axes it is given; `run_plots.save_run_plots` decides which a run gets.

matplotlib is imported inside functions and figures are built with
`matplotlib.figure.Figure` (Agg canvas, no pyplot global state), so importing
this module is cheap and plotting is safe off the main thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvbench.results.files import save_figure_atomic

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

COLORS = {
    "cold": "#c0392b",
    "warm": "#2471a3",
    "evicted-warm": "#7d3c98",
    "baseline": "#c0392b",
    "cached": "#2471a3",
    "quiet": "#1e8449",
    "noisy": "#d68910",
}
PUBLISHED_STYLE: dict[str, Any] = {
    "marker": "*",
    "s": 160,
    "edgecolors": "black",
    "linewidths": 0.8,
    "zorder": 5,
}


def _color(label: str, i: int = 0) -> str:
    palette = ["#2471a3", "#c0392b", "#1e8449", "#d68910", "#7d3c98", "#17202a"]
    return COLORS.get(label, palette[i % len(palette)])


def new_figure(ncols: int = 1, width: float = 7.5, height: float = 4.5) -> tuple[Figure, list[Axes]]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols if ncols > 1 else width, height), layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def plot_ttft_vs_length(
    ax: Axes,
    rows: Sequence[dict[str, Any]],
    published: dict[str, list[tuple[int, float]]] | None = None,
    log: bool = False,
    series: str = "",
    fits: dict[str, Any] | None = None,
    published_label: str = "published",
) -> None:
    """Median TTFT per prompt length and label (error bars: p10-p90), published points as stars.

    `published_label` names the dataset (and the time scale the points were brought to).
    """
    labels = sorted({r["label"] for r in rows})
    for i, label in enumerate(labels):
        pts = sorted((r for r in rows if r["label"] == label), key=lambda r: r["tokens"])
        x = [r["tokens"] / 1000 for r in pts]
        y = [r["ttft_p50_ms"] / 1000 for r in pts]
        lo = [max(0.0, (r["ttft_p50_ms"] - r["ttft_p10_ms"]) / 1000) for r in pts]
        hi = [max(0.0, (r["ttft_p90_ms"] - r["ttft_p50_ms"]) / 1000) for r in pts]
        name = f"{series}{label}" if series else f"{label} (measured median, p10-p90)"
        ax.errorbar(x, y, yerr=[lo, hi], marker="o", capsize=3, color=_color(label, i), label=name)
    for kind, fit in (fits or {}).items():
        if not fit or not fit.get("curve"):
            continue
        color = _color("cold" if kind == "cold" else "warm")
        inside = [p for p in fit["curve"] if not p["extrapolated"]]
        ax.plot(
            [p["tokens"] / 1000 for p in inside],
            [p["ttft_ms"] / 1000 for p in inside],
            ls="--",
            lw=1,
            color=color,
            label=f"{kind} fit: {fit['formula'].removeprefix('TTFT = ')}",
        )
        lo, hi = fit["measured_range"]
        for side in (
            [p for p in fit["curve"] if p["tokens"] <= lo],
            [p for p in fit["curve"] if p["tokens"] >= hi],
        ):
            if len(side) > 1:
                ax.plot(
                    [p["tokens"] / 1000 for p in side],
                    [p["ttft_ms"] / 1000 for p in side],
                    ls=":",
                    lw=1.5,
                    color=color,
                    alpha=0.8,
                )
        if any(p["extrapolated"] for p in fit["curve"]):
            ax.plot(
                [], [], ls=":", color=color, label=f"{kind} fit, EXTRAPOLATED beyond the measured lengths"
            )
    if published:
        for label, ppts in published.items():
            if ppts:
                ax.scatter(
                    [p[0] / 1000 for p in ppts],
                    [p[1] / 1000 for p in ppts],
                    color=_color(label),
                    label=f"{published_label}: {label}",
                    **PUBLISHED_STYLE,
                )
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("prompt length (thousand tokens)")
    ax.set_ylabel("time to first token (s)" + (", log scale" if log else ""))
    ax.set_title("TTFT vs prompt length: cold (recomputed) and warm (from cache)")
    ax.grid(True, which="both", alpha=0.3)
    if labels or published:
        if log:  # the fits add entries: below the axes, where they hide no point
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2)
        else:
            ax.legend(fontsize=8, loc="upper left")


def plot_speedup_vs_length(
    ax: Axes,
    speedups: Sequence[dict[str, Any]],
    published: Sequence[tuple[int, float]] | None = None,
    series: str = "",
    published_label: str = "published",
) -> None:
    """TTFT speedup (median cold / median warm) per length, with bootstrap 95% CI."""
    for i, label in enumerate(sorted({s["label"] for s in speedups})):
        pts = sorted((s for s in speedups if s["label"] == label and s["speedup"]), key=lambda s: s["tokens"])
        x = [s["tokens"] / 1000 for s in pts]
        y = [s["speedup"] for s in pts]
        lo = [s["speedup"] - s["speedup_ci"][0] if s["speedup_ci"] else 0.0 for s in pts]
        hi = [s["speedup_ci"][1] - s["speedup"] if s["speedup_ci"] else 0.0 for s in pts]
        base = pts[0]["baseline"] if pts else "cold"
        ax.errorbar(
            x,
            y,
            yerr=[lo, hi],
            marker="o",
            capsize=3,
            color=_color(label, i),
            label=f"{series}{base} / {label} (median, 95% CI)",
        )
    if published:
        ax.scatter(
            [p[0] / 1000 for p in published],
            [p[1] for p in published],
            color="#f1c40f",
            label=published_label,
            **PUBLISHED_STYLE,
        )
    ax.set_xlabel("prompt length (thousand tokens)")
    ax.set_ylabel("TTFT speedup (x)")
    ax.set_title("TTFT speedup vs prompt length (baseline: cold)")
    tops = [s["speedup_ci"][1] if s["speedup_ci"] else s["speedup"] for s in speedups if s["speedup"]]
    tops += [p[1] for p in published or []]
    ax.set_ylim(0, max(tops, default=1.0) * 1.12)  # room for a star or CI at the top
    ax.grid(True, alpha=0.3)
    if speedups or published:
        ax.legend(fontsize=8)


def plot_throughput_timeline(ax: Axes, tl: pd.DataFrame, title: str = "Throughput over time") -> None:
    """Completions per second (bars) and requests in flight (line, right axis) from sent_ns/end_ns."""
    ax.set_title(title)
    ax.set_xlabel("time since first request (s)")
    ax.set_ylabel("completed requests per second")
    if tl.empty:
        ax.text(0.5, 0.5, "no requests", ha="center", va="center", transform=ax.transAxes)
        return
    phases = [p for p in dict.fromkeys(tl["phase"]) if p]
    for i, phase in enumerate(phases):
        sub = tl[tl["phase"] == phase]
        label = phase.split("-")[0]
        ax.bar(
            sub["t_s"],
            sub["completions_per_s"],
            width=float(tl["bin_s"].iloc[0]),
            align="edge",
            alpha=0.6,
            color=_color(label, i),
            label=f"completions/s ({phase})",
        )
    if float(tl["errors_per_s"].sum()) > 0:
        ax.bar(
            tl["t_s"],
            tl["errors_per_s"],
            width=float(tl["bin_s"].iloc[0]),
            align="edge",
            color="black",
            label="errors/s",
        )
    for phase in phases:
        start = float(tl[tl["phase"] == phase]["t_s"].min())
        ax.axvline(start, color="grey", ls="--", lw=0.8)
        ax.annotate(
            f" {phase}",
            (start, 1.0),
            xycoords=("data", "axes fraction"),
            va="top",
            fontsize=8,
            color="dimgrey",
        )
    ax2 = ax.twinx()
    ax2.plot(
        tl["t_s"] + float(tl["bin_s"].iloc[0]) / 2,
        tl["in_flight"],
        color="#17202a",
        lw=1.2,
        label="in flight (mean per s)",
    )
    ax2.set_ylabel("requests in flight")
    ax2.set_ylim(0, max(1.0, float(tl["in_flight"].max())) * 1.45)
    ax.set_ylim(0, max(1.0, float(tl["completions_per_s"].max())) * 1.45)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper right")
    ax.grid(True, alpha=0.3)


def plot_phase_with_noise(
    ax: Axes, tl: pd.DataFrame, noise: pd.DataFrame | None, title: str, ymax: float | None = None
) -> None:
    """One phase's completions/s, with the competing-traffic rate (GB/s) on the right axis."""
    ax.set_title(title)
    ax.set_xlabel("time since phase start (s)")
    ax.set_ylabel("completed requests per second")
    if tl.empty:
        ax.text(0.5, 0.5, "no requests", ha="center", va="center", transform=ax.transAxes)
        return
    label = str(tl["phase"].iloc[0]).split("-")[0] if len(tl) else ""
    width = float(tl["bin_s"].iloc[0])
    ax.bar(
        tl["t_s"],
        tl["completions_per_s"],
        width=width,
        align="edge",
        alpha=0.7,
        color=_color(label),
        label=f"completions/s ({width:g} s bins)",
    )
    ax2_ = ax.twinx()
    peak = float(tl["in_flight"].max())
    # its own hidden scale (the right axis is the noise rate): say so, with the peak
    ax2_.plot(
        tl["t_s"] + width / 2,
        tl["in_flight"],
        color="#17202a",
        lw=1,
        label=f"in flight (own scale, peak {peak:.0f})",
    )
    ax2_.set_yticks([])
    ax2_.set_ylim(0, max(1.0, float(tl["in_flight"].max())) * 1.6)
    if ymax:
        ax.set_ylim(0, ymax)
    ax2 = ax.twinx()
    ax2.set_ylabel("competing traffic (GB/s)")
    if noise is not None and not noise.empty:
        ax2.plot(
            noise["t_s"],
            noise["bytes_per_s"] / 1e9,
            color="#7d3c98",
            lw=1.5,
            marker=".",
            label="noise rate (noise.jsonl)",
        )
        ax2.set_ylim(0, max(1e-9, float(noise["bytes_per_s"].max()) / 1e9) * 1.3)
    else:
        ax2.set_ylim(0, 1)
        ax2.plot([], [], color="#7d3c98", label="no competing traffic")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    h3, l3 = ax2_.get_legend_handles_labels()
    ax.legend(h1 + h3 + h2, l1 + l3 + l2, fontsize=8, loc="lower right")
    ax.grid(True, alpha=0.3)


def plot_bars(
    ax: Axes, names: Sequence[str], values: Sequence[float | None], ylabel: str, title: str
) -> None:
    """A labelled bar per run/phase (missing values drawn as empty)."""
    vals = [v if v is not None else 0.0 for v in values]
    bars = ax.bar(
        range(len(names)), vals, color=[_color(n.split(" ")[0].split("-")[0], i) for i, n in enumerate(names)]
    )
    for b, v in zip(bars, values, strict=True):
        ax.annotate(
            "n/a" if v is None else f"{v:.3g}",
            (b.get_x() + b.get_width() / 2, b.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_xticks(range(len(names)), list(names), rotation=15, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)


def save(fig: Figure, path: Path) -> Path:
    return save_figure_atomic(fig, path, dpi=110)
