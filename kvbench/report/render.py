"""Reports: summary.json, report.md, a self-contained report.html and PNG plots.

`write_report(run_dir)` is what the runner calls at the end of a run and what
`kvbench report RUN_DIR` runs; `compare_runs([...], out)` is `kvbench compare`.
Both read only saved results, so they work offline on any run directory:
complete, interrupted, killed (status still "running": "did not finish") or empty.

A report is built as a list of `Section`s (paragraphs and tables) rendered to
Markdown and to HTML from the same data.
"""

from __future__ import annotations

import base64
import html
import json
import math
import warnings
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kvbench.errors import UsageError

STATUS_TEXT = {
    "complete": "complete",
    "interrupted": "interrupted (partial results)",
    "running": "did not finish (killed, or still running: manifest status is still 'running')",
    "failed": "failed",
}


# --------------------------------------------------------------------------- formatting


def fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if math.isnan(x) or math.isinf(x):
            return "n/a"
        if x == 0:
            return "0"
        mag = abs(x)
        if mag >= 1000:
            return f"{x:,.0f}"
        d = max(0, digits - 1 - math.floor(math.log10(mag)))
        return f"{x:.{d}f}"
    return str(x)


def fmt_ci(ci: Any, digits: int = 3) -> str:
    if not ci:
        return "n/a"
    return f"[{fmt(ci[0], digits)}, {fmt(ci[1], digits)}]"


def fmt_ms_as_s(ms: float | None) -> str:
    return "n/a" if ms is None else fmt(ms / 1000.0)


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]
    caption: str = ""


@dataclass
class Section:
    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    images: list[Path] = field(default_factory=list)
    level: int = 2


# --------------------------------------------------------------------------- summary


def _read_noise(run_dir: Path) -> list[dict[str, Any]]:
    from kvbench.results import NOISE, read_jsonl

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read_jsonl(run_dir / NOISE)


def simulated_banner(manifest: dict[str, Any]) -> str | None:
    target = manifest.get("target") or {}
    if manifest.get("simulated") or target.get("kind") == "mock":
        profile = target.get("mock_profile")
        if isinstance(profile, dict):
            profile = profile.get("name") or "custom"
        return (
            f"SIMULATED: these figures come from kvbench's mock server (profile {profile or 'default'}), "
            "not from real hardware."
        )
    return None


def build_summary(
    run_dir: Path | str, geometry: str | None = None, seed: int | None = None
) -> tuple[dict[str, Any], Any, list[dict[str, Any]]]:
    """(summary dict, requests DataFrame, noise rows) of one run directory."""
    from kvbench.report import fits, stats
    from kvbench.results import load_run, read_manifest

    run_dir = Path(run_dir)
    try:
        manifest = read_manifest(run_dir)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{run_dir}: manifest.json is not JSON: {exc}") from None
    notes: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            df = load_run(run_dir)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    notes += [str(w.message) for w in caught]
    df = stats.normalise(df)
    seed_ = stats.DEFAULT_SEED if seed is None else seed
    phase_list = stats.phase_stats(df, manifest, seed=seed_)
    status = str(manifest.get("status") or "unknown")
    if df.empty:
        notes.append("no requests were recorded")
    for p in manifest.get("phases") or []:
        if p.get("cold_verified") is False:
            notes.append(f"phase {p.get('name')}: the cold cache was NOT verified (cold figures may be warm)")
        nz = p.get("noise") or {}
        if nz and nz.get("reached_target") is False:
            notes.append(
                f"phase {p.get('name')}: noise reached {fmt((nz.get('mean_bytes_per_s') or 0) / 1e9)} GB/s, "
                f"short of its {fmt((nz.get('target_bytes_per_s') or 0) / 1e9)} GB/s target"
            )
    errors = sum(p.errors for p in phase_list)
    if errors:
        notes.append(f"{errors} failed requests are counted as errors and left out of latency statistics")
    summary: dict[str, Any] = {
        "kvbench_report_version": 1,
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "run": {
            "run_id": manifest.get("run_id") or run_dir.name,
            "run_dir": str(run_dir),
            "scenario": manifest.get("scenario_name"),
            "test": manifest.get("test"),
            "status": status,
            "status_text": STATUS_TEXT.get(status, status)
            + (f": {manifest.get('error')}" if status == "failed" and manifest.get("error") else ""),
            "started_at": manifest.get("started_at"),
            "ended_at": manifest.get("ended_at"),
            "target": manifest.get("target") or {},
            "simulated": bool(
                manifest.get("simulated") or (manifest.get("target") or {}).get("kind") == "mock"
            ),
            "reference": manifest.get("reference"),
            "requests": len(df),
        },
        "banner": simulated_banner(manifest),
        "phases": [p.to_dict() for p in phase_list],
        "ttft_by_length": stats.ttft_by_length(df, seed=seed_),
        "ttft_speedups": stats.ttft_speedups(df, seed=seed_),
        "throughput": stats.throughput_comparison(phase_list, seed=seed_),
        "noise": stats.noise_impact(phase_list, seed=seed_),
        "fits": fits.fit_run(df, manifest, geometry),
        "notes": notes,
    }
    summary["published"] = published_comparison(summary) if manifest.get("reference") == "ibm-g4" else None
    if manifest.get("test") == "sessions":
        from kvbench.report.sessions import turns_summary

        summary["sessions"] = turns_summary(run_dir)
        summary["throughput"] = None  # users' pauses pace a sessions phase: its req/s ratio means nothing
    return summary, df, _read_noise(run_dir)


