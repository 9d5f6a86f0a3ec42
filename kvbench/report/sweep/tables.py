"""A sweep directory's summary, from its files only (sweep.json, the PNGs beside it).

`kvbench report SWEEP_DIR` lands here when the directory holds sweep.json. The same table rows
(`summary_rows`) are what `kvbench sweep` writes as summary.csv / .md (and .parquet with the
`parquet` extra), so the table
and the report never disagree. This module reads sweep.json as plain JSON: the report layer
never imports the sweep package.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvbench.errors import UsageError

SWEEP_JSON = "sweep.json"
# The plots are drawn by kvbench.sweep (a layer above this one): its CLI registration adds its
# writer here, so `kvbench report SWEEP_DIR` redraws them while this module never imports it.
PLOT_WRITERS: list[Callable[[Path, dict[str, Any]], None]] = []
SUMMARY_MD = "summary.md"
PLOTS = ("sweep_latency.png", "sweep_goodput.png", "sweep_attainment.png", "sweep_cliff.png")


def is_sweep_dir(path: Path) -> bool:
    return (path / SWEEP_JSON).is_file()


def read_sweep(path: Path) -> dict[str, Any]:
    try:
        data = json.loads((path / SWEEP_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path / SWEEP_JSON}: cannot read ({exc})") from None
    if not isinstance(data, dict) or "points" not in data or "plan" not in data:
        raise UsageError(f"{path / SWEEP_JSON}: not a sweep file (no plan or points)")
    return data


def summary_rows(state: dict[str, Any]) -> list[dict[str, Any]]:
    """One flat row per point: its fields, status and figures (None where it has none)."""
    rows = []
    for p in state["points"]:
        m = p.get("metrics") or {}
        att = m.get("attainment_ci") or (None, None)
        gp = m.get("goodput_ci") or (None, None)
        run = p.get("run") or {}  # absent in a sweep.json written before it
        row: dict[str, Any] = {"point": p["name"], **p["assignment"], "repeat": p.get("repeat", 0)}
        if state["plan"].get("baseline"):
            row["arm"] = p.get("arm", "main")
        row.update(
            status=p["status"],
            requests=m.get("requests"),
            ok=m.get("ok"),
            throughput_rps=m.get("throughput_rps"),
            ttft_p50_ms=m.get("ttft_p50_ms"),
            ttft_p99_ms=m.get("ttft_p99_ms"),
            itl_p99_ms=m.get("itl_p99_ms"),
            e2e_p50_ms=m.get("e2e_p50_ms"),
            e2e_p99_ms=m.get("e2e_p99_ms"),
            hit_ratio=m.get("hit_ratio"),
            attainment=m.get("attainment"),
            attainment_lo=att[0],
            attainment_hi=att[1],
            goodput_rps=m.get("goodput_rps"),
            goodput_lo=gp[0],
            goodput_hi=gp[1],
            modelled_ttft_p50_ms=m.get("modelled_ttft_p50_ms"),
            mock_late_share=m.get("mock_late_share"),
            mock_late=m.get("mock_late"),
            mock_late_threshold=m.get("mock_late_threshold"),
            mock_time_scale=m.get("mock_time_scale"),
            run_dir=p.get("run_dir"),
            run_id=run.get("run_id"),
            load=run.get("load"),
            pace=run.get("pace"),
        )
        for key in ("overhead_ttft_p50", "overhead_modelled_ttft_p50"):
            if key in m:
                ci = m.get(f"{key}_ci") or (None, None)
                row.update({key: m[key], f"{key}_lo": ci[0], f"{key}_hi": ci[1]})
        if "working_set_tokens" in m:
            row.update({k: m.get(k) for k in ("working_set_tokens", "serving_tier", "predicted_tier")})
        rows.append(row)
    return rows


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


SHOWN = ("status", "requests", "throughput_rps", "ttft_p50_ms", "ttft_p99_ms", "e2e_p99_ms", "hit_ratio")
SLO_SHOWN = ("attainment", "goodput_rps")


def sweep_markdown(state: dict[str, Any]) -> str:
    """The sweep as Markdown: what was stepped, the SLO, the table, the findings, the plots."""
    plan = state["plan"]
    fields = [f for f, _ in plan.get("over") or []] or (
        [plan["search"]["field"]] if plan.get("search") else []
    )
    slo = plan.get("slo") or {}
    out = [f"# Sweep of {plan['scenario']} over {', '.join(fields)}", ""]
    out.append(f"Status: {state['status']}; {len(state['points'])} points.")
    out.extend(_runs_lines(state))
    if slo:
        bounds = ", ".join(f"{k} <= {v:g}" for k, v in slo.items())
        out.append(f"SLO: {bounds}; target attainment {plan['attainment']:g} (95% Wilson intervals).")
    out.append("")
    cliff = ("working_set_tokens", "serving_tier", "predicted_tier") if state.get("cliff") else ()
    shown = ("arm", *SHOWN) if plan.get("baseline") else SHOWN
    rows = summary_rows(state)
    late = LATE_SHOWN if any(r.get("mock_late_share") is not None for r in rows) else ()
    cols = ["point", *fields, *shown, *late, *cliff, *(SLO_SHOWN if slo else ())]
    out.extend(lateness_lines(rows))
    out.append("| " + " | ".join(cols) + " |")
    out.append("|" + "---|" * len(cols))
    for row in rows:
        cells = [_cell(row.get(c)) for c in cols]
        if late and row.get("mock_late_share") is not None:
            flag = " LATE" if row.get("mock_late") else ""
            cells[cols.index("mock_late_share")] = f"{row['mock_late_share']:.0%}{flag}"
        if slo and row.get("attainment") is not None:
            cells[cols.index("attainment")] += f" [{row['attainment_lo']:.2f}, {row['attainment_hi']:.2f}]"
        if slo and row.get("goodput_rps") is not None and row.get("goodput_lo") is not None:
            cells[cols.index("goodput_rps")] += f" [{row['goodput_lo']:.3g}, {row['goodput_hi']:.3g}]"
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    out.extend(f"- {note}" for note in state.get("notes") or [])
    search = state.get("search")
    if search and search.get("highest_meeting") is not None:
        best = next((t for t in search["trials"] if t["load"] == search["highest_meeting"]), None)
        if best is not None:
            lo, hi = best["attainment_ci"]
            out.append(
                f"- search: {fields[0]} = {search['highest_meeting']:g} meets attainment "
                f"{search['target']:g}: {best['good']}/{best['requests']} good [{lo:.2f}, {hi:.2f}] "
                f"over {best['runs']} run(s), goodput {_cell(best['goodput_rps'])} req/s"
                + (" [{:.3g}, {:.3g}]".format(*best["goodput_ci"]) if best.get("goodput_ci") else "")
            )
    out.extend(cliff_markdown(state.get("cliff")))
    out.extend(arms_markdown(state, fields))
    out.append("")
    return "\n".join(out)


LATE_SHOWN = ("mock_late_share",)


def _runs_lines(state: dict[str, Any]) -> list[str]:
    """What every point ran, from sweep.json's run record: its run id, its load (the test's own,
    never a probe) and its pace; nothing for a sweep written before points kept it."""
    runs = [(p["name"], p["run"]) for p in state["points"] if p.get("run")]
    if not runs:
        return []
    paces = {r["pace"] for _, r in runs}
    out = ["", "Each point's run (its load as its manifest records it; cold-start probes not counted):"]
    if len(paces) == 1:
        out.append(f"- pace of every point: {paces.pop()}")
    for name, r in runs:
        pace = "" if len(paces) <= 1 else f"; pace {r['pace']}"
        probes = f"; {r['probe_requests']} cold-start probe(s) besides" if r.get("probe_requests") else ""
        out.append(f"- {name}: run {r['run_id']} ({r['test']}): {r['load']}{pace}{probes}")
    return out


def late_points(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The measured points whose TTFT the embedded mock's own lateness made partly this machine's."""
    return [r for r in rows if r.get("mock_late") and r.get("requests")]


