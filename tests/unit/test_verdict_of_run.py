"""run_verdict: an arm's run finds its arms folder's verdict.json by its run id; any other run finds none."""

from __future__ import annotations

import json
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
