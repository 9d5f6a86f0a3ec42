"""The sweep's pictures: latency against throughput per point, goodput against load with the SLO,
and the attainment curve. Each draw_* draws on an Axes it is given; matplotlib (Agg) is imported
only inside write_plots."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from kvbench.report.sweep.tables import late_points, summary_rows
from kvbench.sweep.state import SweepState


def _num(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def series(rows: list[dict[str, Any]], x_field: str, group: str | None) -> dict[str, list[dict[str, Any]]]:
    """Measured rows by the second field's value (one series for a one-field sweep), in x order.
    A search's repeats are separate rows at the same x."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row.get("requests") and _num(row.get(x_field)) is not None:
            arm = " offload off" if row.get("arm") == "baseline" else ""  # arm B: its own series
            out[((f"{group}={row[group]}" if group else "") + arm).strip()].append(row)
    return {k: sorted(v, key=lambda r: _num(r[x_field]) or 0.0) for k, v in out.items()}


def _bars(mid: list[float], lo: list[float], hi: list[float]) -> list[list[float]]:
    """errorbar's yerr from an interval (never negative: float rounding at the ends)."""
    return [
        [max(0.0, m - a) for m, a in zip(mid, lo, strict=True)],
        [max(0.0, b - m) for m, b in zip(mid, hi, strict=True)],
    ]


def _style(rows: list[dict[str, Any]], x_field: str, line: str) -> str:
    """Markers only where a load was run more than once (a search's repeats): no zigzag line."""
    xs = [r[x_field] for r in rows]
    return line.replace("-", "").replace(":", "") if len(set(xs)) < len(xs) else line


def draw_latency(ax: Any, groups: dict[str, list[dict[str, Any]]], x_field: str) -> None:
    for name, rows in groups.items():
        xs = [r["throughput_rps"] for r in rows]
        for col, style in (("ttft_p50_ms", "o-"), ("ttft_p99_ms", "s--")):
            ax.plot(
                xs,
                [r[col] for r in rows],
                _style(rows, x_field, style),
                label=f"{col.split('_')[1]} {name}".strip(),
            )
        for r in rows:
            ax.annotate(
                str(r[x_field]),
                (r["throughput_rps"], r["ttft_p50_ms"]),
                fontsize=7,
                textcoords="offset points",
                xytext=(3, 3),
            )
    late = mark_late(ax, [r for rows in groups.values() for r in rows], "throughput_rps", "ttft_p50_ms")
    ax.set_xlabel("throughput (successful requests/s)")
    ax.set_ylabel("TTFT (ms)")
    ax.set_title(f"Latency vs throughput (points labelled by {x_field})" + late)
    ax.legend(fontsize=8)


def mark_late(ax: Any, rows: list[dict[str, Any]], x: str, y: str) -> str:
    """A red ring on every point whose TTFT is partly the embedded mock's own lateness (the table's
    LATE); the title's addition saying so ('' when no point is)."""
    late = [r for r in late_points(rows) if r.get(x) is not None and r.get(y) is not None]
    if not late:
        return ""
    ax.plot(
        [r[x] for r in late],
        [r[y] for r in late],
        "o",
        markersize=14,
        markerfacecolor="none",
        markeredgecolor="tab:red",
        label="mock late: TTFT partly this machine",
    )
    return f"\n{len(late)} point(s) ringed red: TTFT partly the mock's own lateness, not the model"


def draw_goodput(
    ax: Any, groups: dict[str, list[dict[str, Any]]], x_field: str, slo: dict[str, float]
) -> None:
    for i, (name, rows) in enumerate(groups.items()):
        xs = [_num(r[x_field]) for r in rows]
        ax.plot(
            xs,
            [r["throughput_rps"] for r in rows],
            _style(rows, x_field, "o:"),
            color=f"C{i}",
            alpha=0.45,
            label=f"throughput {name}".strip(),
        )
        if slo:
            gp = [r["goodput_rps"] for r in rows]
            err = _bars(gp, [r["goodput_lo"] for r in rows], [r["goodput_hi"] for r in rows])
            ax.errorbar(
                xs, gp, yerr=err, fmt=_style(rows, x_field, "o-"), color=f"C{i}", capsize=3,
                label=f"goodput {name}".strip(),
            )  # fmt: skip
    ax.set_xlabel(x_field)
    ax.set_ylabel("requests/s")
    ax.set_ylim(bottom=0)
    metric = next((k for k in ("ttft_p99_ms", "e2e_p99_ms", "itl_p99_ms", "ttft_p50_ms") if k in slo), None)
    if metric is not None:
        twin = ax.twinx()
        for rows in groups.values():
            twin.plot(
                [_num(r[x_field]) for r in rows],
                [r[metric] for r in rows],
                _style(rows, x_field, "^-"),
                color="tab:red",
                alpha=0.6,
            )
        twin.axhline(slo[metric], color="tab:red", linestyle="--", label=f"SLO {metric} = {slo[metric]:g}")
        twin.set_ylabel(f"{metric} (red)")
        twin.legend(loc="upper right", fontsize=8)
    ax.set_title("Goodput vs load" + (" (bars: 95% interval)" if slo else ""))
    ax.legend(loc="upper left", fontsize=8)


