"""Model-based bounds, one module per kind, in one registry keyed by `Bound.kind`.

    cold_reuse           best throughput speedup of an empty cache over recomputation
    prefill_scaling      is an uncached TTFT pair plausible for prefill between n and n^2?
    serial_prefill       is a recompute run's total reachable on its GPUs?
    bandwidth_headroom   do competing traffic and the run's own reads exceed a bandwidth?

A new kind is one module defining `KIND` plus a line here.
"""

from __future__ import annotations

from kvbench.audit.bounds import bandwidth_headroom, cold_reuse, prefill_scaling, serial_prefill
from kvbench.audit.bounds.base import BoundKind, Context

BOUND_KINDS: dict[str, BoundKind] = {
    m.KIND.name: m.KIND for m in (cold_reuse, prefill_scaling, serial_prefill, bandwidth_headroom)
}

__all__ = ["BOUND_KINDS", "BoundKind", "Context"]
