"""The "Offload verdict" section of an arm's report, from its summary (report.verdict.of_run found it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvbench.report.core.formats import Section, Table
from kvbench.report.verdict.table import HEAD, verdict_cells

if TYPE_CHECKING:
    from kvbench.report.summary import RunSummary


def verdict_section(summary: RunSummary) -> Section | None:
    """An arm's report: the verdict from its summary (summary.verdict, summary.verdict_note)."""
    if not summary.verdict and summary.verdict_note is None:
        return None
    rows = verdict_cells([r.model_dump() for r in summary.verdict])
    paras = [summary.verdict_note] if summary.verdict_note else []
    return Section("Offload verdict", paras, [Table(HEAD, rows)] if rows else [])
