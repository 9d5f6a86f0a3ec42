"""Which PNGs a run report gets, and writing them: the driver over `plots` and `timeline`.

TTFT vs length (with model fits and the published points at the run's time scale),
speedup vs length, throughput over time, and quiet vs noisy side by side.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvbench.report.core import plots
from kvbench.report.summary import RunSummary

if TYPE_CHECKING:
    import pandas as pd

TTFT_LABELS = ("cold", "warm", "evicted-warm")


@dataclass(frozen=True)
class Published:
    """Published points to overlay, already at the run's time scale."""

    name: str
    points: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # label -> (tokens, ttft_ms)
    speedups: list[tuple[int, float]] = field(default_factory=list)  # (tokens, x): not time-scaled
    time_scale: float = 1.0

    @property
    def label(self) -> str:
        scaled = f", times x{self.time_scale:g}" if self.time_scale != 1.0 else ""
        return f"published {self.name}{scaled}"


def _ttft_plot(run_dir: Path, summary: RunSummary, published: Published | None) -> Path | None:
    rows = [r.model_dump() for r in summary.ttft_by_length if r.label in TTFT_LABELS]
    if len({r["tokens"] for r in rows}) < 2 and not any(r["label"] == "cold" for r in rows):
        return None
    fig, (ax1, ax2) = plots.new_figure(2, width=6.5)
    points = published.points if published else None
    label = published.label if published else "published"
    fits = summary.fits
    plots.plot_ttft_vs_length(ax1, rows, published=points, log=False, published_label=label)
    plots.plot_ttft_vs_length(
        ax2,
        rows,
        published=points,
        log=True,
        fits={"cold": fits.get("cold"), "warm": fits.get("warm")},
        published_label=label,
    )
    ax2.set_title("same, log scale, with model fits")
    return plots.save(fig, run_dir / "ttft_vs_length.png")


def _noise_plot(
    run_dir: Path, df: pd.DataFrame, summary: RunSummary, noise_rows: list[dict[str, Any]]
) -> Path | None:
    from kvbench.report.core import stats, timeline

    quiet = df[df["label"] == "quiet"]
    noisy = df[df["label"] == "noisy"]
    if quiet.empty or noisy.empty:
        return None
    # several pairs: show the first quiet and the first noisy phase (one phase each, not a pooled span)
    quiet = quiet[quiet["phase"] == quiet["phase"].iloc[0]]
    noisy = noisy[noisy["phase"] == noisy["phase"].iloc[0]]
    span = max(stats.span_s(quiet) or 1.0, stats.span_s(noisy) or 1.0)
    width = timeline.auto_bin(span, 15)
    tq, tn = timeline.timeline(quiet, width), timeline.timeline(noisy, width)
    nd = timeline.noise_rate([r for r in noise_rows if r.get("phase") == noisy["phase"].iloc[0]])
    if not nd.empty:
        t0 = float(noisy["sent_ns"].min()) / 1e9
        nd = nd.assign(t_s=nd["t_s"] - t0)
    ymax = max(float(tq["completions_per_s"].max()), float(tn["completions_per_s"].max())) * 1.15
    fig, (a1, a2) = plots.new_figure(2, width=6)
    q = summary.noise
    rq = q.quiet_requests_per_s if q else None
    rn = q.noisy_requests_per_s if q else None
    plots.plot_phase_with_noise(a1, tq, None, f"quiet: {rq:.2f} req/s" if rq else "quiet", ymax)
    gbps = (q.noise_mean_bytes_per_s or 0) / 1e9 if q else 0
    title = (f"noisy: {rn:.2f} req/s" if rn else "noisy") + (f", noise {gbps:.2f} GB/s mean" if gbps else "")
    plots.plot_phase_with_noise(a2, tn, nd, title, ymax)
    return plots.save(fig, run_dir / "quiet_vs_noisy.png")


def save_run_plots(
    run_dir: Path,
    df: pd.DataFrame,
    summary: RunSummary,
    noise_rows: list[dict[str, Any]] | None = None,
    published: Published | None = None,
) -> list[Path]:
    """Write the PNGs that apply to this run; returns their paths."""
    from kvbench.report.core import stats, timeline

    out: list[Path] = []
    ttft = _ttft_plot(run_dir, summary, published)
    if ttft is not None:
        out.append(ttft)
    if summary.ttft_speedups:
        fig, (ax,) = plots.new_figure()
        speedups = [s.model_dump() for s in summary.ttft_speedups]
        pub = published.speedups if published and published.speedups else None
        plots.plot_speedup_vs_length(
            ax, speedups, published=pub, published_label=f"published {published.name}" if published else ""
        )
        out.append(plots.save(fig, run_dir / "speedup_vs_length.png"))
    df = stats.normalise(df)
    tl = timeline.timeline(df, bin_s=None)
    if not tl.empty:
        fig, (ax,) = plots.new_figure(width=9)
        plots.plot_throughput_timeline(ax, tl, "Throughput over time (cold-cache fill shows as a slow start)")
        out.append(plots.save(fig, run_dir / "throughput_timeline.png"))
    noise = _noise_plot(run_dir, df, summary, noise_rows or [])
    if noise is not None:
        out.append(noise)
    from kvbench.report.noisy.plots import save_noise_plots

    out += save_noise_plots(run_dir, summary)
    return out
