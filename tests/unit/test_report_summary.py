"""The report's pure pieces: RunSummary from a fixture run, the manifest accessor (load shape, time scale)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from kvbench.report.core import fits
from kvbench.report.core.manifest import RunManifest, read_run_manifest
from kvbench.report.sections import load_rows, run_section
from kvbench.report.summary import RunSummary, build_summary

RUNS = Path(__file__).resolve().parents[1] / "data" / "fixture_runs"
TTFT = RUNS / "20261130T140312Z-ttft-3f9a1c"
THROUGHPUT = RUNS / "20261130T141500Z-throughput-7b2e90"
NOISY = RUNS / "20261130T142000Z-noisy-neighbour-c41d07"

# summary.json before the split (kvbench_report_version 1): every key must still be there
OLD_TOP = {
    "kvbench_report_version",
    "generated_at",
    "run",
    "banner",
    "phases",
    "ttft_by_length",
    "ttft_speedups",
    "throughput",
    "noise",
    "fits",
    "notes",
    "published",
}
OLD_RUN = {
    "run_id",
    "run_dir",
    "scenario",
    "test",
    "status",
    "status_text",
    "started_at",
    "ended_at",
    "target",
    "simulated",
    "reference",
    "requests",
}
OLD_ROW = {"metric", "measured", "published", "unit", "measured_over_published", "note"}


def test_summary_of_a_fixture_run_is_typed():
    summary, df, noise = build_summary(THROUGHPUT)
    assert isinstance(summary, RunSummary)
    assert summary.run.run_id == THROUGHPUT.name and summary.run.simulated
    assert summary.run.requests == len(df) == 80 and noise == []
    assert [p.label for p in summary.phases] == ["baseline", "cached"]
    assert summary.phases[1].errors == 1 and summary.phases[1].ttft_ms.p50 is not None
    t = summary.throughput
    assert t is not None and t.rate_ratio == pytest.approx(
        t.cached_requests_per_s / t.baseline_requests_per_s
    )
    assert summary.noise is None and summary.ttft_speedups == []
    # the fixture's mock profile "g4" is not shipped: its time scale is taken as real time, and said so
    assert summary.run.time_scale.value == 1.0 and "not shipped" in summary.run.time_scale.source
    with pytest.raises(Exception, match="frozen"):
        summary.notes = []  # type: ignore[misc]


def test_summary_json_keeps_its_shape(tmp_path):
    from kvbench.report.render import write_report

    d = tmp_path / NOISY.name
    shutil.copytree(NOISY, d)
    write_report(d, quiet=True)
    data = json.loads((d / "summary.json").read_text())
    assert set(data) >= OLD_TOP and set(data["run"]) >= OLD_RUN
    assert {"load", "load_source", "time_scale"} <= set(data["run"])  # additive
    assert data["published"]["reference"] == "ibm-g4"
    for row in data["published"]["rows"]:
        assert set(row) >= OLD_ROW
    assert RunSummary.model_validate({k: v for k, v in data.items()}).run.run_id == NOISY.name


# a run written by kvbench at a4a0aac (manifest version 3: load and target.mock_time_scale)
WRITTEN = next((RUNS / "written-by-a4a0aac").iterdir())


def _run(
    tmp_path: Path, changes: dict, scenario: str | None = None, drop: tuple[str, ...] = ()
) -> RunManifest:
    """The written run's manifest with `changes` (target merged), without `drop`, as the report reads it."""
    if scenario is not None:
        (tmp_path / "scenario.yaml").write_text(scenario)
    manifest = json.loads((WRITTEN / "manifest.json").read_text())
    target = manifest["target"] | changes.get("target", {})
    manifest = {k: v for k, v in (manifest | changes | {"target": target}).items() if k not in drop}
    return RunManifest(manifest, tmp_path)


MOCK = {"simulated": True, "target": {"kind": "mock", "mock_profile": "ci", "mock_time_scale": None}}


def test_time_scale_from_manifest_scenario_or_shipped_profile(tmp_path):
    recorded = {"simulated": True, "target": {"kind": "mock", "mock_profile": "ci", "mock_time_scale": 0.05}}
    assert _run(tmp_path, recorded).time_scale().value == 0.05
    assert _run(tmp_path, MOCK).time_scale().value == pytest.approx(0.01)  # shipped ci profile
    ibm = {"simulated": True, "target": {"kind": "mock", "mock_profile": "ibm-g4", "mock_time_scale": None}}
    assert _run(tmp_path, ibm).time_scale().value == 1.0
    over = _run(tmp_path / "", ibm, "target:\n  mock_overrides: {time_scale: 0.2}\n").time_scale()
    assert over.value == 0.2 and "mock_overrides" in over.source
    real = _run(tmp_path, {"simulated": False, "target": {"kind": "server", "mock_profile": None}})
    assert real.time_scale().value == 1.0 and real.time_scale().source == "real server"


