"""SGLang: POST /flush_cache (refused with 400 while requests run), cached/prompt token counters."""

from __future__ import annotations

from typing import ClassVar

from kvbench.engines.adapters.base import EngineAdapter, GaugeRef
from kvbench.engines.adapters.registry import register


@register
class SglangAdapter(EngineAdapter):
    name = "sglang"
    offload_off_how = "sglang without --enable-hierarchical-cache (RadixAttention's GPU cache stays on)"
    description = "SGLang"
    reset_method = "POST"
    reset_path = "/flush_cache"
    busy_statuses = (400,)
    hit_counters = ("sglang:cached_tokens_total",)
    query_counters = ("sglang:prompt_tokens_total",)
    metric_prefixes = ("sglang:",)
    owned_by_words = ("sglang",)
    metric_words = ("sglang:",)
    detect_order = 30
    # python/sglang/srt/metrics/collector.py: requests queued, share of the KV pool in use (a fraction)
    queue_gauges: ClassVar[tuple[GaugeRef, ...]] = (
        GaugeRef("sglang:num_queue_reqs", "requests", source="python/sglang/srt/metrics/collector.py"),
    )
    kv_usage_gauges: ClassVar[tuple[GaugeRef, ...]] = (
        GaugeRef("sglang:token_usage", "fraction", source="python/sglang/srt/metrics/collector.py"),
    )