# --------------------------------------------------------------------------- published


def published_comparison(summary: dict[str, Any]) -> dict[str, Any]:
    """Measured next to the published IBM G4 figures, with measured/published ratios."""
    from kvbench.reference import reference_path
    from kvbench.report.claims import audit, load_claims
    from kvbench.report.quantities import fmt_num

    ledger = audit(load_claims(reference_path("ibm-g4")))
    figs = {f.id: f for f in ledger.figures}
    claims = {c.id: c for c in ledger.claims}

    def pub(fid: str, to: float = 1.0) -> float | None:
        f = figs.get(fid)
        return None if f is None or f.interval is None or f.kind != "published" else f.interval.mid * to

    rows: list[dict[str, Any]] = []

    def add(metric: str, measured: float | None, published: float | None, unit: str, note: str = "") -> None:
        ratio = measured / published if measured is not None and published else None
        rows.append(
            {
                "metric": metric,
                "measured": measured,
                "published": published,
                "unit": unit,
                "measured_over_published": ratio,
                "note": note,
            }
        )

    def near(tokens: int, target: int) -> bool:
        return abs(tokens - target) <= 0.05 * target

    for r in summary["ttft_by_length"]:
        for label, fid, n in (
            ("cold", "ttft_uncached_130k", 130_000),
            ("warm", "ttft_cached_130k", 130_000),
            ("warm", "ttft_cached_30k", 30_000),
        ):
            if r["label"] == label and near(r["tokens"], n):
                add(
                    f"TTFT {label} at {r['tokens']:,} tokens (median)", r["ttft_p50_ms"] / 1000, pub(fid), "s"
                )
    for s in summary["ttft_speedups"]:
        if s["label"] == "warm" and near(s["tokens"], 130_000) and "ttft-speedup-130k" in claims:
            c = claims["ttft-speedup-130k"]
            add(
                f"TTFT speedup cold/warm at {s['tokens']:,} tokens",
                s["speedup"],
                c.stated,
                "x",
                f"published 'up to {fmt_num(c.stated, c.decimals)}x'; the printed TTFTs give "
                f"{fmt(c.recomputed.mid if c.recomputed else None)}x",
            )
    t = summary.get("throughput")
    if t:
        add("throughput with cache (req/s)", t["cached_requests_per_s"], pub("rate_cached"), "req/s")
        add("throughput recomputing (req/s)", t["baseline_requests_per_s"], pub("rate_baseline"), "req/s")
        add(
            "throughput speedup (req/s ratio)",
            t["rate_ratio"],
            22.0,
            "x",
            "published '22x'; the cold-cache bound with each prompt used twice is 2x without shared prefixes",
        )
        add(
            "total time with cache (s)",
            t["cached_total_s"],
            pub("total_cached"),
            "s",
            f"published for 200 requests; this run completed {t['cached_ok']}",
        )
        add(
            "total time recomputing (s)",
            t["baseline_total_s"],
            pub("total_baseline"),
            "s",
            f"published for 200 requests; this run completed {t['baseline_ok']}",
        )
    nz = summary.get("noise")
    if nz:
        add("throughput under noise (req/s)", nz["noisy_requests_per_s"], pub("rate_noisy"), "req/s")
        rq, rn = pub("rate_cached"), pub("rate_noisy")
        drop = (1 - rn / rq) * 100 if rq and rn else None
        tq, tn = pub("total_cached"), pub("total_noisy")
        inc = (tn / tq - 1) * 100 if tq and tn else None
        add(
            "drop in req/s relative to quiet (%)",
            nz["rate_drop_pct"],
            drop,
            "%",
            "published figures give 15.5% (4.26 -> 3.6); IBM states 18%",
        )
        add(
            "increase in total time relative to quiet (%)",
            nz["time_increase_pct"],
            inc,
            "%",
            "published totals give 18.4% (46.94 -> 55.56 s): the likely source of '18%'",
        )
    return {
        "reference": "ibm-g4",
        "rows": rows,
        "simulated": summary["run"]["simulated"],
        "discrepancies": [c.id for c in ledger.discrepancies],
    }


