"""A dataset of LENGTHS requests as a replay's trace: written once in Mooncake's format, then
replayed by `kvbench run replay` like any trace (its salt, its schedule, replay.jsonl's expected reuse).

The file goes under OUTPUT_DIR/datasets/, named by the dataset's name and a digest of its bytes and
format, so the resolved scenario saved with the run names a file that is still there to replay.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from kvbench.datasets import open_dataset
from kvbench.errors import UsageError
from kvbench.traces.formats import mooncake


def replay_overrides(path: str, format: str, output_dir: Path, max_tokens: int) -> dict[str, Any]:
    """The scenario keys that make the replay read the dataset as its trace."""
    ds = open_dataset(path, format)
    text = next((r for r in ds.requests if r.kind == "text"), None)
    if text is not None:
        raise UsageError(
            f"{ds.path}:{text.line}: {ds.format.name}: a replay needs lengths or hash ids, and this "
            "request is text; send text datasets with `kvbench run throughput --dataset`"
        )
    digest = hashlib.sha256(ds.path.read_bytes() + ds.format.name.encode()).hexdigest()[:12]
    out = output_dir / "datasets" / f"{ds.path.name.split('.')[0]}-{ds.format.name}-{digest}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    last = 0.0
    with out.open("w", encoding="utf-8") as fh:
        for r in ds.requests:
            # a request with no time of its own arrives with the one before it (arrival order kept)
            last = max(last, r.timestamp_ms if r.timestamp_ms is not None else last)
            written = mooncake.write(r.trace_row())
            written["timestamp"] = round(last, 3)
            written["output_length"] = r.output_tokens or max_tokens
            fh.write(json.dumps(written) + "\n")
    return {
        "test.trace.path": str(out.resolve()),
        "test.trace.format": "mooncake",
        "test.trace.block_tokens": ds.block_tokens,
    }
