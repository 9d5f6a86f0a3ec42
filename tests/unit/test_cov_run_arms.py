"""`kvbench run replay --arms` without a server (kvbench.run.arms_run): the refusals before anything
is sent, each arm's measured rows and tier hits read back from its run directory, the verdict files,
and the arms run in ABBA order (run_scenario replaced by one that writes a run's files)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbench.errors import UsageError
from kvbench.run import arms_run
from kvbench.run.arms_run import arm_rows, arm_tiers, plan_arms, run_arms, write_verdict
from kvbench.run.runner import RunOutcome
from kvbench.scenario import load_scenario

TIER = "kvbench_mock_tier_hit_tokens_total"  # the mock adapter's tier counter


def replay(**sets: Any) -> Any:
    return load_scenario("replay", sets)[0]


def row(rid: str, phase: str, ttft_ms: float, cached: int, prompt: int = 1000, status: str = "ok") -> dict:
    return {
        "request_id": rid,
        "phase": phase,
        "status": status,
        "ttft_ms": ttft_ms,
        "e2e_ms": ttft_ms * 2,
        "cached_tokens": cached,
        "prompt_tokens": prompt,
        "output_tokens": 4,
    }


def write_run(path: Path, rows: list[dict], deltas: dict[str, dict[str, float]] | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    if deltas is not None:
        (path / "metrics_deltas.json").write_text(json.dumps(deltas), encoding="utf-8")
    return path


def test_arms_are_refused_for_another_test_and_for_no_reuse() -> None:
    ttft = load_scenario("ttft")[0]
    with pytest.raises(UsageError, match=r"^--arms: runs the replay test's arms; this scenario is ttft$"):
        plan_arms(ttft, "offload,no-offload", None)
    with pytest.raises(UsageError, match=r"^--arms no-reuse: .*cannot run yet$"):
        plan_arms(replay(), "offload,no-reuse", None)


def test_the_embedded_mock_plans_its_no_offload_arm_from_its_own_overrides() -> None:
    scn = replay(**{"target.mock_overrides": {"time_scale": 0.25}})
    offload, off = plan_arms(scn, "offload,no-offload", None)
    assert offload.overrides == {} and off.name == "no-offload"
    assert off.overrides["target.mock_overrides"]["time_scale"] == 0.25  # the scenario's own kept
    real = replay(**{"target.base_url": "http://127.0.0.1:9", "target.engine": "vllm"})
    with pytest.raises(UsageError, match="--baseline-url"):
        plan_arms(real, "offload,no-offload", None)
    (_, moved) = plan_arms(real, "offload,no-offload", "http://127.0.0.1:10")
    assert moved.overrides == {"target.base_url": "http://127.0.0.1:10"}


def test_an_arms_rows_are_its_replay_phase_only(tmp_path: Path) -> None:
    rows = [
        row("p1", "probe", 5, 0),
        row("r1", "replay", 50, 900),
        row("r2", "replay", 60, 0, status="error"),
    ]
    got = arm_rows(write_run(tmp_path, rows))
    assert [r["request_id"] for r in got] == ["r1", "r2"]


def test_an_arms_tier_hits_sum_over_its_phases(tmp_path: Path) -> None:
    deltas = {
        "replay": {f'{TIER}{{tier="G1"}}': 300.0, f'{TIER}{{tier="G2"}}': 50.0, "other_total": 9.0},
        "replay-2": {f'{TIER}{{tier="G1"}}': 100.0},
        "probe": None,
    }
    assert arm_tiers(write_run(tmp_path, [], deltas), "mock") == {"G1": 400.0, "G2": 50.0}
    assert arm_tiers(write_run(tmp_path / "none", []), "mock") == {}  # no deltas file: no tiers


def test_the_verdict_compares_each_arm_to_offload_in_three_files(tmp_path: Path) -> None:
    scn = replay()
    fast = [row(f"a{i}", "replay", 20 + i % 5, 800) for i in range(40)]
    slow = [row(f"b{i}", "replay", 80 + i % 5, 100) for i in range(40)]
    g1 = {"replay": {f'{TIER}{{tier="G1"}}': 8000.0}}
    runs = [
        ("offload", write_run(tmp_path / "0-offload", fast[:20], g1)),
        ("no-offload", write_run(tmp_path / "1-no-offload", slow[:20])),
        ("no-offload", write_run(tmp_path / "2-no-offload", slow[20:])),
        ("offload", write_run(tmp_path / "3-offload", fast[20:], g1)),
    ]
    lines = write_verdict(tmp_path, runs, scn, "mock")
    doc = json.loads((tmp_path / "verdict.json").read_text())
    assert [a["arm"] for a in doc["arms"]] == ["offload", "no-offload", "no-offload", "offload"]
    table = {r["figure"]: r for r in doc["verdict"]}
    hit = table["hit ratio"]  # both runs of an arm pooled: 800/1000 against 100/1000
    assert hit["offload"] == pytest.approx(0.8) and hit["other"] == pytest.approx(0.1)
    assert hit["change"] == pytest.approx(-0.7) and hit["distinguishable"] is True
    share = table["hit share G1"]  # 16000 G1 tokens over the offload arm's 40000 prompt tokens
    assert share["offload"] == pytest.approx(0.4) and share["other"] == 0.0
    p50 = table["TTFT p50 (ms)"]
    assert p50["other"] / p50["offload"] - 1 == pytest.approx(p50["change"]) and p50["change"] > 1
    md = (tmp_path / "verdict.md").read_text()
    assert md.startswith("# Offload verdict\n") and all(line in md for line in lines)
    html = (tmp_path / "verdict.html").read_text()
    assert "0-offload" in html and "hit ratio" in html


def test_the_arms_run_in_abba_order_each_in_its_own_folder(tmp_path, monkeypatch, capsys) -> None:
    scn = replay()
    seen: list[tuple[str, Path]] = []

    async def fake_run(s: Any, opts: Any) -> RunOutcome:
        arm = "no-offload" if s.target.mock_overrides != scn.target.mock_overrides else "offload"
        seen.append((arm, opts.output_dir))
        ttft = 20.0 if arm == "offload" else 90.0
        rd = write_run(opts.output_dir / "run", [row(f"{arm}{i}", "replay", ttft + i, 500) for i in range(6)])
        return RunOutcome(rd, "complete", 0, {}, 6)

    reported: list[list[tuple[str, Path]]] = []

    def fake_reports(runs: list[tuple[str, Path]]) -> None:
        # each arm's own report is written after the verdict, so that it can carry it
        assert (runs[0][1].parents[1] / "verdict.json").is_file()
        reported.append(list(runs))

    monkeypatch.setattr("kvbench.run.runner.run_scenario", fake_run)
    monkeypatch.setattr(arms_run, "write_arm_reports", fake_reports)
    arms = plan_arms(scn, "offload,no-offload", None)
    opts = {"quiet": True, "allow_unverified_cold": False}
    assert run_arms(lambda extra: load_scenario("replay", extra)[0], arms, tmp_path, opts) == 0
    assert reported == [[(a, d / "run") for a, d in seen]]
    assert arms_run.ROUNDS == 2 and [a for a, _ in seen] == ["offload", "no-offload", "no-offload", "offload"]
    (folder,) = [p for p in tmp_path.iterdir() if p.name.startswith("arms-")]
    assert [d.name for _, d in seen] == [f"{i}-{a}" for i, (a, _) in enumerate(seen)]
    assert all(d.parent == folder for _, d in seen)
    out = capsys.readouterr().out
    assert f"verdict: {folder / 'verdict.md'}" in out and "| hit ratio | no-offload |" in out


def test_an_interrupted_arm_stops_the_arms_with_130(tmp_path, monkeypatch, capsys) -> None:
    calls = 0

    async def interrupted(s: Any, opts: Any) -> RunOutcome:
        nonlocal calls
        calls += 1
        return RunOutcome(None, "interrupted", 130, {}, 0)

    monkeypatch.setattr("kvbench.run.runner.run_scenario", interrupted)
    arms = plan_arms(replay(), "offload,no-offload", None)
    code = run_arms(
        lambda extra: load_scenario("replay", extra)[0],
        arms,
        tmp_path,
        {"quiet": True, "allow_unverified_cold": True},
    )
    assert code == 130 and calls == 1
    assert "kvbench: arm offload interrupted; finished arms are in" in capsys.readouterr().out
    assert not list(next(tmp_path.iterdir()).glob("verdict*"))
