"""The run directory's files: create it, append request rows durably, load it back.

Format documented in results/README.md. Rows are appended and flushed one at a
time so that a crash, a kill -9 or a failing server never loses a finished
request; at most the last line can be torn, and the loader skips it.
"""

from __future__ import annotations

import json
import os
import secrets
import warnings
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from kvbench.results.schema import Manifest
from kvbench.strict_json import dumps

if TYPE_CHECKING:
    import pandas as pd

MANIFEST = "manifest.json"
REQUESTS = "requests.jsonl"
PROMPTS = "prompts.jsonl"
METRICS = "metrics.jsonl"
METRIC_DELTAS = "metrics_deltas.json"
NOISE = "noise.jsonl"
SCENARIO = "scenario.yaml"


def utc_now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_run_dir(base: Path, scenario_name: str) -> tuple[str, Path]:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    run_id = f"{stamp}-{_slug(scenario_name)}-{secrets.token_hex(3)}"
    path = base / run_id
    path.mkdir(parents=True, exist_ok=False)
    return run_id, path


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in name)[:40] or "run"


class JsonlWriter:
    """Append-only JSON-lines file, flushed (and fsync'd on close) row by row."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: IO[str] | None = path.open("a", encoding="utf-8")
        self.rows = 0

    def write(self, row: dict[str, Any]) -> None:
        if self._fh is None:
            raise RuntimeError(f"{self.path} is closed")
        self._fh.write(dumps(row, compact=True) + "\n")
        self._fh.flush()
        self.rows += 1

    def close(self) -> None:
        if self._fh is not None:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()
            self._fh = None

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


@dataclass
class RunDir:
    """An open run directory; the runner holds one for the whole run.

    `manifest` is None until the runner has built the first one; every change replaces it
    (the model is frozen) and `save_manifest` rewrites manifest.json atomically."""

    path: Path
    run_id: str
    manifest: Manifest | None = None

    def __post_init__(self) -> None:
        self.requests = JsonlWriter(self.path / REQUESTS)

    def update(self, **changes: Any) -> Manifest:
        if self.manifest is None:
            raise RuntimeError("the manifest is not built yet")
        self.manifest = self.manifest.replace(**changes)
        return self.manifest

    def save_manifest(self) -> None:
        if self.manifest is not None:
            write_json_atomic(self.path / MANIFEST, self.manifest.to_json_dict())

    def writer(self, name: str) -> JsonlWriter:
        return JsonlWriter(self.path / name)

    def close(self) -> None:
        self.requests.close()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSONL file; a torn LAST line (killed writer) is skipped with a warning."""
    if not path.exists():
        return []
    rows: list[dict[str, Any]] = []
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if i == len(lines) - 1:
                warnings.warn(
                    f"{path.name}: skipped a torn last line (the run was killed mid-write)", stacklevel=2
                )
                break
            raise ValueError(f"{path}: line {i + 1} is not JSON: {exc}") from exc
    return rows


def read_manifest(run_dir: Path | str) -> dict[str, Any]:
    path = Path(run_dir) / MANIFEST
    if not path.exists():
        raise FileNotFoundError(f"{run_dir}: no {MANIFEST}; not a kvbench run directory")
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def load_manifest(run_dir: Path | str) -> Manifest:
    """manifest.json as the typed Manifest (runs written by earlier kvbench versions included)."""
    return Manifest.model_validate(read_manifest(run_dir))


def load_run(run_dir: Path | str) -> pd.DataFrame:
    """requests.jsonl as a DataFrame, one row per request (failed ones included)."""
    import pandas as pd

    rows = read_jsonl(Path(run_dir) / REQUESTS)
    return pd.DataFrame(rows)
