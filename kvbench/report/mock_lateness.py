"""The embedded mock's own lateness, per phase: was the mock, not the model, part of a TTFT?

The mock writes, per request (mock_ground_truth.jsonl, engine.Trace), `mock_late_ms`: how much
later than its model the first token was ready (its own work before admission, the body's
arrival included, timers woken late by a busy event loop), and `mock_cpu_ms`: the CPU its loop
spent on the request's prompt. A time-scaled run on a slow machine can make that lateness a real
part of every TTFT; a report that read it as modelled reads or prefill would attribute the
machine's speed to the model.

Per phase (requests.jsonl's `phase`, joined by request id): the mean lateness as a share of the
mean modelled TTFT (the mock's TTFT from receipt, less the lateness). Above LATE_SHARE the section
says WARNING and names the phase; a run without the mock's ground truth (a real server) or whose
ground truth predates these fields gets no section. Phases labelled probe (the cold-start probes)
are shown but never warn.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvbench.report.core.formats import Section, Table, fmt
from kvbench.report.summary import RunSummary

LATE_SHARE = 0.10  # the mock's lateness above this share of a phase's modelled TTFT: a warning
GROUND_TRUTH = "mock_ground_truth.jsonl"
PROBE = "probe"  # results.schema.Label.PROBE


def _label(phase: object) -> str:
    label = getattr(phase, "label", "")
    return str(getattr(label, "value", label))


@dataclass(frozen=True)
class PhaseLateness:
    """One phase's mock lateness against its modelled TTFT."""

    phase: str
    requests: int
    late_ms_mean: float
    late_ms_p99: float
    modelled_ttft_ms_mean: float
    cpu_ms_mean: float

    @property
    def share(self) -> float:
        return self.late_ms_mean / self.modelled_ttft_ms_mean if self.modelled_ttft_ms_mean > 0 else 0.0

    @property
    def exceeded(self) -> bool:
        return self.share > LATE_SHARE


def phase_lateness(
    requests: Iterable[Mapping[str, Any]], truth: Iterable[Mapping[str, Any]]
) -> list[PhaseLateness]:
    """Per phase, in the order phases first appear in `requests`; ground truth matched by request id."""
    by_id = {t["request_id"]: t for t in truth if "mock_late_ms" in t and t.get("first_token_ns")}
    groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in requests:
        t = by_id.get(r.get("request_id"))
        if t is not None:
            groups[str(r.get("phase", "?"))].append(t)
    out = []
    for phase, rows in groups.items():
        late = [float(t["mock_late_ms"]) for t in rows]
        ttft = [(t["first_token_ns"] - t["received_ns"]) / 1e6 for t in rows]
        modelled = statistics.fmean(max(0.0, a - b) for a, b in zip(ttft, late, strict=True))
        out.append(
            PhaseLateness(
                phase=phase,
                requests=len(rows),
                late_ms_mean=statistics.fmean(late),
                late_ms_p99=sorted(late)[min(len(late) - 1, int(0.99 * len(late)))],
                modelled_ttft_ms_mean=modelled,
                cpu_ms_mean=statistics.fmean(float(t.get("mock_cpu_ms", 0.0)) for t in rows),
            )
        )
    return out


def mock_lateness_section(summary: RunSummary) -> Section | None:
    """The section (None: no mock ground truth with lateness in the run directory)."""
    from kvbench.results import read_jsonl

    run_dir = Path(summary.run.run_dir)
    truth = read_jsonl(run_dir / GROUND_TRUTH)  # [] without the mock
    phases = phase_lateness(read_jsonl(run_dir / "requests.jsonl"), truth) if truth else []
    if not phases:
        return None
    rows = [
        [
            p.phase,
            fmt(p.requests),
            fmt(p.modelled_ttft_ms_mean),
            fmt(p.late_ms_mean),
            fmt(p.late_ms_p99),
            f"{fmt(100 * p.share)}%",
            fmt(p.cpu_ms_mean),
        ]
        for p in phases
    ]
    # the cold-start probes are shown, never warned about: they come first, into a mock whose code
    # paths are not warm yet, and they measure no TTFT the report reads as the model's
    probes = {p.phase for p in getattr(summary, "phases", None) or [] if _label(p) == PROBE}
    late = [p.phase for p in phases if p.exceeded and p.phase not in probes]
    paras = [
        "The mock's own lateness: how much later than its model each first token was ready (its "
        "work before admission, timers a busy loop woke late), against the modelled TTFT; and the "
        f"CPU it spent on each prompt. Above {fmt(100 * LATE_SHARE)}% of a phase's modelled TTFT, "
        "that phase's TTFT is partly the machine running the mock, not the model."
    ]
    if late:
        paras.append(
            f"**WARNING: the mock was late by more than {fmt(100 * LATE_SHARE)}% of the modelled "
            f"TTFT in phase(s) {', '.join(late)}**: do not read those TTFTs (or their attribution) "
            "as the model's; run at a slower pace (a larger time_scale) or on a faster machine."
        )
    headers = ["phase", "requests", "modelled TTFT mean (ms)", "late mean (ms)", "late p99 (ms)"]
    headers += ["late / modelled", "mock CPU per prompt (ms)"]
    return Section("Mock lateness", paras, [Table(headers, rows)])
