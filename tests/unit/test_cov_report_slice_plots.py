"""The over-time pictures (kvbench.report.slices.plots) from a hand-made slice table: which panels a
run's numbers give, the phase spans, the zoom on the measured phases, and each panel's series names."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_hex

from kvbench.report.slices import plots as P


def _slices(phases: list[tuple[str, bool]], **cols: list[float]) -> pd.DataFrame:
    n = len(phases)
    base = {
        "t_s": [float(i) for i in range(n)],
        "slice_s": [1.0] * n,
        "phase": [p for p, _ in phases],
        "noisy": [z for _, z in phases],
        "requests_per_s": [2.0] * n,
    }
    base.update(cols)
    return pd.DataFrame(base)


def test_phase_runs_join_consecutive_slices_and_split_at_noise() -> None:
    sl = _slices(
        [("", False), ("fill", False), ("fill", False), ("noisy", False), ("noisy", True), ("noisy", True)]
    )
    assert P.phase_runs(sl) == [
        ("fill", False, 1.0, 3.0),
        ("noisy", False, 3.0, 4.0),
        ("noisy", True, 4.0, 6.0),
    ]  # the unnamed slice before the first phase is no phase


def test_zoom_span_only_when_one_phase_fills_most_of_the_run() -> None:
    long_fill = [("fill", False)] * 8 + [("cold", False), ("warm", False)]
    assert P.zoom_span(_slices(long_fill)) == (8.0, 10.0)
    even = [("fill", False)] * 3 + [("cold", False)] * 3 + [("warm", False)] * 3
    assert P.zoom_span(_slices(even)) is None  # no phase takes 60% of the run
    assert (
        P.zoom_span(_slices([("fill", False)] * 9 + [("cold", False)])) is None
    )  # two runs: nothing to zoom


def test_panels_follow_the_numbers_the_run_has() -> None:
    phases = [("cached", False)] * 3
    bare = _slices(phases, ttft_p50_ms=[np.nan] * 3, queue=[0.0] * 3)
    assert P.panels(bare) == [P._requests]  # no TTFT yet, an idle queue: nothing more to draw
    full = _slices(
        phases,
        ttft_p50_ms=[10.0, 12.0, 11.0],
        ttft_p99_ms=[20.0, 30.0, 25.0],
        cached_ratio=[0.5, 0.6, 0.7],
        onboard_G4_gb_s=[1.0, 2.0, 3.0],
        kv_usage=[0.1, 0.2, 0.3],
        host_net_rx_gb_s=[0.0, 0.5, 0.0],
        gpu_util_pct=[50.0, 60.0, 70.0],
    )
    assert P.panels(full) == [P._requests, P._ttft, P._hits, P._tiers, P._engine_state, P._host, P._gpu]
    assert P.transfer_cols(full) == ["onboard_G4_gb_s"] and P.host_cols(full) == ["host_net_rx_gb_s"]


@pytest.fixture
def axes():
    from matplotlib.figure import Figure

    fig = Figure()
    return fig, fig.subplots()


def _labels(ax) -> list[str]:
    return ax.get_legend_handles_labels()[1]  # each slice series is a step patch (ax.stairs)


def test_tier_series_are_named_by_direction_tier_and_source(axes) -> None:
    _, ax = axes
    sl = _slices(
        [("x", False)] * 2,
        onboard_G4_gb_s=[1.0, 2.0],
        offload_G2_gb_s=[0.5, 0.5],
        gt_onboard_G4_gb_s=[1.1, 2.1],
        onboard_G9_blocks=[3.0, 4.0],
    )
    P._tiers(ax, sl)
    assert _labels(ax) == ["G4 onboard", "G2 offload", "G4 onboard (ground truth)", "G9 onboard (not GB/s)"]
    styles = [patch.get_linestyle() for patch in ax.patches]
    assert styles == ["-", "--", ":", "-"]
    g4 = to_hex(ax.patches[0].get_edgecolor())
    assert g4 == P.TIER_COLORS["G4"] and ax.get_ylabel() == "KV GB/s"


def test_engine_state_and_gpu_draw_a_right_axis_for_their_second_quantity(axes) -> None:
    fig, ax = axes
    sl = _slices([("x", False)] * 2, queue=[1.0, 3.0], kv_used_gb=[10.0, 12.0])
    P._engine_state(ax, sl)
    assert _labels(ax) == ["queued requests"] and ax.get_ylabel() == "queued"
    (right,) = [a for a in fig.axes if a is not ax]
    assert _labels(right) == ["KV held (GB)"] and right.get_ylabel() == "KV GB"
    from matplotlib.figure import Figure

    fig2 = Figure()
    ax2 = fig2.subplots()
    P._gpu(ax2, _slices([("x", False)] * 2, gpu_util_pct=[1.0, 2.0], gpu_mem_used_gb=[3.0, 4.0]))
    assert _labels(ax2) == ["GPU utilisation %"] and ax2.get_ylabel() == "GPU %"
    assert [a.get_ylabel() for a in fig2.axes if a is not ax2] == ["GB"]


def test_hits_and_host_panels(axes) -> None:
    _, ax = axes
    P._hits(ax, _slices([("x", False)] * 2, hit_ratio=[0.2, 0.4], cached_ratio=[0.3, 0.5]))
    assert _labels(ax) == ["hit ratio (server counters)", "cached share (per request)"]
    assert ax.get_ylim() == pytest.approx((-0.02, 1.05))
    ax.cla()
    P._host(ax, _slices([("x", False)] * 2, node_disk_read_gb_s=[1.0, 2.0], lab_link_tx_gb_s=[0.1, 0.2]))
    assert _labels(ax) == ["node disk read", "lab link tx"]


def test_save_slice_plots_writes_the_zoom_when_a_fill_takes_most_of_the_run(tmp_path: Path) -> None:
    sl = _slices(
        [("fill", False)] * 8 + [("cold", False), ("warm", True)],
        ttft_p50_ms=[5.0] * 10,
        ttft_p99_ms=[9.0] * 10,
    )
    scatter = pd.DataFrame({"onboard_gb": [0.0], "ttft_ms": [5.0], "noise_active": [False]})
    paths = P.save_slice_plots(tmp_path, sl, scatter)  # no request read KV: no scatter
    assert [p.name for p in paths] == ["over_time.png", "over_time_phases.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths)
    assert P.save_slice_plots(tmp_path, sl.iloc[0:0], scatter) == []