def draw_attainment(ax: Any, groups: dict[str, list[dict[str, Any]]], x_field: str, target: float) -> None:
    for name, rows in groups.items():
        xs = [_num(r[x_field]) for r in rows]
        att = [r["attainment"] for r in rows]
        err = _bars(att, [r["attainment_lo"] for r in rows], [r["attainment_hi"] for r in rows])
        ax.errorbar(xs, att, yerr=err, fmt=_style(rows, x_field, "o-"), capsize=3, label=name or "attainment")
    ax.axhline(target, color="tab:red", linestyle="--", label=f"target {target:g}")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel(x_field)
    ax.set_ylabel("share of requests meeting the SLO")
    ax.set_title("SLO attainment (bars: 95% Wilson interval)")
    ax.legend(fontsize=8)


TIER_COLOURS = {
    "G1": "tab:green",
    "G2": "tab:blue",
    "G3": "tab:orange",
    "G4": "tab:purple",
    "cached": "tab:cyan",
    "partial": "tab:pink",
    "recompute": "tab:red",
}
TIER_WORDS = {"recompute": "recomputed", "cached": "cached (tier not reported)", "partial": "partly cached"}


def draw_cliff(ax: Any, rows: list[dict[str, Any]], cliff: dict[str, Any], what: str = "warm") -> None:
    """Warm TTFT p50 (and p99, dotted) against working set, each point coloured by the tier that
    served it, the warm prompt's hit ratio on the right axis, the predicted boundaries dashed
    (`what`: "cached-phase" on the throughput test, whose whole cached phase is measured)."""
    pts = sorted((r for r in rows if r.get("working_set_tokens")), key=lambda r: r["working_set_tokens"])
    xs = [r["working_set_tokens"] for r in pts]
    ax.plot(xs, [r["ttft_p50_ms"] for r in pts], "-", color="grey", alpha=0.5)
    if any(r.get("ttft_p99_ms") is not None for r in pts):
        ax.plot(xs, [r.get("ttft_p99_ms") for r in pts], ":", color="grey", alpha=0.7, label="p99")
    for tier, colour in TIER_COLOURS.items():
        mine = [r for r in pts if r.get("serving_tier") == tier]
        if mine:
            ax.plot(
                [r["working_set_tokens"] for r in mine],
                [r["ttft_p50_ms"] for r in mine],
                "o",
                color=colour,
                markersize=8,
                label=TIER_WORDS.get(tier, f"served by {tier}"),
            )
    for b in cliff.get("boundaries") or []:
        ax.axvline(b["tokens"], color=TIER_COLOURS.get(b["tier"], "k"), linestyle="--", alpha=0.7)
        ax.annotate(
            f"{b['tier']} full\n{b['tokens']:,}",
            (b["tokens"], 1),
            xycoords=("data", "axes fraction"),
            fontsize=7,
            ha="left",
            va="top",
            xytext=(2, -2),
            textcoords="offset points",
        )
    hits = [(r["working_set_tokens"], r["hit_ratio"]) for r in pts if r.get("hit_ratio") is not None]
    if hits:
        twin = ax.twinx()
        twin.plot([h[0] for h in hits], [h[1] for h in hits], "x-", color="black", alpha=0.35)
        twin.set_ylim(-0.05, 1.05)
        twin.set_ylabel(f"{what} hit ratio (x, black)")
    if xs and max(xs) > 20 * min(xs):  # a few points over a small range read better on a linear axis
        ax.set_xscale("log")
    ax.set_xlabel(
        "working set (tokens the warm prompt must survive)" if what == "warm" else "working set (tokens)"
    )
    ax.set_ylabel(f"{what} TTFT (ms): p50 dots, p99 dotted")
    source = str(cliff.get("source") or "")
    late = mark_late(ax, pts, "working_set_tokens", "ttft_p50_ms")
    ax.set_title(
        "Tier-cliff map: serving tier per point, predicted boundaries (dashed)\n"
        + (source if len(source) < 110 else source[:107] + "...")
        + late,
        fontsize=8,
    )
    ax.legend(fontsize=7, loc="center left")


def write_plots(sweep_dir: Path, state: SweepState) -> list[Path]:
    """The PNGs beside sweep.json (none when no point has figures or the field is not numeric)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plan = state.plan
    fields = [f for f, _ in plan.over] or ([plan.search.field] if plan.search else [])
    rows = summary_rows(state.model_dump(mode="json"))
    groups = series(rows, fields[0], fields[1] if len(fields) > 1 else None)
    jobs: list[tuple[str, Any]] = []
    if groups:
        jobs.append(("sweep_latency.png", lambda ax: draw_latency(ax, groups, fields[0])))
        jobs.append(("sweep_goodput.png", lambda ax: draw_goodput(ax, groups, fields[0], plan.slo)))
    if groups and plan.slo:
        jobs.append(
            ("sweep_attainment.png", lambda ax: draw_attainment(ax, groups, fields[0], plan.attainment))
        )
    if state.cliff:
        cached = any((p.metrics or {}).get("label") == "cached" for p in state.points)
        what = "cached-phase" if cached else "warm"
        jobs.append(("sweep_cliff.png", lambda ax: draw_cliff(ax, rows, state.cliff or {}, what)))
    written = []
    for name, draw in jobs:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        try:
            draw(ax)
            fig.tight_layout()
            fig.savefig(sweep_dir / name, dpi=100)
        finally:
            plt.close(fig)
        written.append(sweep_dir / name)
    return written