# --------------------------------------------------------------------------- sections


def _run_section(summary: dict[str, Any]) -> Section:
    run = summary["run"]
    target = run["target"]
    rows = [
        ["run", str(run["run_id"])],
        ["scenario / test", f"{run['scenario']} / {run['test']}"],
        ["status", run["status_text"]],
        ["started / ended (UTC)", f"{run['started_at']} / {run['ended_at'] or 'n/a'}"],
        ["target", f"{target.get('kind', '?')} {target.get('base_url') or ''}".strip()],
        [
            "model / engine",
            f"{target.get('model')} / {target.get('engine')} {target.get('server_version') or ''}",
        ],
        ["simulated", "yes (kvbench mock)" if run["simulated"] else "no"],
        ["reference", str(run["reference"])],
        ["requests recorded", fmt(run["requests"])],
    ]
    paras = []
    if summary.get("banner"):
        paras.append(f"**{summary['banner']}**")
    return Section("Run", paras, [Table(["", ""], rows)])


def _speedup_section(summary: dict[str, Any]) -> Section | None:
    sp = summary["ttft_speedups"]
    if not sp:
        return None
    rows = [
        [
            fmt(s["tokens"]),
            s["label"],
            f"{fmt_ms_as_s(s['baseline_p50_ms'])} (n={s['n_baseline']})",
            f"{fmt_ms_as_s(s['p50_ms'])} (n={s['n']})",
            fmt(s["speedup"]),
            fmt_ci(s["speedup_ci"]),
        ]
        for s in sp
    ]
    return Section(
        "TTFT speedup per prompt length",
        [
            "Baseline: the **cold** requests (prefix recomputed). "
            "Speedup = median cold TTFT / median TTFT of "
            "the other label at the same requested length; 95% CI by a seeded bootstrap."
        ],
        [Table(["prompt tokens", "vs", "cold TTFT p50 (s)", "TTFT p50 (s)", "speedup (x)", "95% CI"], rows)],
    )


def _throughput_section(summary: dict[str, Any]) -> Section | None:
    t = summary["throughput"]
    if not t:
        return None
    rows = [
        ["requests/s ratio", t["rate_ratio_what"], fmt(t["rate_ratio"]), fmt_ci(t["rate_ratio_ci"])],
        ["total-time ratio", t["time_ratio_what"], fmt(t["time_ratio"]), "n/a"],
    ]
    detail = [
        ["cached", fmt(t["cached_ok"]), fmt(t["cached_requests_per_s"]), fmt(t["cached_total_s"])],
        ["baseline", fmt(t["baseline_ok"]), fmt(t["baseline_requests_per_s"]), fmt(t["baseline_total_s"])],
    ]
    paras = [f"Baseline: {t['baseline']}. Compared: {t['cached']}."]
    if not t["same_request_count"]:
        paras.append(
            "The two sides completed different numbers of requests: the total-time ratio is not a "
            "like-for-like comparison; prefer the requests/s ratio."
        )
    if t["rate_ratio_ci"] is None:
        paras.append("No CI for the rate ratio: each side has a single phase (repeat the phases for one).")
    return Section(
        "Throughput: cached vs baseline",
        paras,
        [
            Table(["speedup", "definition", "value (x)", "95% CI"], rows),
            Table(["side", "ok requests", "requests/s", "total time (s)"], detail),
        ],
    )


