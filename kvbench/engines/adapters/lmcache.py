"""LMCache (its own API server): DELETE /cache/clear, hit/requested token counters.

LMCache usually runs inside vLLM, whose /models and /metrics say vLLM: detection then picks vLLM,
and `--engine lmcache` chooses this adapter explicitly.
"""

from __future__ import annotations

from typing import ClassVar

from kvbench.engines.adapters.base import EngineAdapter, GaugeRef, TransferCounter
from kvbench.engines.adapters.registry import register


@register
class LmcacheAdapter(EngineAdapter):
    name = "lmcache"
    offload_off_how = (
        "vLLM + LMCache with LMCACHE_LOCAL_CPU=False and no LMCACHE_LOCAL_DISK (GPU prefix cache on)"
    )
    description = "LMCache"
    reset_method = "DELETE"
    reset_path = "/cache/clear"
    hit_counters = ("lmcache:num_hit_tokens_total", "lmcache:num_hit_tokens")
    query_counters = ("lmcache:num_requested_tokens_total", "lmcache:num_requested_tokens")
    metric_prefixes = ("lmcache:",)
    metric_words = ("lmcache:",)
    detect_order = 50
    # lmcache/observability.py (PrometheusLogger): tokens found in LMCache (read back into the GPU),
    # in tokens: the report multiplies by the KV bytes per token when the geometry is known;
    # local_cache_usage in bytes
    transfer_counters: ClassVar[tuple[TransferCounter, ...]] = (
        TransferCounter(
            "lmcache:num_hit_tokens_total",
            "onboard",
            "LMCache",
            "tokens",
            source="lmcache/observability.py (PrometheusLogger)",
        ),
    )
    kv_usage_gauges: ClassVar[tuple[GaugeRef, ...]] = (
        GaugeRef("lmcache:local_cache_usage", "bytes", source="lmcache/observability.py (PrometheusLogger)"),
    )
