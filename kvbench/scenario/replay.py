"""The replay test's trace source: which file, in which format, which part of it, how fast.

    test: {kind: replay, trace: {path: traces/ci.jsonl, speedup: 2}, schedule: fixed}

A relative `path` is looked up as given (from the working directory), then in ./scenarios and
in the package's scenarios (where the shipped traces live, under traces/), the way a scenario
name is; the file itself is read only when the run starts (kvbench.traces.open_trace streams it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from kvbench.scenario.sections import Strict, flag

# the shipped scenarios folder (scenario.loading names it too; that module sits above this one)
_PACKAGE_SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def trace_search_path() -> list[Path]:
    return [Path.cwd(), Path.cwd() / "scenarios", _PACKAGE_SCENARIOS]


def resolve_trace_path(path: str) -> Path | None:
    """The trace file `path` names (as given, else under ./scenarios, else the package's), or None."""
    p = Path(path).expanduser()
    if p.is_absolute():
        return p if p.is_file() else None
    for base in trace_search_path():
        if (base / p).is_file():
            return base / p
    return None


class TraceSource(Strict):
    path: str = Field(
        ...,
        min_length=1,
        description="The trace file (.jsonl or .jsonl.gz): a path, or one relative to ./scenarios or "
        "the package's scenarios (the shipped traces are traces/*.jsonl).",
        json_schema_extra=flag("trace"),
    )
    format: Literal["auto", "mooncake", "bailian", "weka"] = Field(
        "auto", description="Row format; auto = detected from the first rows."
    )
    block_tokens: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="Tokens per hash id; absent: the format's own (mooncake 512, bailian 16, weka 64).",
    )
    speedup: float = Field(
        1.0, gt=0, le=1_000_000, description="schedule fixed: the trace's time runs this many times faster."
    )
    start_ms: float = Field(0.0, ge=0, description="Skip rows whose timestamp is before this (trace ms).")
    window_ms: float | None = Field(
        None, gt=0, description="Replay only rows within this long after start_ms (trace ms); absent: all."
    )
    limit: int | None = Field(None, gt=0, le=100_000_000, description="Replay at most this many rows.")
    over_context: Literal["fail", "skip", "clip"] = Field(
        "fail",
        description="A row longer than the model's context (with its answer): fail (refuse the replay, "
        "naming the row), skip it, or clip its prompt to fit; skipped and clipped rows are counted.",
    )

    @field_validator("path")
    @classmethod
    def _exists(cls, v: str) -> str:
        if resolve_trace_path(v) is None:
            where = ", ".join(str(b) for b in trace_search_path())
            raise ValueError(f"no trace file {v!r} (looked in {where})")
        return v

    def resolved(self) -> Path:
        found = resolve_trace_path(self.path)
        assert found is not None, self.path  # checked at validation
        return found

    def selects(self, timestamp_ms: float) -> bool:
        """The row at this timestamp lies in [start_ms, start_ms + window_ms)."""
        if timestamp_ms < self.start_ms:
            return False
        return self.window_ms is None or timestamp_ms < self.start_ms + self.window_ms
