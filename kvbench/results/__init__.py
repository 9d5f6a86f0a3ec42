"""The run directory: its files (files.py) and its contract as types (schema.py).

Public API, as results/README.md documents it: `load_run` (requests as a DataFrame),
`read_manifest` (manifest.json as a dict), `load_manifest` (the same, typed),
`RunDir` and `JsonlWriter` (writing), `read_jsonl`.
"""

from kvbench.results.files import (
    MANIFEST,
    METRIC_DELTAS,
    METRICS,
    NOISE,
    PROMPTS,
    REQUESTS,
    SCENARIO,
    JsonlWriter,
    RunDir,
    load_manifest,
    load_run,
    new_run_dir,
    read_jsonl,
    read_manifest,
    utc_now_iso,
    write_json_atomic,
)
from kvbench.results.schema import Label, Manifest

__all__ = [
    "MANIFEST",
    "METRICS",
    "METRIC_DELTAS",
    "NOISE",
    "PROMPTS",
    "REQUESTS",
    "SCENARIO",
    "JsonlWriter",
    "Label",
    "Manifest",
    "RunDir",
    "load_manifest",
    "load_run",
    "new_run_dir",
    "read_jsonl",
    "read_manifest",
    "utc_now_iso",
    "write_json_atomic",
]
