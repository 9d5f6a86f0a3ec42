"""run_verdict: an arm's run finds its arms folder's verdict.json by its run id; any other run finds none."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from kvbench.report.verdict.of_run import run_verdict

ROW = {
    "figure": "hit ratio",
    "arm": "no-offload",
    "offload": 0.8,
    "other": 0.3,
    "change": -0.5,
    "ci": [-0.6, -0.4],
    "distinguishable": True,
}


def _arms_folder(tmp_path: Path, with_verdict: bool = True) -> list[Path]:
    folder = tmp_path / "arms-20261206T000000Z"
    runs = []
    for i, arm in enumerate(["offload", "no-offload"]):
        run = folder / f"{i}-{arm}" / f"2026-12-06T00-0{i}-00Z-replay-{i}"
        run.mkdir(parents=True)
        runs.append(run)
    if with_verdict:
        arms = [
            {"arm": "offload", "run_id": runs[0].name, "run_dir": str(runs[0])},
            # an entry without run_id is matched by its directory's name
            {"arm": "no-offload", "run_dir": str(runs[1])},
        ]
        doc = {"arms": arms, "slo": {}, "verdict": [ROW]}
        (folder / "verdict.json").write_text(json.dumps(doc), encoding="utf-8")
    return runs


def test_an_arm_finds_its_verdict(tmp_path: Path) -> None:
    runs = _arms_folder(tmp_path)
    for run, arm in zip(runs, ["offload", "no-offload"], strict=True):
        found = run_verdict(run)
        assert found is not None
        assert found.arm == arm and found.rows == [ROW]
        assert f"the {arm} arm ({run.name})" in found.note
        assert f"offload ({runs[0].name}), no-offload ({runs[1].name})" in found.note


def test_a_run_outside_the_arms_is_not_an_arm(tmp_path: Path) -> None:
    _arms_folder(tmp_path)
    stray = tmp_path / "arms-20261206T000000Z" / "0-offload" / "another-run"
    stray.mkdir()
    assert run_verdict(stray) is None  # its folder has a verdict, but not one naming this run
    plain = tmp_path / "results" / "2026-12-06-ttft"
    plain.mkdir(parents=True)
    assert run_verdict(plain) is None


def test_arms_without_a_verdict_yet(tmp_path: Path) -> None:
    runs = _arms_folder(tmp_path, with_verdict=False)
    assert run_verdict(runs[0]) is None
    (runs[0].parents[1] / "verdict.json").write_text("{not json", encoding="utf-8")
    assert run_verdict(runs[0]) is None


def test_an_arms_summary_and_report_carry_the_verdict(tmp_path: Path) -> None:
    from kvbench.report.summary import build_summary
    from kvbench.report.verdict.section import verdict_section

    fixture = Path(__file__).resolve().parents[1] / "data" / "fixture_runs" / "20261130T140312Z-ttft-3f9a1c"
    folder = tmp_path / "arms-20261206T000000Z"
    run = folder / "0-offload" / fixture.name
    shutil.copytree(fixture, run)
    doc = {"arms": [{"arm": "offload", "run_id": run.name, "run_dir": str(run)}], "verdict": [ROW]}
    (folder / "verdict.json").write_text(json.dumps(doc), encoding="utf-8")
    summary, _, _ = build_summary(run)
    assert [r.model_dump() for r in summary.verdict] == [ROW]
    assert summary.verdict_note is not None and "the offload arm" in summary.verdict_note
    section = verdict_section(summary)
    assert section is not None and section.title == "Offload verdict"
    assert section.tables[0].rows[0][:6] == [
        "hit ratio",
        "no-offload",
        "0.8",
        "0.3",
        "-50.0 pts",
        "[-60.0 pts, -40.0 pts]",
    ]
    # a row this kvbench cannot read: the report says which field, and shows no table
    (folder / "verdict.json").write_text(json.dumps({**doc, "verdict": [{**ROW, "ci": "wide"}]}))
    summary, _, _ = build_summary(run)
    assert summary.verdict == [] and "verdict row field ci" in (summary.verdict_note or "")
    section = verdict_section(summary)
    assert section is not None and not section.tables
    plain, _, _ = build_summary(fixture)  # a run that is no arm: no verdict, no section
    assert plain.verdict == [] and plain.verdict_note is None and verdict_section(plain) is None
