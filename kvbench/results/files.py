"""The run directory's files: create it, append request rows durably (reading it back: reading.py).

Format documented in results/README.md. Rows are appended and flushed one at a
time so that a crash, a kill -9 or a failing server never loses a finished
request; at most the last line can be torn, and the loader skips it.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import secrets
import warnings
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from kvbench.errors import KvbenchError
from kvbench.redact import redact
from kvbench.results.schema import Manifest
from kvbench.strict_json import dumps

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


class WriteFailed(KvbenchError):
    """A run-directory file could not be written (a full or read-only disk, a lost mount): one line
    naming the file, exit 1. Every file is left valid: rows are cut back to the last whole one, and
    JSON and YAML files are replaced only by a complete new copy."""

    def __init__(self, path: Path, exc: OSError) -> None:
        self.path = path
        self.errno = exc.errno
        super().__init__(f"cannot write {path}: {exc.strerror or type(exc).__name__}")

    @property
    def disk(self) -> bool:
        """The disk's fault (full, read-only, over quota, failing), not a bug of kvbench's."""
        return self.errno in DISK_ERRNOS


DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EIO, errno.EFBIG})


class JsonlWriter:
    """Append-only JSON-lines file: each row reaches the kernel whole before write() returns (fsync'd
    on close); a row the disk refuses is cut off again, so the file always ends at a whole row."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._fh: IO[bytes] | None = path.open("ab", buffering=0)
        except OSError as exc:
            raise WriteFailed(path, exc) from None
        self._end = self._fh.tell()  # bytes of whole rows
        self.failed: WriteFailed | None = None
        self.rows = 0

    def write(self, row: dict[str, Any]) -> None:
        if self._fh is None:
            raise RuntimeError(f"{self.path} is closed")
        if self.failed is not None:  # the disk refused a row already: the run is ending
            raise self.failed
        data = (dumps(row, compact=True) + "\n").encode("utf-8")
        try:
            view = memoryview(data)
            while view:
                view = view[self._fh.write(view) or 0 :]
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fh.fileno(), self._end)  # no torn row left behind
            self.failed = WriteFailed(self.path, exc)
            raise self.failed from None
        self._end += len(data)
        self.rows += 1

    def close(self) -> None:
        if self._fh is not None:
            with contextlib.suppress(OSError):  # the rows are with the kernel already
                os.fsync(self._fh.fileno())
            self._fh.close()
            self._fh = None

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then rename it over `path`: a reader sees the
    old copy or the new one, never a part (a full disk fails the write, not the file)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """`write_text_atomic` for bytes (pictures, Parquet)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        with tmp.open("wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise WriteFailed(path, exc) from None


def save_figure_atomic(fig: Any, path: Path, **savefig_kw: Any) -> Path:
    """A matplotlib figure rendered in memory, then written like any other file: a full disk never
    leaves a truncated picture under the final name."""
    buf = io.BytesIO()
    fig.savefig(buf, format=path.suffix.lstrip(".") or "png", **savefig_kw)
    write_bytes_atomic(path, buf.getvalue())
    return path


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, dumps(data, indent=2) + "\n")


# Space set aside when a run directory is opened and given back when the run ends, so that a disk
# the rows filled still takes the final manifest and metrics_deltas.json (the run says it failed).
RESERVE = ".kvbench-reserve"
RESERVE_BYTES = 256 * 1024


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
        self._reserve()

    def _reserve(self) -> None:
        path = self.path / RESERVE
        try:
            with path.open("wb") as fh:
                try:
                    os.posix_fallocate(fh.fileno(), 0, RESERVE_BYTES)
                except (AttributeError, OSError):  # no fallocate here: real bytes do the same
                    fh.write(bytes(RESERVE_BYTES))
        except OSError as exc:
            with contextlib.suppress(OSError):
                path.unlink()
            raise WriteFailed(path, exc) from None

    def release_reserve(self) -> None:
        with contextlib.suppress(OSError):
            (self.path / RESERVE).unlink()

    def update(self, **changes: Any) -> Manifest:
        if self.manifest is None:
            raise RuntimeError("the manifest is not built yet")
        self.manifest = self.manifest.replace(**changes)
        return self.manifest

    def save_manifest(self) -> None:
        if self.manifest is not None:
            write_json_atomic(self.path / MANIFEST, redact(self.manifest.to_json_dict()))

    def writer(self, name: str) -> JsonlWriter:
        return JsonlWriter(self.path / name)

    def close(self) -> None:
        self.requests.close()
        self.release_reserve()


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
    """manifest.json exactly as written (a dict); readers take `reading.load_record`, the typed one."""
    path = Path(run_dir) / MANIFEST
    if not path.exists():
        raise FileNotFoundError(f"{run_dir}: no {MANIFEST}; not a kvbench run directory")
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data
