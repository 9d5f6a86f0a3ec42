"""The run directory: its files (files.py), its contract as types (schema.py) and the one way
to read a manifest of any version (reading.py).

Public API, as results/README.md documents it: `load_run` (requests as a DataFrame),
`load_manifest` (manifest.json as today's typed Manifest, any version), `load_record` (the same
with what reading it took: version, migration notes, unknown fields), `read_manifest` (the
dict exactly as written), `RunDir` and `JsonlWriter` (writing), `read_jsonl`.
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
    new_run_dir,
    read_jsonl,
    read_manifest,
    utc_now_iso,
    write_json_atomic,
)
from kvbench.results.reading import RunRecord, load_manifest, load_record, load_run
from kvbench.results.schema import MANIFEST_VERSION, Label, Manifest

__all__ = [
    "MANIFEST",
    "MANIFEST_VERSION",
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
    "RunRecord",
    "load_manifest",
    "load_record",
    "load_run",
    "new_run_dir",
    "read_jsonl",
    "read_manifest",
    "utc_now_iso",
    "write_json_atomic",
]
