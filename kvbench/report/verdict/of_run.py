"""The offload verdict as one arm's run sees it: `run_verdict(run_dir)` finds the verdict.json the
arms runner (kvbench.run.arms_run) wrote in the arms folder `arms-<stamp>/<i>-<arm>/<run-id>/` and
returns its rows with a note naming the arms, so each arm's report and summary.json carry the
verdict that its run took part in (reads saved files only).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VERDICT = "verdict.json"
LEVELS_UP = 2  # <run-id> -> <i>-<arm> -> arms-<stamp>


@dataclass(frozen=True)
class RunVerdict:
    """The verdict an arm's run belongs to: the table's rows, which arm this run was, and the note."""

    rows: list[dict[str, Any]]
    arm: str
    note: str
    path: Path


def _arm_run_id(entry: dict[str, Any]) -> str:
    # verdict.json written before run ids were recorded names only the run's directory
    return str(entry.get("run_id") or Path(str(entry.get("run_dir", ""))).name)


def _note(doc: dict[str, Any], arm: str, run_id: str, path: Path) -> str:
    order = ", ".join(f"{a.get('arm')} ({_arm_run_id(a)})" for a in doc["arms"] if isinstance(a, dict))
    return (
        f"This run is the {arm} arm ({run_id}) of an offload comparison; arms in run order: {order}. "
        f"Every arm is set against offload over all of its runs ({path})."
    )


def run_verdict(run_dir: Path | str) -> RunVerdict | None:
    """The verdict of the arms folder that holds `run_dir`, found by its run id; None when the run is
    not an arm, or its arms folder has no readable verdict.json (the verdict is written last)."""
    run_dir = Path(run_dir)
    run_id = run_dir.name
    for folder in list(run_dir.parents)[:LEVELS_UP]:
        path = folder / VERDICT
        if not path.is_file():
            continue
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(doc, dict) or not isinstance(doc.get("arms"), list):
            return None
        for entry in doc["arms"]:
            if isinstance(entry, dict) and _arm_run_id(entry) == run_id:
                arm = str(entry.get("arm"))
                rows = [r for r in doc.get("verdict") or [] if isinstance(r, dict)]
                return RunVerdict(rows, arm, _note(doc, arm, run_id, path), path)
        return None
    return None
