"""What each bound kind reads: its figure fields, the dimension each must have, its own rules.

Data the claims-file model (`schema.py`) and the checks (`checks.py`) need about the bound
kinds, kept below both so that neither imports `bounds/` (whose modules compute on figures
and so sit above them). `bounds/<kind>.py` adds the computation; a new kind is one entry
here and one module there.

A field's dimension: "count" (any one counted thing, or a plain number), "tokens" (tokens or
a plain number), "time", "bytes", "rate" (something per time; the noise, demand and capacity
figures must also share one dimension, checked when computing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvbench.audit.units import Dims

_WHAT = {
    "count": 'a count (requests, prompts, GPUs ... or "1")',
    "tokens": "tokens",
    "time": "a time (s, ms ...)",
    "bytes": "bytes (B, GB, GiB ...)",
    "rate": "a rate (per s)",
}
_NOT_COUNTS = {"time", "bytes"}


def dims_fit(kind: str, dims: Dims) -> bool:
    """Whether a figure of dimension `dims` can stand in a field of `kind`."""
    if kind == "count":
        return not dims or (len(dims) == 1 and dims[0][1] == 1 and dims[0][0] not in _NOT_COUNTS)
    if kind == "tokens":
        return dims in ((), (("tokens", 1),))
    if kind == "time":
        return dims == (("time", 1),)
    if kind == "bytes":
        return dims == (("bytes", 1),)
    return dict(dims).get("time") == -1  # rate


def wanted(kind: str) -> str:
    return _WHAT[kind]


def _no_rules(b: Any, sizing_ids: set[str]) -> list[str]:
    return []


@dataclass(frozen=True)
class BoundFields:
    """A bound kind's figure fields: required and optional, each with the dimension it needs."""

    name: str
    required: dict[str, str]
    optional: dict[str, str] = field(default_factory=dict)
    rules: Callable[[Any, set[str]], list[str]] = _no_rules  # (bound, sizing ids) -> 'path: message'


def _cold_reuse_rules(b: Any, sizing_ids: set[str]) -> list[str]:
    return [": give `claim` or `stated`"] if b.claim is None and b.stated is None else []


def _headroom_rules(b: Any, sizing_ids: set[str]) -> list[str]:
    problems = []
    if not b.capacities:
        problems.append(f".capacities: required for kind {b.kind}")
    if not b.demand and b.sizing is None:
        problems.append(": give `demand` or `sizing` (the run's own transfer rate)")
    if b.sizing is not None:
        if b.sizing not in sizing_ids:
            problems.append(f".sizing: unknown sizing check '{b.sizing}'")
        if b.duration is None:
            problems.append(".duration: required with `sizing`")
    if (b.rate_before is None) != (b.rate_after is None):
        problems.append(": give both `rate_before` and `rate_after`, or neither")
    return problems


_TTFT = {"short_tokens": "tokens", "short_time": "time", "long_tokens": "tokens", "long_time": "time"}

BOUND_FIELDS: dict[str, BoundFields] = {
    k.name: k
    for k in (
        BoundFields("cold_reuse", {"requests": "count", "prompts": "count"}, rules=_cold_reuse_rules),
        BoundFields("prefill_scaling", dict(_TTFT)),
        BoundFields(
            "serial_prefill",
            {**_TTFT, "tokens": "tokens", "requests": "count", "total": "time"},
            {"prompts": "count", "gpus": "count", "gpus_available": "count", "cold_total": "time"},
        ),
        BoundFields(
            "bandwidth_headroom",
            {"noise": "rate"},
            {"noise_sources": "count", "duration": "time", "rate_before": "rate", "rate_after": "rate"},
            rules=_headroom_rules,
        ),
    )
}

#: the sizing check's fields and their dimensions
SIZING_FIELDS = {"tokens": "tokens", "bytes": "bytes", "requests": "count", "prompts": "count"}