def _noise_section(summary: dict[str, Any]) -> Section | None:
    n = summary["noise"]
    if not n:
        return None
    rows = [
        [
            "drop in requests/s",
            n["rate_drop_what"],
            f"{fmt(n['rate_drop_pct'])}%",
            fmt_ci(n["rate_drop_ci_pct"]),
        ],
        ["increase in total time", n["time_increase_what"], f"{fmt(n['time_increase_pct'])}%", "n/a"],
    ]
    detail = [
        ["quiet", fmt(n["quiet_requests_per_s"]), fmt(n["quiet_total_s"]), "0"],
        [
            "noisy",
            fmt(n["noisy_requests_per_s"]),
            fmt(n["noisy_total_s"]),
            fmt((n["noise_mean_bytes_per_s"] or 0) / 1e9) if n["noise_mean_bytes_per_s"] else "n/a",
        ],
    ]
    return Section(
        "Noisy neighbour: noisy vs quiet",
        [
            f"Baseline: {n['baseline']}. Compared: {n['noisy']}. "
            "Both readings are shown: a drop in rate and a "
            "rise in time are different percentages of the same slowdown."
        ],
        [
            Table(["effect", "definition", "value", "95% CI"], rows),
            Table(["side", "requests/s", "total time (s)", "competing traffic (GB/s)"], detail),
        ],
    )


def _phase_section(summary: dict[str, Any]) -> Section | None:
    if not summary["phases"]:
        return None
    rows1, rows2 = [], []
    for p in summary["phases"]:
        t, i, e, d = p["ttft_ms"], p["itl_ms"], p["e2e_ms"], p["dispatch_delay_ms"]
        rows1.append(
            [
                p["phase"],
                p["label"],
                fmt(p["requests"]),
                fmt(p["errors"]),
                fmt(p["requests_per_s"]),
                fmt(p["output_tokens_per_s"]),
                fmt(p["duration_s"]),
                p["duration_source"],
            ]
        )
        rows2.append(
            [
                p["phase"],
                p["label"],
                fmt(t["mean"]),
                fmt(t["p50"]),
                fmt_ci(p["ttft_p50_ci_ms"]),
                fmt(t["p90"]),
                fmt(t["p99"]),
                fmt(t["min"]),
                fmt(t["max"]),
                fmt(i["p50"]),
                fmt(e["p50"]),
                fmt(e["p99"]),
                fmt(d["p50"]),
                fmt(d["max"]),
            ]
        )
    return Section(
        "Per phase and label",
        [
            "requests/s = completed ok requests / phase wall time "
            "(manifest duration_s when the phase has one "
            "label, else the span of its requests). Latencies in ms over ok requests; ITL is the per-request "
            "mean gap; dispatch delay (sent - scheduled) is kept apart from TTFT."
        ],
        [
            Table(
                [
                    "phase",
                    "label",
                    "requests",
                    "errors",
                    "req/s",
                    "output tok/s",
                    "wall time (s)",
                    "time source",
                ],
                rows1,
            ),
            Table(
                [
                    "phase",
                    "label",
                    "TTFT mean",
                    "TTFT p50",
                    "p50 95% CI",
                    "TTFT p90",
                    "TTFT p99",
                    "TTFT min",
                    "TTFT max",
                    "ITL p50",
                    "E2E p50",
                    "E2E p99",
                    "dispatch p50",
                    "dispatch max",
                ],
                rows2,
            ),
        ],
    )


def _fit_section(summary: dict[str, Any]) -> Section | None:
    f = summary["fits"]
    if not (f.get("warm") or f.get("cold")):
        return None
    paras = [f"Geometry for KV bytes: {f['geometry'] or 'none'} (from {f['geometry_source']})."]
    tables = []
    for kind in ("cold", "warm"):
        fit = f.get(kind)
        if not fit:
            continue
        params = ", ".join(f"{k} = {v:.4g}" for k, v in fit["params"].items())
        paras.append(
            f"**{kind}**: {fit['formula']}; {params}; RMSE {fmt(fit['rmse_ms'])} ms, "
            f"R² {fmt(fit['r2'], 4)}. " + " ".join(fit["notes"])
        )
        rows = [
            [fmt(int(p["tokens"])), fmt(p["measured_ms"]), fmt(p["fitted_ms"]), fmt(p["residual_ms"])]
            for p in fit["points"]
        ]
        rows += [
            [
                fmt(p["tokens"]),
                "—",
                fmt(p["ttft_ms"]),
                "EXTRAPOLATION (outside the measured range)" if p["extrapolated"] else "interpolated",
            ]
            for p in fit["predictions"]
        ]
        tables.append(
            Table(
                ["prompt tokens", "measured p50 (ms)", "fitted (ms)", "residual (ms) / note"],
                rows,
                caption=f"{kind} TTFT fit, measured {fit['measured_range'][0]:,}–"
                f"{fit['measured_range'][1]:,} tokens",
            )
        )
    return Section("Model fits", paras, tables)


