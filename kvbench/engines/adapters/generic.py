"""Any other OpenAI-compatible server: no reset, no counters, cold by per-run salt only.

A run against it cannot verify a cold start, so `cache.verify: required` (the default) stops
unless `--allow-unverified-cold`, whether the engine was named or detected. Its fast-tier
eviction is the mock's call, for mock-compatible servers behind a gateway that hides the name.
"""

from __future__ import annotations

from typing import ClassVar

from kvbench.engines.adapters.base import EngineAdapter
from kvbench.engines.adapters.registry import register


@register
class GenericAdapter(EngineAdapter):
    name = "generic"
    description = "any other OpenAI-compatible server (no reset)"
    detect_order = 10_000  # never claims a server: it is what is left
    fast_tier_reset_path: ClassVar[str | None] = "/reset_prefix_cache?tiers=G1,G2"
