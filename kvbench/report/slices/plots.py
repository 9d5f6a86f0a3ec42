"""Pictures of a run over time (kvbench.report.slices.frame' table): one panel per quantity, phases marked.

`over_time.png` (and `over_time_phases.png`, a zoom on the measured phases when a fill takes most of
the run): requests/s, TTFT p50/p99, hit ratio, KV GB/s per tier, queue and KV usage, the host's
network and disk, the GPU: each panel only when the run has its numbers; every phase is a shaded
span named on top, a noisy one hatched red. `onboard_vs_ttft.png`: per request, the KV bytes it read
(the mock's ground truth) against its TTFT, noisy requests apart.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kvbench.report.core import plots

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes

TIER_COLORS = {"G1": "#4c72b0", "G2": "#55a868", "G3": "#dd8452", "G4": "#c44e52"}


def phase_runs(sl: pd.DataFrame) -> list[tuple[str, bool, float, float]]:
    """(phase, noisy, start s, end s) of each run of consecutive slices of one phase."""
    width = float(sl["slice_s"].iloc[0])
    runs: list[tuple[str, bool, float, float]] = []
    for phase, noisy, t in zip(sl["phase"], sl["noisy"], sl["t_s"], strict=False):
        if runs and runs[-1][0] == phase and runs[-1][1] == noisy:
            runs[-1] = (phase, bool(noisy), runs[-1][2], t + width)
        else:
            runs.append((phase, bool(noisy), t, t + width))
    return [r for r in runs if r[0]]


def _mark_phases(ax: Axes, sl: pd.DataFrame, label: bool, xlim: tuple[float, float]) -> None:
    """Shade each phase; hatch the noisy ones; name on the top panel those wide enough to read."""
    for i, (phase, noisy, a, b) in enumerate(phase_runs(sl)):
        if b < xlim[0] or a > xlim[1]:
            continue
        if noisy:
            ax.axvspan(a, b, facecolor="#c44e52", alpha=0.18, hatch="//", edgecolor="#c44e52", linewidth=0)
        else:
            ax.axvspan(a, b, facecolor="0.5", alpha=0.06 if i % 2 else 0.14, linewidth=0)
        if label and (b - a) >= 0.06 * (xlim[1] - xlim[0]):
            ax.text(
                (max(a, xlim[0]) + min(b, xlim[1])) / 2,
                1.01,
                phase + (" (noise)" if noisy else ""),
                transform=ax.get_xaxis_transform(),
                ha="center",
                va="bottom",
                fontsize=7,
            )


def _step(ax: Axes, sl: pd.DataFrame, col: str, **kw: object) -> None:
    """One flat segment per slice (a NaN slice is a gap)."""
    import numpy as np

    edges = np.append(sl["t_s"].to_numpy(dtype=float), float(sl["t_s"].iloc[-1] + sl["slice_s"].iloc[-1]))
    ax.stairs(sl[col].to_numpy(dtype=float), edges, baseline=None, **kw)  # type: ignore[arg-type]


def _requests(ax: Axes, sl: pd.DataFrame) -> None:
    _step(ax, sl, "requests_per_s", label="ok answers/s", color="#4c72b0")
    if "errors_per_s" in sl and sl["errors_per_s"].any():
        _step(ax, sl, "errors_per_s", label="errors/s", color="#c44e52")
    ax.set_ylabel("requests/s")


def _ttft(ax: Axes, sl: pd.DataFrame) -> None:
    _step(ax, sl, "ttft_p50_ms", label="TTFT p50", color="#4c72b0")
    _step(ax, sl, "ttft_p99_ms", label="TTFT p99", color="#dd8452", linestyle="--")
    ax.set_ylabel("TTFT (ms)")
    if sl["ttft_p99_ms"].max() > 20 * max(sl["ttft_p50_ms"].min(), 1e-3):
        ax.set_yscale("log")


def _hits(ax: Axes, sl: pd.DataFrame) -> None:
    if "hit_ratio" in sl:
        _step(ax, sl, "hit_ratio", label="hit ratio (server counters)", color="#55a868")
    if "cached_ratio" in sl:
        _step(ax, sl, "cached_ratio", label="cached share (per request)", color="#8172b2", linestyle="--")
    ax.set_ylim(-0.02, 1.05)
    ax.set_ylabel("hit ratio")


def transfer_cols(sl: pd.DataFrame) -> list[str]:
    return [c for c in sl.columns if c.startswith(("onboard_", "offload_", "gt_onboard_"))]


def _tiers(ax: Axes, sl: pd.DataFrame) -> None:
    for col in transfer_cols(sl):
        parts = col.split("_")
        truth = col.startswith("gt_")
        direction, tier = (parts[1], parts[2]) if truth else (parts[0], parts[1])
        style = ":" if truth else ("-" if direction == "onboard" else "--")
        name = (
            f"{tier} {direction}"
            + (" (ground truth)" if truth else "")
            + ("" if col.endswith("gb_s") else " (not GB/s)")
        )
        _step(ax, sl, col, label=name, color=TIER_COLORS.get(tier, "0.3"), linestyle=style)
    ax.set_ylabel("KV GB/s")


def _engine_state(ax: Axes, sl: pd.DataFrame) -> None:
    if "queue" in sl:
        _step(ax, sl, "queue", label="queued requests", color="#4c72b0")
        ax.set_ylabel("queued")
    kv = "kv_used_gb" if "kv_used_gb" in sl else "kv_usage" if "kv_usage" in sl else None
    if kv is not None:
        twin = ax.twinx()
        _step(twin, sl, kv, label="KV held (GB)" if kv == "kv_used_gb" else "KV usage", color="#dd8452")
        twin.set_ylabel("KV GB" if kv == "kv_used_gb" else "KV usage")
        twin.legend(loc="upper right", fontsize=7)


def host_cols(sl: pd.DataFrame) -> list[str]:
    return [c for c in sl.columns if c.startswith(("host_", "node_", "lab_link_"))]


def _host(ax: Axes, sl: pd.DataFrame) -> None:
    for col in host_cols(sl):
        _step(ax, sl, col, label=col.removesuffix("_gb_s").replace("_", " "))
    ax.set_ylabel("GB/s")


def _gpu(ax: Axes, sl: pd.DataFrame) -> None:
    if "gpu_util_pct" in sl:
        _step(ax, sl, "gpu_util_pct", label="GPU utilisation %", color="#55a868")
        ax.set_ylabel("GPU %")
    if "gpu_mem_used_gb" in sl:
        twin = ax.twinx()
        _step(twin, sl, "gpu_mem_used_gb", label="GPU memory used (GB)", color="#8172b2")
        twin.set_ylabel("GB")
        twin.legend(loc="upper right", fontsize=7)


def _moved(sl: pd.DataFrame, col: str) -> bool:
    """A column with something to draw: present and not zero throughout (an idle queue says nothing)."""
    return col in sl and bool(sl[col].fillna(0).ne(0).any())


def panels(sl: pd.DataFrame) -> list[Callable[[Axes, pd.DataFrame], None]]:
    """The panels this table has numbers for, top to bottom."""
    out: list[Callable[[Axes, pd.DataFrame], None]] = [_requests]
    if "ttft_p50_ms" in sl and sl["ttft_p50_ms"].notna().any():
        out.append(_ttft)
    if any(c in sl and sl[c].notna().any() for c in ("hit_ratio", "cached_ratio")):
        out.append(_hits)
    if transfer_cols(sl):
        out.append(_tiers)
    if any(_moved(sl, c) for c in ("queue", "kv_used_gb", "kv_usage")):
        out.append(_engine_state)
    if any(_moved(sl, c) for c in host_cols(sl)):
        out.append(_host)
    if any(c in sl for c in ("gpu_util_pct", "gpu_mem_used_gb")):
        out.append(_gpu)
    return out


def _figure(sl: pd.DataFrame, path: Path, title: str, xlim: tuple[float, float] | None = None) -> Path:
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    part = sl if xlim is None else sl[(sl["t_s"] + sl["slice_s"] >= xlim[0]) & (sl["t_s"] <= xlim[1])]
    lim = xlim or (float(sl["t_s"].min()), float(sl["t_s"].max() + sl["slice_s"].iloc[0]))
    draw = panels(part)
    fig = Figure(figsize=(9, 1.9 * len(draw) + 0.8), layout="constrained")
    axes = fig.subplots(len(draw), 1, sharex=True, squeeze=False)[:, 0]
    for i, (ax, panel) in enumerate(zip(axes, draw, strict=True)):
        _mark_phases(ax, part, label=i == 0, xlim=lim)
        panel(ax, part)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=7)
    axes[-1].set_xlim(*lim)
    axes[-1].set_xlabel(f"seconds since the first phase began (slices of {float(sl['slice_s'].iloc[0]):g} s)")
    if part["noisy"].any():
        key = [Patch(facecolor="#c44e52", alpha=0.3, hatch="//", label="noise on")]
        fig.legend(handles=key, loc="upper right", fontsize=7)
    fig.suptitle(title, fontsize=10)
    return plots.save(fig, path)


def zoom_span(sl: pd.DataFrame) -> tuple[float, float] | None:
    """The span of the other phases when one phase (a cache fill) takes most of the run: else None."""
    runs = phase_runs(sl)
    if len(runs) < 3:
        return None
    span = float(sl["t_s"].max() + sl["slice_s"].iloc[0] - sl["t_s"].min())
    longest = max(runs, key=lambda r: r[3] - r[2])
    if longest[3] - longest[2] < 0.6 * span:
        return None
    rest = [r for r in runs if r is not longest]
    return min(r[2] for r in rest), max(r[3] for r in rest)


def save_slice_plots(run_dir: Path, sl: pd.DataFrame, scatter: pd.DataFrame) -> list[Path]:
    """Write over_time.png (a zoom on the measured phases when one phase fills most of the run, and
    onboard_vs_ttft.png when requests read KV); return their paths."""
    out: list[Path] = []
    if sl.empty:
        return out
    if len(sl) >= 3:  # one or two slices are a table row or two, not a picture over time
        out.append(_figure(sl, run_dir / "over_time.png", "The run over time"))
        if (zoom := zoom_span(sl)) is not None:
            out.append(_figure(sl, run_dir / "over_time_phases.png", "The measured phases over time", zoom))
    if not scatter.empty and scatter["onboard_gb"].gt(0).any():
        fig, (ax,) = plots.new_figure(width=6.5)
        for noisy, color, name in ((True, "#c44e52", "noise on"), (False, "#4c72b0", "quiet")):
            part = scatter[scatter["noise_active"] == noisy]
            if not part.empty:  # quiet drawn hollow on top: both stay visible where they overlap
                face = "none" if not noisy else color
                ax.scatter(
                    part["onboard_gb"],
                    part["ttft_ms"],
                    s=14,
                    facecolors=face,
                    edgecolors=color,
                    alpha=0.6,
                    label=name,
                )
        if scatter["ttft_ms"].max() > 20 * max(float(scatter["ttft_ms"].min()), 1e-3):
            ax.set_yscale("log")
        ax.set_xlabel("KV read from the lower tiers, GB (the mock's ground truth)")
        ax.set_ylabel("TTFT (ms)")
        ax.set_title("Each request: KV onboarded vs its TTFT")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        out.append(plots.save(fig, run_dir / "onboard_vs_ttft.png"))
    return out
