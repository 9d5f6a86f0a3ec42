"""kvbench's own mock: vLLM's endpoints and counters, plus tier-aware resets."""

from __future__ import annotations

from typing import Any, ClassVar

from kvbench.engines.adapters.base import EngineAdapter, GaugeRef, TransferCounter
from kvbench.engines.adapters.registry import register


@register
class MockAdapter(EngineAdapter):
    name = "mock"
    description = "kvbench's tiered-cache mock"
    reset_method = "POST"
    reset_path = "/reset_prefix_cache?include_persistent=true"  # cold means G4 on disk too
    hit_counters = ("vllm:prefix_cache_hits_total",)
    query_counters = ("vllm:prefix_cache_queries_total",)
    source_counters = ("vllm:prompt_tokens_by_source_total", "kvbench_mock_tier_hit_tokens_total")
    tier_counter = ("kvbench_mock_tier_hit_tokens_total", "tier")
    metric_prefixes = ("vllm:", "kvbench_mock_")
    owned_by_words = ("kvbench",)
    # before vLLM: the mock's /metrics carries vllm: names too
    metric_words = ("kvbench_mock_",)
    detect_order = 10
    fast_tier_reset_path: ClassVar[str | None] = "/reset_prefix_cache?tiers=G1,G2"
    # kvbench/mock/metrics.py: modelled KV bytes read from each lower tier (no offload counter: the
    # mock models what a read costs, not the stores), its queue and the bytes G1 holds
    transfer_counters: ClassVar[tuple[TransferCounter, ...]] = (
        TransferCounter(
            "kvbench_mock_onboard_bytes_total", "onboard", tier_label="tier", source="kvbench/mock/metrics.py"
        ),
    )
    queue_gauges: ClassVar[tuple[GaugeRef, ...]] = (
        GaugeRef("vllm:num_requests_waiting", "requests", source="kvbench/mock/metrics.py"),
    )
    offload_off_how = "the embedded mock with G1 on and G2-G4 off (kvbench.mock.config.offload_off_overrides)"
    kv_usage_gauges: ClassVar[tuple[GaugeRef, ...]] = (
        GaugeRef("kvbench_mock_tier_used_bytes", "bytes", (("tier", "G1"),), "kvbench/mock/metrics.py"),
    )

    def offload_off_overrides(self) -> dict[str, Any] | None:
        """The mock's own answer (G1 on, G2-G4 not caching): its profile handling owns the tiers."""
        from kvbench.mock.config import offload_off_overrides

        return dict(offload_off_overrides())
