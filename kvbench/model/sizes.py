"""Byte sizes as people write them: '80GB', '1.5TiB', '825 GiB'. One reader for every command that
takes a capacity (sizing, the audit's bounds, trace analysis)."""

from __future__ import annotations

import math
import re

from kvbench.errors import UsageError

_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")
_UNITS = {
    "": 1.0,
    "b": 1.0,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
    "tb": 1e12,
    "pb": 1e15,
    "kib": 2.0**10,
    "mib": 2.0**20,
    "gib": 2.0**30,
    "tib": 2.0**40,
    "pib": 2.0**50,
}


def parse_size(text: str, where: str = "capacity") -> float:
    """'80GB' -> 8e10, '1.5TiB' -> 1.5 * 2**40 bytes; a one-line UsageError naming `where`."""
    m = _SIZE.match(text)
    if not m or m.group(2).lower() not in _UNITS:
        raise UsageError(f"{where}: cannot read size {text!r} (e.g. 80GB, 1.5TiB)")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"{where}: size {text!r} must be finite and >= 0")
    return value
