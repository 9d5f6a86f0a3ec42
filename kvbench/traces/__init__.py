"""Traces: read (formats/, reader), analyse (analyze, lru, reuse), synthesise (synth) offline.

Nothing here imports run/, client/ or load/: `kvbench trace analyze` and `trace synth` work on a
machine with no server. The replay test type (run/) and prompt realisation build on `open_trace`.
"""

from kvbench.traces.reader import FORMATS, TraceFile, open_trace
from kvbench.traces.rows import TraceRow

__all__ = ["FORMATS", "TraceFile", "TraceRow", "open_trace"]
