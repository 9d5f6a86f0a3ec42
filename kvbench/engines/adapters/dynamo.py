"""NVIDIA Dynamo: the frontend's POST /clear_kv_blocks, KVBM matched/onboard/offload counters."""

from __future__ import annotations

from typing import ClassVar

from kvbench.engines.adapters.base import EngineAdapter, TransferCounter
from kvbench.engines.adapters.registry import register

KVBM_NAMES = (
    "dynamo: lib/runtime/src/metrics/prometheus_names.rs (mod kvbm), counted in lib/llm/src/block_manager"
)


@register
class DynamoAdapter(EngineAdapter):
    name = "dynamo"
    offload_off_how = (
        "the Dynamo worker without KVBM (DYN_KVBM_CPU_CACHE_GB / DISK unset; GPU prefix cache on)"
    )
    description = "NVIDIA Dynamo"
    reset_method = "POST"
    reset_path = "/clear_kv_blocks"
    hit_counters = ("kvbm_matched_tokens_total", "kvbm_matched_tokens")
    source_counters = ("kvbm_onboard_blocks_d2d", "kvbm_onboard_blocks_h2d", "kvbm_offload_blocks_d2h")
    metric_prefixes = ("kvbm_", "dynamo_")
    owned_by_words = ("dynamo", "nvidia")
    metric_words = ("kvbm_",)
    detect_order = 60
    # KVBM counts BLOCKS moved per path (KVBM_NAMES: kvbm_ + offload_blocks_d2h, offload_blocks_h2d
    # (host to disk), offload_blocks_d2d (device to disk), onboard_blocks_h2d, onboard_blocks_d2d
    # (disk to device)); the report multiplies by the block's bytes when it knows them
    transfer_counters: ClassVar[tuple[TransferCounter, ...]] = (
        TransferCounter(
            "kvbm_onboard_blocks_h2d",
            "onboard",
            "G2",
            "blocks",
            source=KVBM_NAMES,
        ),
        TransferCounter(
            "kvbm_onboard_blocks_d2d",
            "onboard",
            "G3",
            "blocks",
            source=KVBM_NAMES,
        ),
        TransferCounter(
            "kvbm_offload_blocks_d2h",
            "offload",
            "G2",
            "blocks",
            source=KVBM_NAMES,
        ),
        TransferCounter(
            "kvbm_offload_blocks_h2d",
            "offload",
            "G3",
            "blocks",
            source=KVBM_NAMES,
        ),
        TransferCounter(
            "kvbm_offload_blocks_d2d",
            "offload",
            "G3",
            "blocks",
            source=KVBM_NAMES,
        ),
    )
