"""Per-engine cache control: how to reset a server's prefix cache, and which counters show hits.

Cold must be guaranteed, not hoped for. Two mechanisms, used together:
1. the per-run salt at the start of every prompt (kvbench.prompts): nothing an
   earlier run cached can match, on any server;
2. where the engine allows, a reset of its prefix cache, VERIFIED by a probe:
   send a probe prompt, reset, send it again; the second answer must report
   cached_tokens == 0 (or, when the server does not report cached tokens, a
   zero delta of its hit counter).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from kvbench.client.control import ControlClient as TargetHTTP
from kvbench.errors import KvbenchError


@dataclass(frozen=True)
class CacheAdapter:
    engine: str
    reset_method: str | None = None  # HTTP method of the reset call
    reset_path: str | None = None
    # counters whose delta counts prefix-cache HIT tokens, and QUERIED tokens
    hit_counters: tuple[str, ...] = ()
    query_counters: tuple[str, ...] = ()
    # counters broken down by where the prompt tokens came from (label -> meaning)
    source_counters: tuple[str, ...] = ()
    busy_statuses: tuple[int, ...] = ()  # a reset refused because the server is busy: retry
    extra_body: dict[str, Any] = field(default_factory=dict)

    @property
    def can_reset(self) -> bool:
        return self.reset_path is not None

    def reset_succeeded(self, status: int, body: Any) -> bool:
        if status >= 400:
            return False
        # newer vLLM answers 200 {"success": false} when it did NOT reset
        return not (isinstance(body, dict) and body.get("success") is False)


_VLLM_HITS = (
    "vllm:prefix_cache_hits_total",
    "vllm:prefix_cache_hits",
    "vllm:external_prefix_cache_hits_total",
)
_VLLM_QUERIES = ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries")

ADAPTERS: dict[str, CacheAdapter] = {
    "mock": CacheAdapter(
        "mock",
        "POST",
        "/reset_prefix_cache?include_persistent=true",  # cold means G4 on disk too
        hit_counters=("vllm:prefix_cache_hits_total",),
        query_counters=("vllm:prefix_cache_queries_total",),
        source_counters=("vllm:prompt_tokens_by_source_total", "kvbench_mock_tier_hit_tokens_total"),
    ),
    "vllm": CacheAdapter(
        "vllm",
        "POST",
        "/reset_prefix_cache",  # only with VLLM_SERVER_DEV_MODE=1
        hit_counters=_VLLM_HITS,
        query_counters=_VLLM_QUERIES,
        source_counters=("vllm:prompt_tokens_by_source_total", "vllm:prompt_tokens_by_source"),
    ),
    "sglang": CacheAdapter(
        "sglang",
        "POST",
        "/flush_cache",
        hit_counters=("sglang:cached_tokens_total",),
        query_counters=("sglang:prompt_tokens_total",),
        busy_statuses=(400,),
    ),
    "lmcache": CacheAdapter(
        "lmcache",
        "DELETE",
        "/cache/clear",
        hit_counters=("lmcache:num_hit_tokens_total", "lmcache:num_hit_tokens"),
        query_counters=("lmcache:num_requested_tokens_total", "lmcache:num_requested_tokens"),
    ),
    "dynamo": CacheAdapter(
        "dynamo",
        "POST",
        "/clear_kv_blocks",
        hit_counters=("kvbm_matched_tokens_total", "kvbm_matched_tokens"),
        source_counters=("kvbm_onboard_blocks_d2d", "kvbm_onboard_blocks_h2d", "kvbm_offload_blocks_d2h"),
    ),
    "llamacpp": CacheAdapter(
        "llamacpp",
        "POST",
        # erases one slot's KV (G1); every slot is erased. The RAM prompt cache (--cache-ram, G2)
        # has no HTTP reset: it only reloads a prompt sharing >= 25% of a cached one, which salted
        # prompts never do; serve with --cache-ram 0 for an erase that empties everything.
        "/slots/{slot}?action=erase",
        # llama-server --metrics (checked against the real server): prompt_tokens_cached_total sums
        # the per-request cached tokens; prompt_tokens_total counts only the tokens it COMPUTED, so
        # there is no queried-tokens counter (queried = cached + computed).
        hit_counters=("llamacpp:prompt_tokens_cached_total",),
        source_counters=("llamacpp:prompt_tokens_cached_total", "llamacpp:prompt_tokens_total"),
        extra_body={"cache_prompt": True},
    ),
    "generic": CacheAdapter("generic"),
}


async def detect_engine(http: TargetHTTP) -> str:
    """Guess the engine from /v1/models owned_by, /version and /metrics names."""
    try:
        status, body = await http.request("GET", "/v1/models")
        if status == 200 and isinstance(body, dict):
            owners = {str(m.get("owned_by", "")).lower() for m in body.get("data", []) if isinstance(m, dict)}
            for owner in owners:
                if "kvbench" in owner:
                    return "mock"
                if "vllm" in owner:
                    return "vllm"
                if "sglang" in owner:
                    return "sglang"
                if "llamacpp" in owner or "llama.cpp" in owner:
                    return "llamacpp"
                if "dynamo" in owner or "nvidia" in owner:
                    return "dynamo"
    except (aiohttp.ClientError, TimeoutError):
        pass
    try:
        status, text = await http.get_text("/metrics")
        if status == 200:
            for prefix, engine in (
                ("kvbench_mock_", "mock"),
                ("vllm:", "vllm"),
                ("sglang:", "sglang"),
                ("llamacpp:", "llamacpp"),
                ("lmcache:", "lmcache"),
                ("kvbm_", "dynamo"),
            ):
                if prefix in text:
                    return engine
    except (aiohttp.ClientError, TimeoutError):
        pass
    return "generic"


async def llamacpp_slots(http: TargetHTTP) -> list[int]:
    status, body = await http.request("GET", "/slots")
    if status == 200 and isinstance(body, list):
        return [int(s.get("id", i)) for i, s in enumerate(body) if isinstance(s, dict)]
    return [0]


async def reset_cache(adapter: CacheAdapter, http: TargetHTTP, attempts: int = 5) -> tuple[bool, str]:
    """Ask the server to drop its prefix cache. Returns (done, detail)."""
    if not adapter.can_reset or adapter.reset_path is None or adapter.reset_method is None:
        return False, f"engine '{adapter.engine}' has no cache-reset call"
    paths = [adapter.reset_path]
    if "{slot}" in adapter.reset_path:
        paths = [adapter.reset_path.format(slot=s) for s in await llamacpp_slots(http)]
    detail = ""
    for attempt in range(attempts):
        all_ok = True
        for path in paths:
            try:
                status, body = await http.request(adapter.reset_method, path)
            except (aiohttp.ClientError, TimeoutError) as exc:
                return False, f"{adapter.reset_method} {path}: {type(exc).__name__}"
            if not adapter.reset_succeeded(status, body):
                all_ok = False
                detail = f"{adapter.reset_method} {path} answered {status} {str(body)[:120]}"
                if status == 404:
                    hint = " (vLLM needs VLLM_SERVER_DEV_MODE=1)" if adapter.engine == "vllm" else ""
                    return False, detail + hint
        if all_ok:
            return True, "reset"
        await asyncio.sleep(0.5 * (attempt + 1))  # e.g. SGLang answers 400 while busy
    return False, detail


class ColdNotVerified(KvbenchError):
    pass
