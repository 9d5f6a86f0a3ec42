"""The mock's /metrics: vLLM's counter names plus kvbench_mock_* ones, on a registry per server.

Source of prompt tokens (``vllm:prompt_tokens_by_source_total{source}``):
``local_cache_hit`` = G1 and G2 hits (memory of the inference node, as vLLM's own prefix
cache and CPU offload), ``external_kv_transfer`` = G3 and G4 hits (brought in by the KV
connector, as Dynamo KVBM / LMCache), ``local_compute`` = tokens prefilled.
``vllm:prefix_cache_hits_total`` counts every cached token (all tiers), in tokens, like vLLM;
``vllm:external_prefix_cache_{queries,hits}_total`` count what was asked of / found in G3+G4.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from kvbench.mock.config import TIER_NAMES

SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")


class MockMetrics:
    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        r = self.registry = CollectorRegistry(auto_describe=True)
        m = ["model_name"]
        self.prefix_queries = Counter("vllm:prefix_cache_queries", "Prompt tokens looked up.", m, registry=r)
        self.prefix_hits = Counter("vllm:prefix_cache_hits", "Prompt tokens found in cache.", m, registry=r)
        self.ext_queries = Counter(
            "vllm:external_prefix_cache_queries", "Tokens looked up in G3/G4.", m, registry=r
        )
        self.ext_hits = Counter("vllm:external_prefix_cache_hits", "Tokens found in G3/G4.", m, registry=r)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prompt tokens processed.", m, registry=r)
        self.generation_tokens = Counter("vllm:generation_tokens", "Tokens generated.", m, registry=r)
        self.by_source = Counter(
            "vllm:prompt_tokens_by_source", "Prompt tokens by source.", [*m, "source"], registry=r
        )
        self.request_success = Counter(
            "vllm:request_success", "Requests finished.", [*m, "finished_reason"], registry=r
        )
        self.running = Gauge("vllm:num_requests_running", "Requests admitted.", m, registry=r)
        self.waiting = Gauge("vllm:num_requests_waiting", "Requests queued.", m, registry=r)
        self.tier_hits = Counter(
            "kvbench_mock_tier_hit_tokens", "Cached prompt tokens by tier.", [*m, "tier"], registry=r
        )
        self.onboard_bytes = Counter(
            "kvbench_mock_onboard_bytes", "Modelled KV bytes read from a tier.", [*m, "tier"], registry=r
        )
        self.tier_used = Gauge(
            "kvbench_mock_tier_used_bytes", "Modelled bytes held.", [*m, "tier"], registry=r
        )
        self.noise_bytes = Counter(
            "kvbench_mock_fabric_noise_bytes",
            "Modelled noise bytes on the fabric (each flow at its offered rate, as the topology shares it).",
            m,
            registry=r,
        )
        self.noise_real_bytes = Counter(
            "kvbench_mock_fabric_noise_real_bytes", "Bytes received on the fabric sink port.", m, registry=r
        )
        self.noise_rate = Gauge(
            "kvbench_mock_fabric_noise_bytes_per_second", "Measured modelled noise rate.", m, registry=r
        )
        self.faults = Counter("kvbench_mock_faults", "Injected faults.", [*m, "fault"], registry=r)
        for c in (
            self.prefix_queries,
            self.prefix_hits,
            self.ext_queries,
            self.ext_hits,
            self.prompt_tokens,
            self.generation_tokens,
            self.noise_bytes,
            self.noise_real_bytes,
        ):
            c.labels(model_name)
        for s in SOURCES:
            self.by_source.labels(model_name, s)
        for t in TIER_NAMES:
            self.tier_hits.labels(model_name, t)
            self.onboard_bytes.labels(model_name, t)
            self.tier_used.labels(model_name, t)
        self.running.labels(model_name)
        self.waiting.labels(model_name)
        self.noise_rate.labels(model_name)

    def record_prompt(
        self, prompt_tokens: int, tokens_by_tier: dict[str, int], bytes_by_tier: dict[str, float]
    ) -> None:
        mn = self.model_name
        cached = sum(tokens_by_tier.values())
        local = tokens_by_tier.get("G1", 0) + tokens_by_tier.get("G2", 0)
        external = tokens_by_tier.get("G3", 0) + tokens_by_tier.get("G4", 0)
        self.prefix_queries.labels(mn).inc(prompt_tokens)
        self.prefix_hits.labels(mn).inc(cached)
        self.ext_queries.labels(mn).inc(prompt_tokens - local)
        self.ext_hits.labels(mn).inc(external)
        self.prompt_tokens.labels(mn).inc(prompt_tokens)
        self.by_source.labels(mn, "local_compute").inc(prompt_tokens - cached)
        self.by_source.labels(mn, "local_cache_hit").inc(local)
        self.by_source.labels(mn, "external_kv_transfer").inc(external)
        for t, n in tokens_by_tier.items():
            if n:
                self.tier_hits.labels(mn, t).inc(n)
        for t, b in bytes_by_tier.items():
            if b:
                self.onboard_bytes.labels(mn, t).inc(b)

    def render(self) -> bytes:
        return generate_latest(self.registry)