def suggested_pace(rows: list[dict[str, Any]]) -> float | None:
    """A mock time_scale at which the worst flagged point's lateness would be about half its
    threshold: lateness is this machine's milliseconds, the same at any pace, while the modelled
    TTFT grows with time_scale; rounded up to 1, 2 or 5 times a power of ten."""
    import math

    need = [
        r["mock_time_scale"] * r["mock_late_share"] / r["mock_late_threshold"] * 2
        for r in late_points(rows)
        if r.get("mock_time_scale") and r.get("mock_late_threshold")
    ]
    if not need:
        return None
    top = max(need)
    power = 10.0 ** math.floor(math.log10(top))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= top * (1 - 1e-9))


def lateness_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The sweep-wide warning above the table when any point's TTFT is partly the mock's lateness."""
    late = late_points(rows)
    if not late:
        return []
    threshold = late[0].get("mock_late_threshold") or 0.1
    scale = next((r["mock_time_scale"] for r in late if r.get("mock_time_scale")), None)
    pace = suggested_pace(rows)
    measured = [r for r in rows if r.get("requests")]
    line = (
        f"**Mock lateness: {len(late)} of {len(measured)} points marked LATE**: the embedded mock's own "
        f"lateness passed {threshold:.0%} of the modelled TTFT there, so their TTFT is partly the machine "
        "running the mock, not the model, and differences between them are not the model's "
        "(mock_late_share: its lateness over the modelled TTFT, the worst measured phase)."
    )
    if pace is not None and scale is not None:
        line += (
            f" The mock ran at time_scale {scale:g}; about {pace:g} would keep every point under the "
            f"limit: `--set 'target.mock_overrides={{time_scale: {pace:g}}}'`."
        )
    return [line, ""]


def cliff_markdown(cliff: dict[str, Any] | None) -> list[str]:
    """A working-set sweep's predicted vs observed tier boundaries."""
    if not cliff:
        return []
    out = ["", "## Tier cliffs: predicted vs observed", "", f"Prediction: {cliff['source']}.", ""]
    if not cliff["table"]:
        return out
    out.append(
        "| boundary | predicted (tokens) | size from | last served at or above | first served below "
        "| within one step |"
    )
    out.append("|---|---|---|---|---|---|")
    for r in cliff["table"]:
        out.append(
            f"| {r['tier']} -> {r['next_tier']} | {r['tokens']:,} | {r.get('source') or '-'} "
            f"| {_cell(r['observed_last_inside'])} "
            f"| {_cell(r['observed_first_beyond'])} | {'yes' if r['within_one_step'] else 'no'} |"
        )
    return out


