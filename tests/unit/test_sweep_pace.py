"""A sweep on the embedded mock stays an instrument: every point whose TTFT is partly the mock's own
lateness is marked LATE in the table and ringed in the plot, with the pace that would avoid it;
the tables say which files they wrote (parquet only with pyarrow)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kvbench.report.sweep.tables import (
    late_points,
    suggested_pace,
    summary_rows,
    sweep_markdown,
    write_sweep_report,
)
from kvbench.sweep.points import mock_lateness


def _point(i: int, hit: str, ttft: float, share: float | None, late: bool) -> dict[str, Any]:
    metrics: dict[str, Any] = {"requests": 16, "ok": 16, "ttft_p50_ms": ttft}
    if share is not None:
        metrics.update(mock_late_share=share, mock_late=late, mock_late_threshold=0.1, mock_time_scale=0.01)
    return {
        "name": f"{i}-prompts.reuse.hit_rate={hit}",
        "assignment": {"prompts.reuse.hit_rate": hit},
        "status": "complete",
        "metrics": metrics,
    }


def _state(points: list[dict[str, Any]]) -> dict[str, Any]:
    plan = {"scenario": "hit-rate", "over": [["prompts.reuse.hit_rate", ["0", "1"]]], "slo": {}}
    return {"status": "complete", "plan": {**plan, "attainment": 0.9}, "points": points, "notes": []}


def test_points_past_the_limit_are_marked_and_the_pace_is_named() -> None:
    state = _state([_point(0, "0", 3.1, 0.14, True), _point(1, "1", 1.9, 0.59, True)])
    text = sweep_markdown(state)
    assert "2 of 2 points marked LATE" in text
    assert "| 14% LATE |" in text and "| 59% LATE |" in text
    # 0.01 * 0.59 / 0.1, twice over for headroom, rounded up to 1-2-5: 0.2
    assert "time_scale 0.01; about 0.2 would keep every point under the limit" in text
    assert "--set 'target.mock_overrides={time_scale: 0.2}'" in text


def test_a_point_inside_the_limit_is_not_marked() -> None:
    state = _state([_point(0, "0", 80.0, 0.01, False), _point(1, "1", 20.0, 0.04, True)])
    rows = summary_rows(state)
    assert [r["point"] for r in late_points(rows)] == ["1-prompts.reuse.hit_rate=1"]
    text = sweep_markdown(state)
    assert "| 1% |" in text and "| 4% LATE |" in text and "1 of 2 points" in text


def test_a_server_sweep_has_no_lateness_column_or_warning() -> None:
    text = sweep_markdown(_state([_point(0, "0", 3.0, None, False)]))
    assert "mock_late_share" not in text and "LATE" not in text


@pytest.mark.parametrize(
    ("share", "scale", "want"), [(0.59, 0.01, 0.2), (0.14, 0.01, 0.05), (0.11, 0.1, 0.5), (0.5, 1.0, 10.0)]
)
def test_suggested_pace_grows_with_the_share(share: float, scale: float, want: float) -> None:
    row = {"requests": 1, "mock_late": True, "mock_late_share": share, "mock_late_threshold": 0.1}
    pace = suggested_pace([{**row, "mock_time_scale": scale}])
    assert pace == pytest.approx(want)
    assert pace is not None and scale * share / pace < 0.1  # the point would sit under the limit


def test_the_point_reads_the_worst_measured_phase_of_its_manifest() -> None:
    phase = SimpleNamespace
    record = SimpleNamespace(
        threshold_share=0.1,
        exceeded_phases=["prime", "cached"],
        phases=[phase(phase=n, share=v) for n, v in (("prime", 0.9), ("cached", 0.2), ("probe", 3))],
    )
    manifest = SimpleNamespace(mock_lateness=record, target=SimpleNamespace(mock_time_scale=0.01))
    got = mock_lateness(manifest, {"cached"})  # the prime is a fill: not what the point measures
    assert got == dict(mock_late_share=0.2, mock_late=True, mock_late_threshold=0.1, mock_time_scale=0.01)
    assert mock_lateness(SimpleNamespace(mock_lateness=None), {"cached"}) == {}


def test_the_plot_rings_the_late_points() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kvbench.sweep.plots import draw_latency, series

    state = _state([_point(0, "0", 3.1, 0.14, True), _point(1, "1", 1.9, 0.05, False)])
    rows = [{**r, "throughput_rps": 10.0 + i, "ttft_p99_ms": 5.0} for i, r in enumerate(summary_rows(state))]
    fig, ax = plt.subplots()
    try:
        draw_latency(ax, series(rows, "prompts.reuse.hit_rate", None), "prompts.reuse.hit_rate")
        rings = [line for line in ax.get_lines() if line.get_label().startswith("mock late")]
        assert len(rings) == 1 and list(rings[0].get_xdata()) == [10.0]
        assert "1 point(s) ringed red" in ax.get_title()
    finally:
        plt.close(fig)


def test_the_report_says_which_tables_it_wrote(tmp_path: Path, capsys) -> None:
    import json

    (tmp_path / "sweep.json").write_text(json.dumps(_state([_point(0, "0", 3.1, 0.14, True)])))
    write_sweep_report(tmp_path, quiet=True)
    err = capsys.readouterr().err
    assert (tmp_path / "summary.csv").is_file() and (tmp_path / "summary.md").is_file()
    has_arrow = importlib.util.find_spec("pyarrow") is not None
    assert (tmp_path / "summary.parquet").is_file() == has_arrow
    assert err.count("tables: ") == 1
    assert ("pip install 'kvbench[parquet]'" in err) != has_arrow
