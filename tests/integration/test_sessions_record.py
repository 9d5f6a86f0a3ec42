"""A sessions run's record is the run: its Run table gives users, turns planned, first-turn tokens
and the loop, not the one-prompt probe the run starts with; the console calls the probe a probe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbench.report.render import write_report
from kvbench.report.sessions.load import sessions_load_rows
from kvbench.results.schema import LoadShape
from kvbench.run.runner import RunOptions, run_scenario
from kvbench.scenario import load_scenario

pytestmark = pytest.mark.slow

KNOBS = {
    "test.users": 3,
    "test.turns": 2,
    "test.active_users": 2,
    "test.system_prompt_tokens": 100,
    "test.first_message_tokens": 400,
    "test.turn_tokens": 100,
    "test.think_time": {"distribution": "fixed", "mean_s": 0.0},
    "output.max_tokens": 8,
    "target.mock_profile": "ci",
}


def _table(md: str) -> dict[str, str]:
    run = md.split("## Run", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in run.splitlines() if ln.startswith("| ") and ln.count("|") == 3]
    cells = [ln.strip("|").split("|") for ln in lines]
    return {k.strip(): v.strip() for k, v in cells}


async def test_a_sessions_load_reads_as_users_and_turns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scn, _ = load_scenario("sessions", KNOBS)
    outcome = await run_scenario(scn, RunOptions(output_dir=tmp_path, quiet=False, report=False))
    assert outcome.exit_code == 0
    err = capsys.readouterr().err
    (built,) = [ln for ln in err.splitlines() if ln.startswith("built ")]
    assert "probe" in built and "before the sessions test" in built  # the probe, named as one
    assert "3 users, 6 turns planned" in err
    write_report(outcome.run_dir, quiet=True)
    rows = _table((outcome.run_dir / "report.md").read_text())
    assert rows["load"].startswith("sessions of 3 users: 2 users at once") and "closed loop" in rows["load"]
    assert rows["users"] == "3" and rows["turns planned per phase"] == "6 (2 per user)"
    assert rows["turns done: cached"] == "6 (2 per user; 3 of 3 users took every planned turn)"
    assert rows["first-turn tokens"] == "500 (system prompt 100 + first message 400)"
    assert rows["tokens added per later turn"].startswith("100 ")
    assert rows["think time"] == "fixed 0.0 s" and rows["output tokens per turn (most)"] == "8"
    # the 6 turns, the probes beside them and not counted as the test's requests
    n_rows = sum(1 for _ in (outcome.run_dir / "requests.jsonl").open())
    probes = n_rows - 6
    assert probes >= 1
    assert rows["requests recorded"] == f"6 (and {probes} cold-start probe(s), not the test's load)"
    assert "prompts" not in rows and "prompt lengths (tokens)" not in rows  # the probe's rows
    summary = json.loads((outcome.run_dir / "summary.json").read_text())
    load = summary["run"]["load"]
    assert (load["kind"], load["prompt_count"], load["requests"]) == ("sessions-closed", 3, 6)
    manifest = json.loads((outcome.run_dir / "manifest.json").read_text())
    assert manifest["prompts"]["role"] == "probe"  # the set built before the test, not its users
    rec = manifest["sessions"]
    assert (rec["users"], rec["loop"], rec["active_users"], rec["arrival_rate_per_s"]) == (
        3,
        "closed",
        2,
        None,
    )
    assert (rec["turns_planned"], rec["turns_per_user_min"], rec["turns_per_user_max"]) == (6, 2, 2)
    assert (rec["first_turn_tokens"], rec["turn_tokens"], rec["max_tokens"]) == (500, 100, 8)
    assert rec["think_time"]["distribution"] == "fixed" and rec["baseline"] is False
    assert rec["done"] == [
        {"phase": "cached", "turns": 6, "per_user_min": 2, "per_user_max": 2, "users_all_turns": 3}
    ]
    assert summary["run"]["sessions"] == rec and summary["run"]["probe_requests"] == probes


async def test_an_open_loop_with_a_baseline_records_each_phase(tmp_path: Path) -> None:
    """Turns drawn per user ({min, max}), users arriving, and a baseline: the record has the loop, the
    planned range and one `done` entry per phase, the baseline's against the cached phase's turns."""
    knobs = {
        **KNOBS,
        "test.turns": {"min": 1, "max": 3},
        "test.arrival_rate_per_s": 50.0,
        "test.baseline": True,
    }
    knobs["test.think_time"] = {"distribution": "uniform", "min_s": 0.0, "max_s": 0.01, "mean_s": 0.005}
    scn, _ = load_scenario("sessions", knobs)
    outcome = await run_scenario(scn, RunOptions(output_dir=tmp_path, quiet=True, report=False))
    assert outcome.exit_code == 0
    from kvbench.results.reading import load_record

    rec = load_record(outcome.run_dir).manifest.sessions
    assert rec is not None and rec.loop == "open" and rec.arrival_rate_per_s == 50.0
    assert rec.arrivals == "poisson" and rec.baseline
    assert 1 <= rec.turns_per_user_min <= rec.turns_per_user_max <= 3
    turns = [json.loads(x) for x in (outcome.run_dir / "turns.jsonl").read_text().splitlines()]
    assert rec.turns_planned == sum(1 for t in turns if t["phase"] == "cached")  # all answered here
    assert [d.phase for d in rec.done] == ["cached", "baseline"]
    for d in rec.done:
        assert d.turns == sum(1 for t in turns if t["phase"] == d.phase and t["ok"])
        assert d.users_all_turns == 3
    write_report(outcome.run_dir, quiet=True)
    rows = _table((outcome.run_dir / "report.md").read_text())
    assert "(open loop)" in rows["load"] and "from manifest sessions" in rows["load"]
    assert rows["think time"] == "uniform 0.0-0.01 s"


def test_an_open_loop_and_an_old_probe_load() -> None:
    shape = {"concurrency": 4, "requests": 40, "prompt_count": 10, "lengths": [2000, 500], "max_tokens": 16}
    rows = dict(sessions_load_rows(LoadShape(kind="sessions-open", rate=0.5, **shape)))
    assert rows["load"].startswith("sessions of 10 users: users arrive at 0.500/s, at most 4 at once")
    assert "open loop" in rows["load"] and rows["output tokens per turn (most)"] == "16"
    # a manifest with a sessions-* load and no sessions record (written before it) still reads
    assert rows["users"] == "10" and rows["turns planned per phase"] == "40"
    # a manifest from before sessions recorded their load: its load is the probe, and says so
    probe = LoadShape(kind="sequential", concurrency=1, prompt_count=1, lengths=[16], max_tokens=64)
    ((key, text),) = sessions_load_rows(probe)
    assert key == "load" and "probe" in text and "not recorded" in text