def _published_section(summary: dict[str, Any]) -> Section | None:
    p = summary.get("published")
    if not p:
        return None
    paras = []
    if p["simulated"]:
        paras.append(
            f"**{summary['banner']}** The measured column is a simulation: agreement with the published "
            "figures checks the mock's calibration, not any hardware."
        )
    paras.append(
        "Published figures: IBM Storage Scale G4 results (kvbench/reference/ibm-g4.yaml); "
        "`kvbench audit` checks them against each other. Published claims found inconsistent: "
        + (", ".join(p["discrepancies"]) or "none")
        + "."
    )
    rows = [
        [
            r["metric"],
            fmt(r["measured"]),
            fmt(r["published"]),
            r["unit"],
            fmt(r["measured_over_published"]),
            r["note"],
        ]
        for r in p["rows"]
    ]
    if not rows:
        paras.append("None of this run's measurements corresponds to a published figure.")
    return Section(
        "Measured vs published (IBM G4)",
        paras,
        [Table(["metric", "measured", "published", "unit", "measured / published", "note"], rows)],
    )


def _sessions_section(summary: dict[str, Any]) -> Section | None:
    if not summary.get("sessions"):
        return None
    from kvbench.report.sessions import session_rows_from_table, tier_rows

    header, rows = session_rows_from_table(summary["sessions"]["per_turn"])
    th, tr = tier_rows(summary["sessions"])
    return Section(
        "Sessions: per turn",
        [
            "Median per turn index; speedup = baseline TTFT / cached TTFT for the same user and turn "
            "(median over users); hit ratio = cached / context tokens; tier = the tier that served "
            "most cached tokens (`none`: recomputed). Below: later turns by the tier that served them."
        ],
        [Table(header, rows), Table(th, tr)],
    )


def build_sections(summary: dict[str, Any], images: list[Path]) -> list[Section]:
    secs = [_run_section(summary)]
    if (sessions := _sessions_section(summary)) is not None:
        secs.append(sessions)
    for make in (
        _speedup_section,
        _throughput_section,
        _noise_section,
        _published_section,
        _phase_section,
        _fit_section,
    ):
        s = make(summary)
        if s is not None:
            secs.append(s)
    if summary["notes"]:
        secs.append(Section("Notes", [f"- {n}" for n in summary["notes"]]))
    if images:
        secs.append(Section("Plots", [], [], images))
    return secs


# --------------------------------------------------------------------------- renderers


def _md_cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def to_markdown(title: str, sections: list[Section]) -> str:
    out = [f"# {title}", ""]
    for s in sections:
        out += ["#" * s.level + " " + s.title, ""]
        for p in s.paragraphs:
            out += [p, ""]
        for t in s.tables:
            if t.caption:
                out += [f"*{t.caption}*", ""]
            out.append("| " + " | ".join(_md_cell(h) for h in t.headers) + " |")
            out.append("|" + "---|" * len(t.headers))
            out += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in t.rows]
            out.append("")
        for img in s.images:
            out += [f"![{img.stem}]({img.name})", ""]
    return "\n".join(out)


def _inline_md(text: str) -> str:
    """Escape, then turn **bold** and `code` into HTML."""
    import re

    esc = html.escape(text)
    esc = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", esc)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", esc)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1200px;margin:2em auto;
