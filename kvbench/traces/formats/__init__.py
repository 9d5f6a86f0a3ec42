"""The trace format registry: one module per format, each exporting FORMAT.

Order matters for `auto`: a Bailian row also has Mooncake's keys, so Bailian is tried first.
"""

from __future__ import annotations

from kvbench.traces.formats import bailian, mooncake, weka
from kvbench.traces.formats.base import SessionState, TraceFormat

FORMATS: dict[str, TraceFormat] = {f.name: f for f in (bailian.FORMAT, weka.FORMAT, mooncake.FORMAT)}

__all__ = ["FORMATS", "SessionState", "TraceFormat"]
