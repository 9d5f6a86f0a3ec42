"""`kvbench compare SWEEP_A SWEEP_B`: two sweeps point by point, from their sweep.json only.

Points are matched by the values of the fields both sweeps stepped (and their arm and repeat),
so a sweep of one server against the same sweep of another reads as one table: per point and
metric, A, B and B's relative change against A. Sweeps of different fields, scenarios or SLOs
still compare, with a warning (stderr and the report's first section): their points share values,
not meaning.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from kvbench.errors import UsageError
from kvbench.report.core.formats import Section, Table, fmt, print_table, to_markdown, write_json
from kvbench.report.sweep.tables import is_sweep_dir, read_sweep, summary_rows

METRICS = (
    ("throughput_rps", "throughput (req/s)"),
    ("ttft_p50_ms", "TTFT p50 (ms)"),
    ("ttft_p99_ms", "TTFT p99 (ms)"),
    ("goodput_rps", "goodput (req/s)"),
    ("attainment", "SLO attainment"),
)
HEAD = ["point", "metric", "A", "B", "B vs A"]


def swept_fields(state: dict[str, Any]) -> list[str]:
    plan = state["plan"]
    return [f for f, _ in plan.get("over") or []] or ([plan["search"]["field"]] if plan.get("search") else [])


def sweep_warnings(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Why the two sweeps' points may not mean the same thing (empty when they do)."""
    notes = []
    fa, fb = swept_fields(a), swept_fields(b)
    if set(fa) != set(fb):
        shared = [f for f in fa if f in fb]
        how = f"points matched on {', '.join(shared)} only" if shared else "no point can be matched"
        notes.append(f"the sweeps stepped different fields (A: {', '.join(fa)}; B: {', '.join(fb)}): {how}")
    sa, sb = a["plan"]["scenario"], b["plan"]["scenario"]
    if sa != sb:
        notes.append(f"the sweeps ran different scenarios (A: {sa}; B: {sb})")
    if (a["plan"].get("slo") or {}) != (b["plan"].get("slo") or {}):
        notes.append("the sweeps judged different SLOs: their goodput and attainment are not comparable")
    return notes


def _key(row: dict[str, Any], fields: list[str]) -> tuple[Any, ...]:
    return (*(row.get(f) for f in fields), row.get("arm", "main"), row.get("repeat", 0))


def _change(va: Any, vb: Any) -> str:
    if not isinstance(va, int | float) or not isinstance(vb, int | float) or va == 0:
        return "n/a"
    return f"{(vb - va) / va * 100:+.1f}%"


def matched_points(a: dict[str, Any], b: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """Per matched point: its name and, per metric, A, B and the relative change; and the points
    only one sweep has."""
    fields = [f for f in swept_fields(a) if f in swept_fields(b)]
    rows_b = {_key(r, fields): r for r in summary_rows(b) if r.get("requests")}
    out, only = [], []
    seen = set()
    for ra in summary_rows(a):
        if not ra.get("requests"):
            continue
        key = _key(ra, fields)
        rb = rows_b.get(key) if fields else None
        name = " ".join(f"{f}={ra.get(f)}" for f in fields) or ra["point"]
        name += "" if key[-2] == "main" else f" ({key[-2]})"
        name += f" r{key[-1]}" if key[-1] else ""
        if rb is None:
            only.append(f"A only: {ra['point']}")
            continue
        seen.add(key)
        metrics = {m: (ra.get(m), rb.get(m), _change(ra.get(m), rb.get(m))) for m, _ in METRICS}
        out.append({"point": name, "a": ra["point"], "b": rb["point"], "metrics": metrics})
    only += [f"B only: {r['point']}" for k, r in rows_b.items() if k not in seen]
    return out, only


def compare_table(points: list[dict[str, Any]]) -> Table:
    rows = [
        [p["point"], label, fmt(p["metrics"][m][0]), fmt(p["metrics"][m][1]), p["metrics"][m][2]]
        for p in points
        for m, label in METRICS
        if p["metrics"][m][0] is not None or p["metrics"][m][1] is not None
    ]
    return Table(HEAD, rows)


def compare_sweeps(dirs: list[Path], out: Path, quiet: bool = False) -> Path:
    """compare.md and compare.json for two sweep directories; prints the table unless quiet."""
    if len(dirs) != 2 or not all(is_sweep_dir(d) for d in dirs):
        given = ", ".join(f"{d} ({'sweep' if is_sweep_dir(d) else 'run'})" for d in dirs)
        raise UsageError(f"compare: sweeps compare two at a time, sweep with sweep (given {given})")
    a, b = (read_sweep(d) for d in dirs)
    notes = sweep_warnings(a, b)
    points, only = matched_points(a, b)
    table = compare_table(points)
    intro = [f"A (baseline of every change): **{dirs[0]}**; B: **{dirs[1]}**. Matched by the swept values."]
    intro += [f"**Warning:** {n}" for n in notes]
    sections = [Section("Sweeps", intro), Section("Point by point", [], [table])]
    if only:
        sections.append(Section("Points in one sweep only", [", ".join(only)]))
    out.mkdir(parents=True, exist_ok=True)
    path = out / "compare.md"
    path.write_text(
        to_markdown(f"kvbench compare: {dirs[0].name} vs {dirs[1].name}", sections), encoding="utf-8"
    )
    write_json(
        out / "compare.json", {"a": str(dirs[0]), "b": str(dirs[1]), "warnings": notes, "points": points}
    )
    for n in notes:
        print(f"compare: warning: {n}", file=sys.stderr)
    if not quiet:
        print_table(table, f"compare sweeps (A: {dirs[0].name}, B: {dirs[1].name})")
        if only:
            print(f"compare: in one sweep only: {', '.join(only)}")
        print(f"compare: {path}")
    return path