padding:0 1em;
color:#17202a}
table{border-collapse:collapse;margin:0.6em 0 1.2em;font-size:0.9em}
th,td{border:1px solid #ccd1d1;padding:0.25em 0.6em;text-align:left;vertical-align:top}
th{background:#eaf2f8}
.banner{background:#fdebd0;border:2px solid #d68910;padding:0.6em 1em;font-weight:bold;margin:1em 0}
img{max-width:100%;border:1px solid #ddd;margin:0.5em 0}
caption{caption-side:top;text-align:left;font-style:italic;padding-bottom:0.3em}
"""


def to_html(title: str, sections: list[Section], banner: str | None = None) -> str:
    out = [
        "<!DOCTYPE html>",
        "<html lang='en'><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    if banner:
        out.append(f"<div class='banner'>{html.escape(banner)}</div>")
    for s in sections:
        out.append(f"<h{s.level}>{html.escape(s.title)}</h{s.level}>")
        for p in s.paragraphs:
            out.append(f"<p>{_inline_md(p)}</p>")
        for t in s.tables:
            out.append("<table>")
            if t.caption:
                out.append(f"<caption>{html.escape(t.caption)}</caption>")
            if any(t.headers):
                out.append("<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in t.headers) + "</tr>")
            for r in t.rows:
                out.append("<tr>" + "".join(f"<td>{_inline_md(c)}</td>" for c in r) + "</tr>")
            out.append("</table>")
        for img in s.images:
            data = base64.b64encode(img.read_bytes()).decode("ascii")
            out.append(
                f"<figure><img alt='{html.escape(img.stem)}' src='data:image/png;base64,{data}'>"
                f"<figcaption>{html.escape(img.name)}</figcaption></figure>"
            )
    out.append("</body></html>")
    return "\n".join(out)


def key_table(summary: dict[str, Any]) -> Table:
    """The table printed on the terminal: the headline comparisons of the run."""
    rows: list[list[str]] = []
    for s in summary["ttft_speedups"]:
        rows.append(
            [
                f"TTFT speedup @ {s['tokens']:,} tok",
                f"cold / {s['label']}",
                f"{fmt(s['speedup'])}x {fmt_ci(s['speedup_ci'])}",
                f"{fmt_ms_as_s(s['baseline_p50_ms'])} s -> {fmt_ms_as_s(s['p50_ms'])} s",
            ]
        )
    t = summary["throughput"]
    if t:
        rows.append(
            [
                "throughput speedup",
                f"baseline -> {t.get('cached_label', 'cached')}",
                f"{fmt(t['rate_ratio'])}x (req/s ratio)",
                f"{fmt(t['baseline_requests_per_s'])} -> {fmt(t['cached_requests_per_s'])} req/s",
            ]
        )
        rows.append(
            [
                "throughput speedup",
                f"baseline -> {t.get('cached_label', 'cached')}",
                f"{fmt(t['time_ratio'])}x (total-time ratio)",
                f"{fmt(t['baseline_total_s'])} -> {fmt(t['cached_total_s'])} s",
            ]
        )
    n = summary["noise"]
    if n:
        rows.append(
            [
                "noisy neighbour",
                "quiet -> noisy",
                f"-{fmt(n['rate_drop_pct'])}% req/s (vs quiet rate)",
                f"{fmt(n['quiet_requests_per_s'])} -> {fmt(n['noisy_requests_per_s'])} req/s",
            ]
        )
        rows.append(
            [
                "noisy neighbour",
                "quiet -> noisy",
                f"+{fmt(n['time_increase_pct'])}% time (vs quiet time)",
                f"{fmt(n['quiet_total_s'])} -> {fmt(n['noisy_total_s'])} s",
            ]
        )
    for t in (summary.get("sessions") or {}).get("per_turn") or []:
        rows.append(
            [
                f"sessions turn {t['turn']} ({fmt(t['context_tokens'])} tok)",
                "baseline -> cached",
                f"{fmt(t['speedup'])}x, hit {fmt((t['hit_ratio'] or 0) * 100)}%, {t['tier'] or '-'}",
                f"{fmt(t['ttft_baseline_ms'])} -> {fmt(t['ttft_cached_ms'])} ms",
            ]
        )
    if not rows:
        for p in summary["phases"]:
            rows.append(
                [
                    f"phase {p['phase']}",
                    p["label"],
                    f"{fmt(p['requests_per_s'])} req/s",
                    f"TTFT p50 {fmt(p['ttft_ms']['p50'])} ms, {p['errors']} errors",
                ]
            )
    return Table(["measure", "baseline -> compared", "value", "from"], rows, caption="key results")


def print_table(table: Table, title: str, banner: str | None = None) -> None:
    try:
        from rich.console import Console
        from rich.table import Table as RichTable

        console = Console()
        if not console.is_terminal:
            console = Console(width=120)  # pipes and captured output: do not squash the table
        if banner:
            console.print(f"[bold yellow]{banner}[/]")
        rt = RichTable(title=title)
        for h in table.headers:
            rt.add_column(h)
        for r in table.rows:
            rt.add_row(*r)
        if not table.rows:
            rt.add_row(*(["(no requests)"] + [""] * (len(table.headers) - 1)))
        console.print(rt)
    except ImportError:  # pragma: no cover - rich ships with typer
        print(title)
        if banner:
            print(banner)
        print(" | ".join(table.headers))
        for r in table.rows:
            print(" | ".join(r))


# --------------------------------------------------------------------------- entry points


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, set | tuple):
        return list(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _clean(obj: Any) -> Any:
    """NaN/inf -> None, so summary.json is strict JSON."""
    if isinstance(obj, float) and (math.isnan(obj) or math.isinf(obj)):
        return None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item"):
        return _clean(obj.item())
    return obj


def write_json(path: Path, data: Any) -> None:
    path.write_text(
        json.dumps(_clean(data), indent=2, default=_json_default, allow_nan=False) + "\n", encoding="utf-8"
    )


def write_report(run_dir: Path, quiet: bool = False, geometry: str | None = None) -> Path:
    """Write summary.json, report.md, report.html and PNG plots into `run_dir`; return report.html's path.

    Prints the key table unless `quiet`. Works on complete, interrupted, killed and empty runs.
    """
    from kvbench.report import plots

    run_dir = Path(run_dir)
    summary, df, noise_rows = build_summary(run_dir, geometry=geometry)
    published = None
    if summary["run"]["reference"] == "ibm-g4":
        from kvbench.reference import published_points

        published = published_points("ibm-g4")
    images = plots.save_run_plots(run_dir, df, summary, noise_rows, published)
    if summary.get("sessions"):
        from kvbench.report.sessions import read_turns, save_session_plots

        images += save_session_plots(read_turns(run_dir), run_dir)
    summary["plots"] = [p.name for p in images]
    write_json(run_dir / "summary.json", summary)
    title = f"kvbench report: {summary['run']['run_id']}"
    sections = build_sections(summary, images)
    (run_dir / "report.md").write_text(to_markdown(title, sections), encoding="utf-8")
    html_path = run_dir / "report.html"
    html_path.write_text(to_html(title, sections, summary.get("banner")), encoding="utf-8")
    if not quiet:
        status = summary["run"]["status_text"]
        print_table(key_table(summary), f"{summary['run']['run_id']} ({status})", summary.get("banner"))
        print(f"report: {html_path}")
    return html_path


# --------------------------------------------------------------------------- compare


def default_compare_dir() -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    base = Path("results") if Path("results").is_dir() else Path(".")
    return base / f"compare-{stamp}"


def compare_runs(run_dirs: list[Path], out_dir: Path | None = None, quiet: bool = False) -> Path:
    """Side-by-side tables and plots for any runs; the FIRST run is the baseline of every ratio."""
    from kvbench.report import plots

    if len(run_dirs) < 2:
        raise UsageError("compare: give at least two run directories")
    out = Path(out_dir) if out_dir else default_compare_dir()
    out.mkdir(parents=True, exist_ok=True)
    summaries = [build_summary(d)[0] for d in run_dirs]
    names = [_short(s["run"]["run_id"]) for s in summaries]
    base_name = names[0]

    overview = [
        [
            n,
            str(s["run"]["test"]),
            s["run"]["status_text"],
            "yes" if s["run"]["simulated"] else "no",
            f"{s['run']['target'].get('engine')} {s['run']['target'].get('model')}",
            fmt(s["run"]["requests"]),
        ]
        for n, s in zip(names, summaries, strict=True)
    ]
    phase_rows: list[list[str]] = []
    base_rates = {p["label"]: p["requests_per_s"] for p in summaries[0]["phases"]}
    base_ttft = {p["label"]: p["ttft_ms"]["p50"] for p in summaries[0]["phases"]}
    for n, s in zip(names, summaries, strict=True):
        for p in s["phases"]:
            br, bt = base_rates.get(p["label"]), base_ttft.get(p["label"])
            phase_rows.append(
                [
                    n,
                    p["phase"],
                    p["label"],
                    fmt(p["ok"]),
                    fmt(p["errors"]),
                    fmt(p["requests_per_s"]),
                    fmt(p["requests_per_s"] / br) if br and p["requests_per_s"] else "n/a",
                    fmt(p["ttft_ms"]["p50"]),
                    fmt(p["ttft_ms"]["p50"] / bt) if bt and p["ttft_ms"]["p50"] else "n/a",
                    fmt(p["e2e_ms"]["p50"]),
                ]
            )
    speed_rows = [
        [n, fmt(sp["tokens"]), sp["label"], fmt(sp["speedup"]), fmt_ci(sp["speedup_ci"])]
        for n, s in zip(names, summaries, strict=True)
        for sp in s["ttft_speedups"]
    ]
    thr_rows = []
    for n, s in zip(names, summaries, strict=True):
        t, q = s["throughput"], s["noise"]
        if t:
            thr_rows.append(
                [
                    n,
                    "cached vs baseline",
                    f"{fmt(t['rate_ratio'])}x req/s ratio",
                    f"{fmt(t['time_ratio'])}x total-time ratio",
                ]
            )
        if q:
            thr_rows.append(
                [
                    n,
                    "noisy vs quiet",
                    f"-{fmt(q['rate_drop_pct'])}% req/s (vs quiet rate)",
                    f"+{fmt(q['time_increase_pct'])}% time (vs quiet time)",
                ]
            )
    phase_table = Table(
        [
            "run",
            "phase",
            "label",
            "ok",
            "errors",
            "req/s",
            f"req/s vs {base_name}",
            "TTFT p50 (ms)",
            f"TTFT p50 vs {base_name}",
            "E2E p50 (ms)",
        ],
        phase_rows,
    )
    sections = [
        Section(
            "Runs",
            [f"Baseline of every ratio below: **{base_name}** (the first run given), matched by label."]
            + [f"**{n}**: {s['banner']}" for n, s in zip(names, summaries, strict=True) if s["banner"]],
            [Table(["run", "test", "status", "simulated", "target", "requests"], overview)],
        ),
        Section(
            "Per phase and label",
            [],
            [phase_table],
        ),
    ]
    if speed_rows:
        sections.append(
            Section(
                "TTFT speedups (baseline: cold, per run)",
                [],
                [Table(["run", "prompt tokens", "vs", "speedup (x)", "95% CI"], speed_rows)],
            )
        )
    if thr_rows:
        sections.append(
            Section(
                "Throughput and noise effects (within each run)",
                [],
                [Table(["run", "comparison", "rate reading", "time reading"], thr_rows)],
            )
        )

    images: list[Path] = []
    fig, (ax,) = plots.new_figure(width=9)
    bar_names, bar_vals = [], []
    for n, s in zip(names, summaries, strict=True):
        for p in s["phases"]:
            bar_names.append(f"{p['label']} {n}:{p['phase']}")
            bar_vals.append(p["requests_per_s"])
    plots.plot_bars(
        ax,
        bar_names,
        bar_vals,
        "completed requests per second",
        "Throughput per run and phase (ok requests / phase wall time)",
    )
    fig.savefig(out / "compare_rates.png", dpi=110)
    images.append(out / "compare_rates.png")
    if any(s["ttft_by_length"] for s in summaries):
        fig, (ax,) = plots.new_figure()
        for n, s in zip(names, summaries, strict=True):
            if s["ttft_by_length"]:
                plots.plot_ttft_vs_length(ax, s["ttft_by_length"], log=True, series=f"{n}: ")
        ax.set_title("TTFT vs prompt length, all runs (log scale)")
        fig.savefig(out / "compare_ttft.png", dpi=110)
        images.append(out / "compare_ttft.png")
    if any(s.get("sessions") for s in summaries):
        from kvbench.report.sessions import compare_rows, plot_compare_ttft, read_turns

        header, rows = compare_rows(names, run_dirs)
        if rows:
            sections.append(Section("Sessions: cached TTFT per turn", [], [Table(header, rows)]))
            fig, (ax,) = plots.new_figure()
            plot_compare_ttft(ax, [(n, read_turns(Path(d))) for n, d in zip(names, run_dirs, strict=True)])
            fig.savefig(out / "compare_sessions_ttft.png", dpi=110)
            images.append(out / "compare_sessions_ttft.png")
    sections.append(Section("Plots", [], [], images))
    title = "kvbench compare: " + " vs ".join(names)
    (out / "compare.md").write_text(to_markdown(title, sections), encoding="utf-8")
    html_path = out / "compare.html"
    html_path.write_text(to_html(title, sections), encoding="utf-8")
    write_json(out / "summary.json", {"baseline": base_name, "runs": summaries})
    if not quiet:
        print_table(
            phase_table,
            f"compare (baseline: {base_name})",
        )
        if thr_rows:
            print_table(
                Table(["run", "comparison", "rate reading", "time reading"], thr_rows), "within-run effects"
            )
        print(f"compare: {html_path}")
    return html_path


def _short(run_id: str) -> str:
    parts = run_id.split("-")
    return "-".join(parts[1:]) if len(parts) > 2 and parts[0][:8].isdigit() else run_id
