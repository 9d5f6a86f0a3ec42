"""A run's requests as one flat file (CSV or Parquet), for tools that do not read JSON lines."""

from __future__ import annotations

import json
from pathlib import Path

from kvbench.errors import UsageError
from kvbench.results.reading import load_run

FORMATS = ("csv", "parquet")


def export_requests(run_dir: Path, format: str = "csv", out: Path | None = None) -> tuple[int, Path]:
    """Write requests.jsonl as `format`; returns (rows, file). Bad input is a one-line UsageError."""
    if format not in FORMATS:
        raise UsageError(f"--format {format!r}: choose csv or parquet")
    df = load_run(run_dir)
    target = out or run_dir / f"requests.{format}"
    if format == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ModuleNotFoundError:
            raise UsageError("--format parquet needs pyarrow: pip install 'kvbench[parquet]'") from None
        df.to_parquet(target)
    else:
        # CSV has no lists: the per-token times travel as one JSON array per row
        df = df.assign(token_ns=df["token_ns"].map(json.dumps)) if "token_ns" in df else df
        df.to_csv(target, index=False)
    return len(df), target
