"""The first screen a newcomer sees: the key table has no unlabelled or `n/a` interval cells, and
no report writes an empty table (the line that says why stands alone)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kvbench.report.core.formats import Section, Table, fmt_interval, to_html, to_markdown
from kvbench.report.render import write_report

RUNS = Path(__file__).resolve().parents[1] / "data" / "fixture_runs"


def test_an_interval_is_labelled_or_absent() -> None:
    assert fmt_interval([1.5, 2.25]) == " (95% CI [1.50, 2.25])"
    assert fmt_interval(None) == "" and fmt_interval([]) == ""


def test_empty_tables_are_not_written() -> None:
    sections = [
        Section(
            "Measured vs published",
            ["None of this run's measurements corresponds to a published figure."],
            [Table(["metric", "measured"], [])],
        ),
        Section("Phases", [], [Table(["phase"], [], caption="per phase")]),
    ]
    md = to_markdown("t", sections)
    assert "| metric |" not in md and "None of this run's measurements" in md
    assert "*per phase*: none." in md
    page = to_html("t", sections)
    assert "<th>metric</th>" not in page and "<em>per phase</em>: none." in page


@pytest.mark.parametrize("name", sorted(p.name for p in RUNS.iterdir() if (p / "manifest.json").is_file()))
def test_fixture_reports_have_no_empty_tables_and_no_bare_na_in_the_key_table(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / name
    shutil.copytree(RUNS / name, run_dir)
    write_report(run_dir)
    screen = capsys.readouterr().out
    for line in screen.splitlines():
        assert "x n/a" not in line  # a speedup followed by an unlabelled missing interval
    md = (run_dir / "report.md").read_text()
    lines = md.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|---"):  # a table's separator: a row must follow it
            assert i + 1 < len(lines) and lines[i + 1].startswith("| "), (
                f"empty table in {name}: {lines[i - 1]}"
            )
