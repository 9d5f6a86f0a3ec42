"""The sweep's summary table beside sweep.json: CSV, Parquet when pyarrow is there, Markdown.
Rows come from kvbench.report.sweep, so `kvbench report SWEEP_DIR` shows the same table."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from kvbench.report.sweep import summary_rows, sweep_markdown
from kvbench.results.files import write_text_atomic
from kvbench.sweep.state import SweepState


def write_tables(sweep_dir: Path, state: SweepState) -> list[Path]:
    import pandas as pd

    data = state.model_dump(mode="json")
    df = pd.DataFrame(summary_rows(data))
    written = [sweep_dir / "summary.csv"]
    write_text_atomic(written[0], df.to_csv(index=False))
    if importlib.util.find_spec("pyarrow") is not None and len(df):
        df.to_parquet(sweep_dir / "summary.parquet", index=False)
        written.append(sweep_dir / "summary.parquet")
    write_text_atomic(sweep_dir / "summary.md", sweep_markdown(data))
    written.append(sweep_dir / "summary.md")
    return written
