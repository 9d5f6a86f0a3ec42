"""Help pages render their text as written (no markup eats `kvbench[ray]`) and wrap to the terminal."""

from __future__ import annotations

import os
import subprocess
import sys


def help_text(*args: str, columns: int) -> str:
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "dumb"}
    p = subprocess.run(
        [sys.executable, "-m", "kvbench", *args, "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_brackets_survive() -> None:
    text = help_text("run", columns=100)
    assert "pip install 'kvbench[ray]'" in " ".join(text.split())


def test_wraps_to_the_terminal_not_80_columns() -> None:
    narrow, wide = help_text("run", columns=80), help_text("run", columns=200)
    # every wrapped line fits (the example commands are kept as written, unwrapped, by design)
    prose = [ln for ln in narrow.splitlines() if not ln.startswith("    kvbench ")]
    assert max(len(line) for line in prose) <= 80
    assert max(len(line) for line in wide.splitlines()) > 100  # the width is the terminal's
    # a wide terminal keeps the --cluster help on one line, the install hint with it
    (line,) = [ln for ln in wide.splitlines() if ln.lstrip().startswith("--cluster")]
    assert line.rstrip().endswith("Needs `pip install 'kvbench[ray]'`.")


def test_the_root_page_is_plain_text() -> None:
    text = help_text(columns=100)
    assert "Usage: " in text and "╭" not in text  # no box drawing where a pipe reads it
