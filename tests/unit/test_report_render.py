"""kvbench report / compare on hand-built fixture runs (complete, interrupted, killed, empty)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from kvbench.report.commands import register
from kvbench.report.compare import compare_runs
from kvbench.report.render import write_report

RUNS = Path(__file__).resolve().parents[1] / "data" / "fixture_runs"
NAMES = {
    "ttft": "20261130T140312Z-ttft-3f9a1c",
    "throughput": "20261130T141500Z-throughput-7b2e90",
    "noisy": "20261130T142000Z-noisy-neighbour-c41d07",
    "interrupted": "20261130T143000Z-throughput-interrupted-a1b2c3",
    "killed": "20261130T144000Z-ttft-dead01",
}


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    out = {}
    for key, name in NAMES.items():
        d = base / name
        shutil.copytree(RUNS / name, d)
        html = write_report(d, quiet=True)
        out[key] = (d, html)
    return out


def _text(d: Path, name: str) -> str:
    return (d / name).read_text(encoding="utf-8")


OVER_TIME = {"over_time.png", "over_time_phases.png", "onboard_vs_ttft.png"}


def test_every_report_file_written(reports):
    expected_pngs = {
        "ttft": {"ttft_vs_length.png", "speedup_vs_length.png", "throughput_timeline.png"},
        "throughput": {"throughput_timeline.png"},
        "noisy": {
            "throughput_timeline.png",
            "quiet_vs_noisy.png",
            "noise_attribution.png",
            "noise_pairs.png",
        },
        "interrupted": {"throughput_timeline.png"},
        "killed": set(),
    }
    for key, (d, html) in reports.items():
        assert html == d / "report.html"
        for name in ("summary.json", "report.md", "report.html"):
            assert (d / name).stat().st_size > 0, (key, name)
        pngs = {p.name for p in d.glob("*.png")}
        assert pngs - OVER_TIME == expected_pngs[key], key  # over_time*.png: test_telemetry_runs.py
        for p in pngs:
            assert (d / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        summary = json.loads(_text(d, "summary.json"))  # strict JSON (no NaN)
        assert set(summary["plots"]) == pngs


def test_ttft_report_has_speedup_table_and_published(reports):
    d, _ = reports["ttft"]
    md = _text(d, "report.md")
    assert "## TTFT speedup per prompt length" in md
    assert "| prompt tokens | vs | cold TTFT p50 (s) | TTFT p50 (s) | speedup (x) | 95% CI |" in md
    assert "| 130,000 | warm |" in md
    assert "Measured vs published (ibm-g4)" in md
    assert "SIMULATED: these figures come from kvbench's mock server (profile g4)" in md
    assert "EXTRAPOLATION" in md
    html = _text(d, "report.html")
    assert "data:image/png;base64," in html and "class='banner'" in html
    summary = json.loads(_text(d, "summary.json"))
    metrics = {r["metric"] for r in summary["published"]["rows"]}
    assert "TTFT cold at 130,000 tokens (median)" in metrics
    assert summary["fits"]["warm"]["params"]["bandwidth_GBps"] > 1


def test_throughput_and_noise_reports_label_both_ratios(reports):
    md = _text(reports["throughput"][0], "report.md")
    assert "requests/s ratio" in md and "total-time ratio" in md
    assert "Baseline: label 'baseline'" in md
    md = _text(reports["noisy"][0], "report.md")
    assert "drop in requests/s relative to the quiet rate" in md
    assert "increase in total time relative to the quiet time" in md
    assert "stated '18%'" in md


def test_interrupted_and_killed_runs(reports):
    d, _ = reports["interrupted"]
    summary = json.loads(_text(d, "summary.json"))
    assert summary["run"]["status"] == "interrupted"
    assert summary["run"]["requests"] == 13
    assert any("torn last line" in n for n in summary["notes"])
    assert summary["phases"][0]["duration_source"].startswith("span")
    d, _ = reports["killed"]
    md = _text(d, "report.md")
    assert "did not finish" in md
    assert "no requests were recorded" in md


def test_compare_writes_tables_and_plots(tmp_path, capsys):
    out = tmp_path / "cmp"
    html = compare_runs([RUNS / NAMES["throughput"], RUNS / NAMES["noisy"]], out)
    assert html == out / "compare.html"
    for name in ("compare.md", "compare.html", "summary.json", "compare_rates.png"):
        assert (out / name).stat().st_size > 0
    md = (out / "compare.md").read_text()
    assert "Baseline of every ratio below: **throughput-7b2e90**" in md
    captured = capsys.readouterr()
    assert "compare (baseline: throughput-7b2e90)" in captured.out
    assert "different tests" not in captured.err + md  # both are throughput runs


def test_compare_of_two_different_tests_says_so(tmp_path, capsys):
    out = tmp_path / "cmp"
    compare_runs([RUNS / NAMES["ttft"], RUNS / NAMES["throughput"]], out, quiet=True)
    err = capsys.readouterr().err
    assert "different tests (ttft-3f9a1c is ttft, throughput-7b2e90 is throughput)" in err
    assert "**Warning:** these runs are of different tests" in (out / "compare.md").read_text()


def test_cli_report_and_compare(tmp_path):
    app = typer.Typer()
    register(app)
    runner = CliRunner()
    d = tmp_path / "run"
    shutil.copytree(RUNS / NAMES["throughput"], d)
    res = runner.invoke(app, ["report", str(d)])
    assert res.exit_code == 0, res.output
    assert "throughput speedup" in res.output and (d / "report.html").exists()
    res = runner.invoke(
        app,
        [
            "compare",
            str(RUNS / NAMES["ttft"]),
            str(RUNS / NAMES["noisy"]),
            "--out",
            str(tmp_path / "c"),
            "--quiet",
        ],
    )
    assert res.exit_code == 0, res.output
    assert (tmp_path / "c" / "compare_ttft.png").exists()
    res = runner.invoke(app, ["report", str(tmp_path / "nowhere")])
    assert res.exit_code != 0
    assert "not a kvbench run directory" in str(res.exception)


def test_commands_module_import_is_light():
    code = (
        "import sys, kvbench.report.commands, kvbench.reference; "
        "print(any(m in sys.modules for m in ('pandas', 'matplotlib', 'numpy')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_noisy_report_from_an_older_run_explains_what_it_cannot_tell(reports):
    """A run written before attribution existed (no ground truth, one pair): the section says so."""
    d, _ = reports["noisy"]
    md = _text(d, "report.md")
    assert "## Noisy neighbour: effect, bottleneck, noise achieved" in md
    assert "one pair only" in md  # no interval from one pair, and the section says how to get one
    summary = json.loads(_text(d, "summary.json"))
    assert summary["noise_effect"]["verdict"] == "unknown"
    assert {a["source"] for a in summary["attribution"]} == {"client timings"}
    assert summary["noise_explained"]["quiet_share"] is None
