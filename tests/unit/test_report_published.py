"""Measured vs published from a dataset's `compare:` section: the entry model and the scaled comparison."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvbench.errors import UsageError
from kvbench.report.core.manifest import TimeScale
from kvbench.report.published.comparison import compare_rows, load_dataset, parse_compare, published_points
from kvbench.report.summary import build_summary

RUNS = Path(__file__).resolve().parents[1] / "data" / "fixture_runs"
TTFT = RUNS / "20261130T140312Z-ttft-3f9a1c"
THROUGHPUT = RUNS / "20261130T141500Z-throughput-7b2e90"

FIGURES = {"ttft_uncached_130k": "s", "rate_cached": "req/s", "total_cached": "s", "total_noisy": "s"}
CLAIMS = {"ttft-speedup-130k": "x"}
GOOD = {
    "id": "cold",
    "label": "TTFT cold at {tokens:,} tokens",
    "measured": "ttft_by_length.ttft_p50_ms",
    "where": {"label": "cold", "tokens": 130000},
    "unit": "s",
    "figure": "ttft_uncached_130k",
}


def _parse(*entries: dict) -> list:
    return parse_compare(list(entries), FIGURES, CLAIMS, "x.yaml")


def test_a_good_entry_parses():
    (e,) = _parse(GOOD)
    assert e.tolerance == 0.05 and e.claim_value == "stated"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"figure": "ttft_nope"}, "compare[0].figure: unknown figure 'ttft_nope'"),
        ({"claim": "ttft-speedup-130k"}, "compare[0]: give exactly one of figure, claim, expr"),
        ({"measured": "ttft_by_length.p50"}, "compare[0].measured: 'p50' is not a field of ttft_by_length"),
        ({"measured": "throughput"}, "compare[0].measured: 'throughput' is not a measured quantity"),
        (
            {"unit": "req/s"},
            "compare[0].unit: 'req/s' does not fit ttft_by_length.ttft_p50_ms (measured in ms)",
        ),
        ({"unit": "furlongs"}, "compare[0].unit:"),
        ({"label": "{tokens.__class__}"}, "compare[0].label: placeholder"),
        ({"tolerance": 2}, "compare[0].tolerance:"),
        ({"colour": "red"}, "compare[0].colour: Extra inputs are not permitted"),
        ({"expr": "ratio(total_cached, nope)", "figure": None}, "compare[0].expr:"),
    ],
)
def test_a_bad_entry_is_one_line_naming_the_field(change, expected):
    entry = {k: v for k, v in (GOOD | change).items() if v is not None}
    with pytest.raises(UsageError) as err:
        _parse(entry)
    msg = str(err.value)
    assert msg.startswith("x.yaml: ") and "\n" not in msg
    assert expected in msg


def test_where_needs_a_list_and_ids_are_unique():
    scalar = GOOD | {"measured": "throughput.cached_total_s", "figure": "total_cached"}
    with pytest.raises(UsageError, match=r"compare\[0\]\.where: throughput.cached_total_s crosses no list"):
        _parse(scalar)
    with pytest.raises(UsageError, match=r"compare\[1\]\.id: duplicate id 'cold'"):
        _parse(GOOD, GOOD)
    with pytest.raises(UsageError, match="compare: expected a list"):
        parse_compare({"a": 1}, FIGURES, CLAIMS, "x.yaml")


def test_the_shipped_dataset_drives_the_comparison():
    ds = load_dataset("ibm-g4")
    ids = [e.id for e in ds.entries]
    assert len(ids) == len(set(ids)) >= 10
    assert {"ttft-cold-130k", "throughput-speedup", "noisy-rate-drop"} <= set(ids)
    assert published_points("ibm-g4")["cold"] == [(130_000, pytest.approx(32_140.0))]


def _scaled(summary, scale: float):
    run = summary.run.model_copy(update={"time_scale": TimeScale(value=scale, source="test")})
    return summary.model_copy(update={"run": run})


def test_a_time_scaled_run_is_compared_at_its_scale():
    summary, _, _ = build_summary(TTFT)
    ds = load_dataset("ibm-g4")
    real = {r.id: r for r in compare_rows(ds, summary, 1.0)}
    assert real["ttft-cold-130k"].published == pytest.approx(32.14)
    assert real["ttft-cold-130k"].published_at_scale is None
    # the same measured times on a mock at 1/100 of the pace: times scale, speedups do not
    rows = {r.id: r for r in compare_rows(ds, _scaled(summary, 0.01), 0.01)}
    cold = rows["ttft-cold-130k"]
    assert cold.published == pytest.approx(32.14) and cold.published_at_scale == pytest.approx(0.3214)
    assert cold.measured_scaled_back == pytest.approx(cold.measured / 0.01)
    assert cold.measured_over_published == pytest.approx(cold.measured / 0.3214)
    speedup = rows["ttft-speedup-130k"]
    assert speedup.published == 56 and speedup.published_at_scale is None
    assert speedup.measured_over_published == real["ttft-speedup-130k"].measured_over_published
    assert "the published figures give 56.39x" in speedup.note


def test_rates_are_divided_by_the_scale():
    summary, _, _ = build_summary(THROUGHPUT)
    rows = {r.id: r for r in compare_rows(load_dataset("ibm-g4"), summary, 0.01)}
    assert rows["rate-cached"].published_at_scale == pytest.approx(426.0)
    assert rows["throughput-speedup"].published_at_scale is None
    assert rows["total-cached"].note.endswith(f"this run completed {summary.throughput.cached_ok}")


def test_report_of_a_scaled_run_shows_the_scaled_figure(tmp_path):
    from kvbench.report.render import write_report

    d = tmp_path / "run"
    shutil.copytree(TTFT, d)
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["target"]["mock_time_scale"] = 0.01
    (d / "manifest.json").write_text(json.dumps(manifest))
    write_report(d, quiet=True)
    summary = json.loads((d / "summary.json").read_text())
    assert summary["published"]["time_scale"] == 0.01
    cold = next(r for r in summary["published"]["rows"] if r["id"] == "ttft-cold-130k")
    assert cold["published_at_scale"] == pytest.approx(0.3214)
    md = (d / "report.md").read_text()
    assert "0.01 of the modelled pace" in md and "| published, run's pace | measured, real pace |" in md


def test_no_dataset_no_section_and_unknown_dataset_is_a_note(tmp_path):
    d = tmp_path / "run"
    shutil.copytree(THROUGHPUT, d)
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["reference"] = None
    (d / "manifest.json").write_text(json.dumps(manifest))
    assert build_summary(d)[0].published is None
    manifest["reference"] = "no-such-paper"
    (d / "manifest.json").write_text(json.dumps(manifest))
    summary = build_summary(d)[0]
    assert summary.published is None
    assert any(n.startswith("reference no-such-paper: no such published dataset") for n in summary.notes)
