"""NVIDIA Dynamo: the frontend's POST /clear_kv_blocks, KVBM matched/onboard/offload counters."""

from __future__ import annotations

from kvbench.engines.adapters.base import EngineAdapter
from kvbench.engines.adapters.registry import register


@register
class DynamoAdapter(EngineAdapter):
    name = "dynamo"
    description = "NVIDIA Dynamo"
    reset_method = "POST"
    reset_path = "/clear_kv_blocks"
    hit_counters = ("kvbm_matched_tokens_total", "kvbm_matched_tokens")
    source_counters = ("kvbm_onboard_blocks_d2d", "kvbm_onboard_blocks_h2d", "kvbm_offload_blocks_d2h")
    metric_prefixes = ("kvbm_", "dynamo_")
    owned_by_words = ("dynamo", "nvidia")
    metric_words = ("kvbm_",)
    detect_order = 60
