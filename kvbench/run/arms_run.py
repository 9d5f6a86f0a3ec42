"""`kvbench run replay --arms ...`: the arms run one after another, each a normal run from a
verified cold start (reset + probe, fresh salt: kvbench.run.preflight), in ABBA order, under one
folder `arms-<stamp>/<i>-<arm>/`; then the verdict table (kvbench.report.verdict) over every arm's
measured rows is printed and written beside them (verdict.md, verdict.html, verdict.json: each
row a report.summary_model.VerdictRow); last, each arm's own report, which carries the verdict
(report.verdict.of_run finds it by the arm's run id).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kvbench.errors import UsageError
from kvbench.run.arms import Arm, abba_order, build_arm, parse_arms

ROUNDS = 2  # A B B A: drift over the run falls on both arms alike


def plan_arms(scn: Any, text: str, baseline_url: str | None) -> list[Arm]:
    """The arms, checked before anything is sent (one line for each refusal)."""
    from kvbench.engines.adapters import get_adapter

    if scn.test_name != "replay":
        raise UsageError(f"--arms: runs the replay test's arms; this scenario is {scn.test_name}")
    names = parse_arms(text)
    if "no-reuse" in names:
        raise UsageError("--arms no-reuse: the replay salts per run, not per request, so it cannot run yet")
    embedded = scn.target.base_url is None
    adapter = get_adapter("mock" if embedded else (scn.target.engine or "generic"))
    mock_over = {**scn.test.mock_defaults, **scn.target.mock_overrides}
    return [build_arm(n, adapter, embedded, mock_over, baseline_url) for n in names]


def arm_rows(run_dir: Path) -> list[dict[str, Any]]:
    """A finished arm run's measured request rows (the replay phase's; probes left out)."""
    from kvbench.results.files import REQUESTS, read_jsonl
    from kvbench.run.replay.phases import PHASE

    return [r for r in read_jsonl(run_dir / REQUESTS) if r.get("phase") == PHASE]


def arm_tiers(run_dir: Path, engine: str) -> dict[str, float]:
    """Hit tokens per serving tier from the server's own counters (the phases' deltas)."""
    from kvbench.engines.adapters import get_adapter
    from kvbench.results.files import METRIC_DELTAS

    path = run_dir / METRIC_DELTAS
    if not path.is_file():
        return {}
    adapter, out = get_adapter(engine), dict[str, float]()
    for deltas in json.loads(path.read_text(encoding="utf-8")).values():
        for label, tokens in adapter.tier_hits(deltas or {}).items():
            tier = adapter.tier_of_source.get(label, label)
            out[tier] = out.get(tier, 0.0) + tokens
    return out


def write_verdict(folder: Path, runs: list[tuple[str, Path]], scn: Any, engine: str) -> list[str]:
    """verdict.json, verdict.md and verdict.html over the arms' runs; returns the table's lines."""
    from kvbench.report.core.formats import Section, Table, to_html
    from kvbench.report.core.goodput import per_request_bounds
    from kvbench.report.summary_model import VerdictRow
    from kvbench.report.verdict.table import HEAD, verdict_cells, verdict_markdown, verdict_rows

    rows: dict[str, list[dict[str, Any]]] = {}
    tiers: dict[str, dict[str, float]] = {}
    for name, path in runs:
        rows.setdefault(name, []).extend(arm_rows(path))
        for tier, tokens in arm_tiers(path, engine).items():
            tiers.setdefault(name, {})[tier] = tiers.get(name, {}).get(tier, 0.0) + tokens
    bounds = per_request_bounds(scn.slo.bounds()) if scn.slo is not None else {}
    table = [VerdictRow(**r).model_dump() for r in verdict_rows(rows, bounds, tiers)]  # the typed record
    arms_doc = [{"arm": n, "run_id": p.name, "run_dir": str(p)} for n, p in runs]
    doc = {"arms": arms_doc, "slo": bounds, "verdict": table}
    (folder / "verdict.json").write_text(json.dumps(doc, indent=2), encoding="utf-8")
    lines = verdict_markdown(table)
    (folder / "verdict.md").write_text("# Offload verdict\n\n" + "\n".join(lines) + "\n", encoding="utf-8")
    arms = ", ".join(f"{n} ({p.name})" for n, p in runs)
    section = Section("Offload verdict", [f"Arms in run order: {arms}."], [Table(HEAD, verdict_cells(table))])
    (folder / "verdict.html").write_text(to_html("kvbench offload verdict", [section]), encoding="utf-8")
    return lines


def run_arms(load: Any, arms: list[Arm], output_dir: Path, opts: dict[str, Any]) -> int:
    """Each arm in ABBA order as its own run (`load(overrides)` gives its scenario), then the verdict."""
    import asyncio

    from kvbench.run.runner import RunOptions, run_scenario

    folder = output_dir / f"arms-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"
    folder.mkdir(parents=True, exist_ok=False)
    by_name = {a.name: a for a in arms}
    runs: list[tuple[str, Path]] = []
    scn = load({})
    engine = "mock" if scn.target.base_url is None else (scn.target.engine or "generic")
    with asyncio.Runner() as runner:
        for i, name in enumerate(abba_order([a.name for a in arms], ROUNDS)):
            sub = folder / f"{i}-{name}"
            sub.mkdir()
            run_opts = RunOptions(
                output_dir=sub,
                quiet=opts["quiet"],
                report=False,
                allow_unverified_cold=opts["allow_unverified_cold"],
            )
            outcome = runner.run(run_scenario(load(by_name[name].overrides), run_opts))
            if outcome.run_dir is None or outcome.status == "interrupted":
                print(f"kvbench: arm {name} interrupted; finished arms are in {folder}")
                return 130
            print(f"arm {i} {name}: {outcome.run_dir}")
            runs.append((name, outcome.run_dir))
    for line in write_verdict(folder, runs, scn, engine):
        print(line)
    write_arm_reports(runs)
    print(f"verdict: {folder / 'verdict.md'}")
    return 0


def write_arm_reports(runs: list[tuple[str, Path]]) -> None:
    """Each arm's own report, written once the verdict exists, so that it carries the verdict."""
    from kvbench.report.render import write_report
    from kvbench.results.files import WriteFailed

    for name, path in runs:
        try:
            print(f"arm {name} report: {write_report(path, quiet=True)}")
        except OSError as exc:  # a disk that filled: one line naming the file, exit 1
            raise WriteFailed(Path(exc.filename or path), exc) from None


def arms_cmd(
    scenario: str,
    overrides: dict[str, Any],
    arms: tuple[str | None, str | None],
    output_dir: Path,
    quiet: bool,
    allow_unverified_cold: bool,
) -> int:
    """`kvbench run replay --arms` (`arms`: its value and --baseline-url): plan (refusals before
    anything is sent), then run the arms."""
    from kvbench.scenario import load_scenario

    def load(extra: dict[str, Any]) -> Any:
        return load_scenario(scenario, {**overrides, **extra})[0]

    text, baseline_url = arms
    assert text is not None
    planned = plan_arms(load({}), text, baseline_url)
    opts = {"quiet": quiet, "allow_unverified_cold": allow_unverified_cold}
    return run_arms(load, planned, output_dir, opts)