def test_load_shape_from_manifest_then_scenario(tmp_path):
    # results.schema.LoadShape as runcore writes it
    load = {"kind": "concurrent", "concurrency": 28, "requests": 200, "prompt_count": 100}
    load |= {"lengths": {"min": 110000, "max": 130000, "distribution": "fixed_mean"}, "max_tokens": 16}
    shape, source = _run(tmp_path, {"load": load}).load_shape()
    assert shape is not None and source == "manifest load"
    assert (shape.kind, shape.concurrency, shape.requests, shape.prompt_count) == ("concurrent", 28, 200, 100)
    rows = dict(load_rows(shape, source))
    assert rows["prompt lengths (tokens)"] == "110,000-130,000 (fixed_mean)"
    assert rows["output tokens per request"] == "16"
    rate = {"kind": "rate", "concurrency": 8, "rate": 2.0, "requests": 50, "prompt_count": 5}
    shape, _ = _run(tmp_path, {"load": rate | {"lengths": [1000], "max_tokens": 8}}).load_shape()
    assert shape is not None and (shape.concurrency, shape.rate) == (8, 2.0)

    # a version-1 manifest (no load section): the migration reads the saved scenario
    scenario = (
        "name: t\ntest: throughput\nprompts: {count: 100, lengths: {min: 110000, max: 130000}}\n"
        "load: {kind: rate, rate: 2.5, requests: 50, max_concurrency: 8}\noutput: {max_tokens: 16}\n"
    )
    shape, source = _run(tmp_path, {}, scenario, drop=("load", "prompts")).load_shape()
    assert shape is not None and source.startswith("scenario.yaml")
    rows = dict(load_rows(shape, source))
    assert rows["load"].startswith("rate, 2.50 requests/s, at most 8 in flight")
    assert rows["requests per phase"] == "50" and rows["prompts"] == "100"
    assert rows["prompt lengths (tokens)"] == "110,000-130,000 (uniform)"

    (tmp_path / "scenario.yaml").unlink()
    shape, source = _run(tmp_path, {}, drop=("load",)).load_shape()
    assert shape is None and source.startswith("not recorded")
    assert load_rows(None)[0][1].startswith("not recorded")


def test_run_section_shows_load_and_time_scale(tmp_path):
    d = tmp_path / "run"
    shutil.copytree(TTFT, d)
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["target"]["mock_time_scale"] = 0.01
    manifest["load"] = {"kind": "sequential", "concurrency": 1, "prompt_count": 4, "lengths": [30000, 130000]}
    manifest["load"]["max_tokens"] = 16
    (d / "manifest.json").write_text(json.dumps(manifest))
    summary, _, _ = build_summary(d)
    rows = dict(run_section(summary).tables[0].rows)
    assert rows["load"] == "sequential, one request at a time (from manifest load)"
    assert rows["prompt lengths (tokens)"] == "30,000, 130,000"
    assert rows["time scale"].startswith("0.01 of the modelled pace")


def test_fits_read_the_mock_profile_named_in_the_manifest():
    # target.py writes the profile's NAME: the geometry comes from the shipped profile
    geo, src = fits.geometry_for_run(
        RunManifest(
            read_run_manifest(TTFT).manifest.model_copy(
                update={
                    "target": read_run_manifest(TTFT).manifest.target.model_copy(
                        update={"mock_profile": "ibm-g4"}
                    )
                }
            )
        )
    )
    assert geo is not None and geo.name == "gpt-oss-120b" and src == "mock profile ibm-g4 (gpt-oss-120b)"
    geo, src = fits.geometry_for_run(read_run_manifest(TTFT))  # "g4": not shipped -> model name
    assert geo is not None and src.startswith("preset matching target.model")


def test_target_manifest_records_the_mock_time_scale():
    from kvbench.run.preflight.target import TargetInfo

    info = TargetInfo(
        "mock", "http://x", "m", "mock", "completions", "ci", mock=SimpleNamespace(time_scale=0.01)
    )
    assert info.manifest()["mock_time_scale"] == 0.01
    assert TargetInfo("server", "http://x", "m", "vllm", "chat").manifest()["mock_time_scale"] is None
