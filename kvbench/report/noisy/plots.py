"""The noisy-neighbour plots: where each phase's time went, and each pair's effect with the interval.

`plot_attribution` stacks every phase's request time by component (shares, so quiet and noisy
phases of different lengths compare), with the request-seconds on top; `plot_pair_effects` shows
each quiet/noisy pair's change in time per request and the interval of their mean, so a reader
sees at once whether the pairs agree and whether the interval crosses zero. Both draw on an Axes
they are given (Agg backend, no pyplot state).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kvbench.report.noisy.attribution import PhaseAttribution
from kvbench.report.noisy.effect import NoiseEffect

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from kvbench.report.summary import RunSummary

# one colour per component, stable across reports; the resource noise competes for stands out
COLOURS = {
    "queue": "#bbbbbb",
    "onboard_G2": "#9ecae1",
    "onboard_G3": "#4292c6",
    "onboard_G4": "#d62728",
    "prefill": "#2ca02c",
    "decode": "#ff7f0e",
    "ttft": "#2ca02c",
    "server_other": "#8c564b",
    "transport": "#e7e1ef",
    "other": "#dddddd",
}


def plot_attribution(ax: Axes, phases: Sequence[PhaseAttribution], title: str = "") -> None:
    """Stacked shares of request time per phase; the request-seconds measured above each bar."""
    comps: list[str] = []
    for a in phases:
        comps += [c for c in a.components_s if c not in comps]
    x = list(range(len(phases)))
    bottom = [0.0] * len(phases)
    for c in comps:
        heights = [100.0 * max(0.0, a.shares.get(c, 0.0)) for a in phases]
        if not any(h >= 0.5 for h in heights):
            continue
        ax.bar(x, heights, bottom=bottom, label=c, color=COLOURS.get(c), edgecolor="white", linewidth=0.5)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    for i, a in enumerate(phases):
        ax.text(i, min(bottom[i], 100.0) + 1.5, f"{a.measured_s:.3g} s", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, [a.phase for a in phases], rotation=45, ha="right", fontsize=8)
    ax.set_ylim(0, 112)
    ax.set_ylabel("share of request time (%)")
    ax.set_title(title or "Where the request time went (request-seconds above each bar)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def plot_pair_effects(ax: Axes, effect: NoiseEffect) -> None:
    """Each pair's change in time per request, the geometric mean, and its interval (shaded)."""
    pairs = effect.per_pair
    x = list(range(1, len(pairs) + 1))
    colours = ["#1f77b4" if p.order == "quiet_first" else "#9467bd" for p in pairs]
    ax.scatter(x, [p.change_pct for p in pairs], c=colours, zorder=3)
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.axhline(
        effect.time_change_pct, color="#d62728", linewidth=1.2, label=f"mean {effect.time_change_pct:+.1f}%"
    )
    if effect.time_change_ci_pct is not None:
        lo, hi = effect.time_change_ci_pct
        ax.axhspan(
            lo, hi, color="#d62728", alpha=0.15, label=f"{100 * effect.level:g}% CI {lo:+.1f}% to {hi:+.1f}%"
        )
    ax.set_xticks(x, [f"{p.pair}\n{'QN' if p.order == 'quiet_first' else 'NQ'}" for p in pairs], fontsize=8)
    ax.set_xlabel("pair (order: QN = quiet first, NQ = noisy first)")
    ax.set_ylabel("noisy vs quiet, time per request (%)")
    ax.set_title(f"Noise effect per pair: {effect.verdict}")
    ax.legend(fontsize=7)


def save_noise_plots(run_dir: Path, summary: RunSummary) -> list[Path]:
    """noise_attribution.png and noise_pairs.png, when the run has what they show."""
    from kvbench.report.core import plots

    out: list[Path] = []
    shown = [a for a in summary.attribution if a.label in ("fill", "quiet", "noisy")]
    if shown and summary.noise_effect is not None:
        fig, (ax,) = plots.new_figure(width=max(7.0, 0.7 * len(shown) + 3))
        plot_attribution(ax, shown)
        out.append(plots.save(fig, run_dir / "noise_attribution.png"))
    if summary.noise_effect is not None:
        fig, (ax,) = plots.new_figure(width=6.0)
        plot_pair_effects(ax, summary.noise_effect)
        out.append(plots.save(fig, run_dir / "noise_pairs.png"))
    return out
