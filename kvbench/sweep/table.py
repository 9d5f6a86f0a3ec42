"""The sweep's summary table beside sweep.json: CSV and Markdown always, Parquet with the parquet extra.
Rows come from kvbench.report.sweep.tables, so `kvbench report SWEEP_DIR` shows the same table."""

from __future__ import annotations

from pathlib import Path

from kvbench.redact import redact
from kvbench.report.sweep.tables import sweep_markdown, write_table_files
from kvbench.results.files import write_text_atomic
from kvbench.sweep.state import SweepState


def write_tables(sweep_dir: Path, state: SweepState) -> list[Path]:
    data = redact(state.model_dump(mode="json"))  # a stepped base_url's credentials, as in sweep.json
    written = write_table_files(sweep_dir, data)
    write_text_atomic(sweep_dir / "summary.md", sweep_markdown(data))
    return [*written, sweep_dir / "summary.md"]
