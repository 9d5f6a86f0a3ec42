"""vLLM: prefix-cache reset in dev mode, prefix-cache and by-source counters."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import ClassVar

from kvbench.engines.adapters.base import EngineAdapter, GaugeRef, TierCapacity, TransferCounter
from kvbench.engines.adapters.registry import register

CACHE_INFO = "vllm:cache_config_info"
OFFLOAD_METRICS = "vllm/distributed/kv_transfer/kv_connector/v1/offloading/metrics.py (OffloadingConnector)"
TIERING_METRICS = "vllm/v1/kv_offload/tiering/base.py (TieringOffloadingMetrics), labels in tiering/spec.py"


@register
class VllmAdapter(EngineAdapter):
    name = "vllm"
    offload_off_how = (
        "vllm serve without --kv-transfer-config / --kv-offloading-backend (the GPU prefix cache stays on)"
    )
    description = "vLLM (reset needs VLLM_SERVER_DEV_MODE=1)"
    reset_method = "POST"
    reset_path = "/reset_prefix_cache"  # only with VLLM_SERVER_DEV_MODE=1; 200 {"success": false} = not done
    reset_hint = " (vLLM needs VLLM_SERVER_DEV_MODE=1)"
    hit_counters = (
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_hits",
        "vllm:external_prefix_cache_hits_total",
    )
    query_counters = ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries")
    source_counters = ("vllm:prompt_tokens_by_source_total", "vllm:prompt_tokens_by_source")
    tier_counter = ("vllm:prompt_tokens_by_source_total", "source")  # local_cache_hit, external_kv_transfer
    # vLLM v1's per-request histograms (seconds, summed): its prefill time includes loading a KV
    # connector's blocks (onboarding), which it does not time apart
    time_counters: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "queue": ("vllm:request_queue_time_seconds_sum",),
        "prefill": ("vllm:request_prefill_time_seconds_sum",),
        "decode": ("vllm:request_decode_time_seconds_sum",),
    }
    metric_prefixes = ("vllm:",)
    owned_by_words = ("vllm",)
    metric_words = ("vllm:",)
    detect_order = 20
    # vLLM ignores `tiers` and drops its own (GPU) prefix cache; a KV connector's lower tiers stay
    fast_tier_reset_path: ClassVar[str | None] = "/reset_prefix_cache?tiers=G1,G2"
    # the OffloadingConnector's bytes per direction (OFFLOAD_METRICS: vllm:kv_offload_total_bytes,
    # label transfer_type CPU_to_GPU / GPU_to_CPU); queue and KV usage from vllm/v1/metrics/loggers.py
    # (kv_cache_usage_perc is a fraction, gpu_cache_usage_perc its name before v1)
    # vLLM 0.32 (read in its installed source): the flat vllm:kv_offload_load_bytes / _store_bytes
    # (OFFLOAD_METRICS _TransferMetricName), already bytes; the CPU spec still counts the same bytes
    # in the deprecated transfer_type one, so that one is left out where the flat one is present. The
    # tiering manager's secondary tiers: read (onboard) / write (offload) bytes, label tier="1:fs".
    # Every one appears only with --kv-transfer-config naming the OffloadingConnector (or
    # --kv-offloading-size); vLLM's CPU build refuses both ("CPU Offloading is currently only supported
    # on CUDA-alike and XPU GPUs", checked on 0.32), so only a GPU server shows them.
    transfer_counters: ClassVar[tuple[TransferCounter, ...]] = (
        TransferCounter("vllm:kv_offload_load_bytes_total", "onboard", "G2", source=OFFLOAD_METRICS),
        TransferCounter("vllm:kv_offload_store_bytes_total", "offload", "G2", source=OFFLOAD_METRICS),
        TransferCounter(
            "vllm:kv_offload_total_bytes_total",
            "onboard",
            "G2",
            match=(("transfer_type", "CPU_to_GPU"),),
            source=OFFLOAD_METRICS,
            superseded_by="vllm:kv_offload_load_bytes_total",
        ),
        TransferCounter(
            "vllm:kv_offload_total_bytes_total",
            "offload",
            "G2",
            match=(("transfer_type", "GPU_to_CPU"),),
            source=OFFLOAD_METRICS,
            superseded_by="vllm:kv_offload_store_bytes_total",
        ),
        TransferCounter(
            "vllm:kv_offload_tiering_read_bytes_total", "onboard", tier_label="tier", source=TIERING_METRICS
        ),
        TransferCounter(
            "vllm:kv_offload_tiering_write_bytes_total", "offload", tier_label="tier", source=TIERING_METRICS
        ),
    )
    queue_gauges: ClassVar[tuple[GaugeRef, ...]] = (
        GaugeRef("vllm:num_requests_waiting", "requests", source="vllm/v1/metrics/loggers.py"),
    )
    kv_usage_gauges: ClassVar[tuple[GaugeRef, ...]] = (
        GaugeRef("vllm:kv_cache_usage_perc", "fraction", source="vllm/v1/metrics/loggers.py"),
        GaugeRef("vllm:gpu_cache_usage_perc", "fraction", source="vllm/v1/metrics/loggers.py (before v1)"),
    )
    # vllm/v1/metrics/loggers.py log_metrics_info: a gauge of 1 whose labels are CacheConfig's
    # fields (vllm/config/cache.py metrics_info), num_gpu_blocks and block_size among them
    capacity_paths = ("/metrics",)
    # vllm/v1/metrics/stats.py: prompt tokens by source; an external transfer is a KV connector's tier
    tier_of_source: ClassVar[Mapping[str, str]] = {"local_cache_hit": "G1", "external_kv_transfer": "G2"}

    def tier_capacities(self, answers: Mapping[str, str]) -> list[TierCapacity]:
        """G1 from cache_config_info: num_gpu_blocks x block_size tokens, less the one null block
        vllm/v1/core/block_pool.py holds back (it never caches a prompt)."""
        for line in (answers.get("/metrics") or "").splitlines():
            if not line.startswith(CACHE_INFO + "{"):
                continue
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            blocks, size = labels.get("num_gpu_blocks", ""), labels.get("block_size", "")
            if blocks.isdigit() and size.isdigit() and int(blocks) > 1:
                source = f"adapter: vllm cache_config_info (num_gpu_blocks={blocks} x block_size={size})"
                tokens = (int(blocks) - 1) * int(size)
                return [TierCapacity("G1", tokens, block_tokens=int(size), source=source)]
        return []
