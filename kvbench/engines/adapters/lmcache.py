"""LMCache (its own API server): DELETE /cache/clear, hit/requested token counters.

LMCache usually runs inside vLLM, whose /models and /metrics say vLLM: detection then picks vLLM,
and `--engine lmcache` chooses this adapter explicitly.
"""

from __future__ import annotations

from kvbench.engines.adapters.base import EngineAdapter
from kvbench.engines.adapters.registry import register


@register
class LmcacheAdapter(EngineAdapter):
    name = "lmcache"
    description = "LMCache"
    reset_method = "DELETE"
    reset_path = "/cache/clear"
    hit_counters = ("lmcache:num_hit_tokens_total", "lmcache:num_hit_tokens")
    query_counters = ("lmcache:num_requested_tokens_total", "lmcache:num_requested_tokens")
    metric_prefixes = ("lmcache:",)
    metric_words = ("lmcache:",)
    detect_order = 50
