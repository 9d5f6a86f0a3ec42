"""PNG plots of a trace analysis: hit rate over time, reuse distance, working set, LRU by tier.

matplotlib is imported inside the functions (Agg canvas through matplotlib.figure.Figure, no
pyplot state), so importing this module costs nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kvbench.results.files import save_figure_atomic
from kvbench.traces.analyze import TraceAnalysis
from kvbench.traces.sizing import TIER_NAMES

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def _figure() -> tuple[Figure, Axes]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 4.2), layout="constrained")
    return fig, fig.add_subplot()


def _save(fig: Figure, path: Path) -> Path:
    save_figure_atomic(fig, path, dpi=110)
    return path


def write_plots(a: TraceAnalysis, out: Path, block_bytes: float | None = None) -> list[Path]:
    """Every plot of `a` into `out`; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    name = Path(a.path).name
    written = [_hit_rate(a, out / "hit-rate-over-time.png", name)]
    written.append(_reuse(a, out / "reuse-distance.png", name))
    written.append(_working_set(a, out / "working-set.png", name, block_bytes))
    if a.lru is not None:
        written.append(_lru(a, out / "lru-tiers.png", name))
    return written


def _hit_rate(a: TraceAnalysis, path: Path, name: str) -> Path:
    fig, ax = _figure()
    ws = a.working_set
    t = [w["start_s"] / 60.0 for w in ws]
    ax.plot(
        t,
        [100 * w["ideal_hit_blocks"] / max(w["blocks"], 1) for w in ws],
        label="ideal (unbounded)",
        marker="o",
        ms=3,
    )
    if a.lru is not None:
        ax.plot(
            t, [100 * w["lru_hit_blocks"] / max(w["blocks"], 1) for w in ws], label=f"LRU ({a.lru.source})"
        )
    ax.set(xlabel="trace time (min)", ylabel="block hit rate (%)", ylim=(0, 100))
    ax.set_title(f"{name}: prefix hit rate per {a.window_s:g} s window")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def _reuse(a: TraceAnalysis, path: Path, name: str) -> Path:
    fig, ax = _figure()
    labels = [f"{b['lo']:,}" for b in a.reuse]
    ax.bar(range(len(a.reuse)), [b["reuses"] for b in a.reuse], color="#4c72b0")
    ax.set_xticks(range(len(a.reuse)), labels, rotation=45, ha="right", fontsize=8)
    ax.set(xlabel="reuse distance (requests since the block's last use, bins from)", ylabel="block reuses")
    ax.set_title(f"{name}: reuse distance")
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, path)


def _working_set(a: TraceAnalysis, path: Path, name: str, block_bytes: float | None) -> Path:
    fig, ax = _figure()
    ws = a.working_set
    t = [w["start_s"] / 60.0 for w in ws]
    scale, unit = (block_bytes / 1e9, "GB of KV") if block_bytes else (1.0, "blocks")
    ax.plot(t, [w["unique_blocks"] * scale for w in ws], label=f"unique per {a.window_s:g} s window")
    ax.plot(t, [w["cumulative_blocks"] * scale for w in ws], label="cumulative footprint")
    ax.set(xlabel="trace time (min)", ylabel=unit)
    ax.set_title(f"{name}: working set over time")
    ax.legend(loc="upper left")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def _lru(a: TraceAnalysis, path: Path, name: str) -> Path:
    assert a.lru is not None
    fig, ax = _figure()
    tiers = [n for n in TIER_NAMES if a.lru.capacity_blocks[n] or a.lru.hit_blocks[n]]
    shares = [100 * a.lru.hit_blocks[n] / max(a.blocks, 1) for n in tiers]
    bottom = 0.0
    for tier, share in zip(tiers, shares, strict=True):
        ax.bar(["LRU"], [share], bottom=bottom, label=tier)
        bottom += share
    ax.bar(["ideal"], [100 * a.ideal_block_hit_rate], color="#999999")
    ax.set(ylabel="block hit rate (%)", ylim=(0, 100))
    ax.set_title(f"{name}: hits by tier ({a.lru.source})")
    ax.legend(loc="upper right")
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, path)