def _overhead(row: dict[str, Any], key: str) -> str:
    v, lo, hi = row.get(key), row.get(f"{key}_lo"), row.get(f"{key}_hi")
    if v is None:
        return "-"
    return f"{v:+.1%}" + (f" [{lo:+.1%}, {hi:+.1%}]" if lo is not None and hi is not None else "")


def arm_pairs(state: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """Each arm-A row with its arm-B row (None where B did not run)."""
    rows = summary_rows(state)
    base = {r["point"]: r for r in rows if r.get("arm") == "baseline"}
    return [(r, base.get(f"{r['point']}-baseline")) for r in rows if r.get("arm") == "main"]


def arms_markdown(state: dict[str, Any], fields: list[str]) -> list[str]:
    """Offload on (A, the sweep as asked) against offload off (B) per point, with the overhead."""
    baseline = state["plan"].get("baseline")
    if not baseline:
        return []
    how = [f"base URL {baseline['url']}"] if baseline.get("url") else []
    how += [f"{k}={v}" for k, v in (baseline.get("sets") or {}).items()]
    how += ["the embedded mock's G2-G4 not caching"] if baseline.get("offload_off") else []
    slo = bool(state["plan"].get("slo"))
    head = ["point", *fields, "TTFT p50 A", "TTFT p50 B", "overhead (A/B-1) [95% CI]"]
    head += ["modelled TTFT p50 A", "modelled B", "modelled overhead", "req/s A", "req/s B"]
    head += ["goodput A", "goodput B"] if slo else []
    out = ["", "## Offload on (A) vs off (B)", ""]
    out.append(f"B: the same points with {', '.join(how)}, each run right after A's. TTFT in ms.")
    out.append(
        "Modelled (model ms): what the mock's model charges each request alone for the tokens it "
        "computed and the bytes it onboarded (its ground truth), free of this machine's load."
    )
    out += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for a, b in arm_pairs(state):
        b = b or {}
        cells = [a["point"], *(_cell(a.get(f)) for f in fields)]
        cells += [_cell(a["ttft_p50_ms"]), _cell(b.get("ttft_p50_ms")), _overhead(b, "overhead_ttft_p50")]
        cells += [_cell(a["modelled_ttft_p50_ms"]), _cell(b.get("modelled_ttft_p50_ms"))]
        cells += [_overhead(b, "overhead_modelled_ttft_p50")]
        cells += [_cell(a["throughput_rps"]), _cell(b.get("throughput_rps"))]
        cells += [_cell(a["goodput_rps"]), _cell(b.get("goodput_rps"))] if slo else []
        out.append("| " + " | ".join(cells) + " |")
    return out


def write_table_files(path: Path, state: dict[str, Any]) -> list[Path]:
    """summary.csv always; summary.parquet only where pyarrow is installed (the `parquet` extra: a
    plain `make setup` venv has none), from sweep.json's points."""
    import importlib.util

    import pandas as pd

    from kvbench.results.files import write_text_atomic

    df = pd.DataFrame(summary_rows(state))
    written = [path / "summary.csv"]
    write_text_atomic(written[0], df.to_csv(index=False))
    if importlib.util.find_spec("pyarrow") is not None and len(df):
        df.to_parquet(path / "summary.parquet", index=False)
        written.append(path / "summary.parquet")
    return written


def write_sweep_report(path: Path, quiet: bool = False, redraw: bool = False) -> Path:
    """summary.csv/.parquet and summary.md (with links to the plots present) from sweep.json,
    and with `redraw` the plots again; prints the Markdown unless quiet."""
    state = read_sweep(path)
    written = write_table_files(path, state)
    names = ", ".join(p.name for p in [*written, path / SUMMARY_MD])
    missing = (
        ""
        if any(p.suffix == ".parquet" for p in written)
        else " (summary.parquet: pip install 'kvbench[parquet]')"
    )
    print(f"tables: {names}{missing}", file=sys.stderr)
    for draw in PLOT_WRITERS if redraw else []:
        try:
            draw(path, state)
        except ValueError as exc:  # a sweep.json this kvbench's model no longer reads: keep the PNGs there
            print(f"report: plots not redrawn ({str(exc).splitlines()[0]})", file=sys.stderr)
    text = sweep_markdown(state)
    plots = [p for p in PLOTS if (path / p).exists()]
    if plots:
        text += "\n" + "\n".join(f"![{p}]({p})" for p in plots) + "\n"
    target = path / SUMMARY_MD
    target.write_text(text, encoding="utf-8")
    if not quiet:
        print(text)
    print(f"report: {target}")
    return target
