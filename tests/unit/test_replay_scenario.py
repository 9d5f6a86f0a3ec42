"""The replay test's scenario section: what it accepts, the one line it gives otherwise, the
README table of replay.jsonl, and the scenario model/testtypes modules not importing each other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kvbench.errors import ScenarioError
from kvbench.results.replay_rows import ReplayRow
from kvbench.scenario import load_scenario
from kvbench.scenario.testtypes import ReplaySection

ROOT = Path(__file__).resolve().parents[2]
SMALL = str(ROOT / "tests" / "data" / "replay" / "mooncake-small.jsonl")


def test_the_shipped_scenario_finds_its_trace_and_needs_no_prompts() -> None:
    scn, _ = load_scenario("replay")
    assert isinstance(scn.test, ReplaySection)
    assert scn.test.trace.resolved().is_file() and scn.test.trace.resolved().parent.name == "traces"
    assert scn.prompts.salt == "per_run"  # cold by construction
    assert scn.test.max_in_flight == scn.test.max_concurrency


def test_trace_flag_sets_the_path() -> None:
    from kvbench.run.commands import build_overrides

    assert build_overrides(trace=SMALL)["test.trace.path"] == SMALL
    scn, _ = load_scenario("replay", {"test.trace.path": SMALL, "test.schedule": "concurrent"})
    assert scn.test.max_in_flight == scn.test.concurrency


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        ({"test.trace.path": "no/such.jsonl"}, "test.trace.path: no trace file 'no/such.jsonl'"),
        ({"target.api": "chat"}, "target.api: the replay test sends raw prompts"),
        ({"test.schedule": "rate"}, "test.rate: schedule rate needs a rate"),
        ({"test.rate": 5.0}, "test.rate: applies to schedule rate, not fixed"),
        ({"prompts.salt": "per_request"}, "prompts.salt: per_request would make every block unique"),
        (
            {"load.kind": "concurrent", "load.concurrency": 2, "load.requests": 4},
            "load: the replay test sets",
        ),
        ({"test.trace.speedup": 0}, "test.trace.speedup"),
    ],
)
def test_bad_replay_settings_are_one_line(overrides: dict, line: str) -> None:
    with pytest.raises(ScenarioError) as exc:
        load_scenario("replay", overrides)
    assert any(line in p for p in exc.value.problems), exc.value.problems


def test_readme_documents_every_replay_row_field() -> None:
    text = (ROOT / "results" / "README.md").read_text()
    section = text[text.index("## replay.jsonl") :]
    for name in ReplayRow.model_fields:
        assert f"| `{name}` |" in section, name


def test_testtypes_does_not_import_the_scenario_model() -> None:
    tree = ast.parse((ROOT / "kvbench" / "scenario" / "testtypes.py").read_text())
    names = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "kvbench.scenario.model" not in names and "kvbench.scenario.view" in names
