"""Strict JSON out: every JSON file kvbench (and its benchmarks) write goes through dumps().

RFC 8259 has no NaN or Infinity; Python's json writes them by default, and `jq`, browsers and most
other parsers then refuse the whole file. A non-finite float means "no value" here (a statistic
over no samples, a ratio with a zero denominator), so it becomes `null`. The fast path is one
plain `json.dumps(..., allow_nan=False)`: only data that really holds a non-finite float is walked
and cleaned, so request rows written in a phase pay nothing for the check.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def to_strict(obj: Any) -> Any:
    """`obj` with every non-finite float replaced by None; numpy scalars, Paths, tuples, sets and
    pydantic models become their plain JSON equivalents."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k if isinstance(k, str) else str(k): to_strict(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [to_strict(v) for v in obj]
    if hasattr(obj, "model_dump"):
        return to_strict(obj.model_dump(mode="json"))
    if hasattr(obj, "item"):  # numpy scalars
        return to_strict(obj.item())
    return obj


def _default(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def dumps(obj: Any, *, indent: int | None = None, compact: bool = False, **kwargs: Any) -> str:
    """`json.dumps` that never writes NaN or Infinity (they become null); `compact` drops the spaces
    after separators (JSON lines)."""
    if compact:
        kwargs["separators"] = (",", ":")
    try:
        return json.dumps(obj, indent=indent, default=_default, allow_nan=False, **kwargs)
    except ValueError as exc:
        if "Out of range float" not in str(exc):  # a circular reference, say: not ours to clean
            raise
        return json.dumps(to_strict(obj), indent=indent, default=_default, allow_nan=False, **kwargs)
