"""/metrics parsing and per-phase counter deltas (kvbench.engines.telemetry), without a network."""

from __future__ import annotations

import asyncio
from typing import Any

from kvbench.engines.telemetry import Scraper, counter_deltas, parse_metrics, sum_delta
from kvbench.results import JsonlWriter, read_jsonl

TEXT = """\
# HELP vllm:prefix_cache_hits Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 1200.0
# HELP vllm:prefix_cache_hits_created created
# TYPE vllm:prefix_cache_hits_created gauge
vllm:prefix_cache_hits_created{engine="0",model_name="m"} 1.7e9
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# TYPE vllm:prompt_tokens_by_source counter
vllm:prompt_tokens_by_source_total{model_name="m",source="local_compute"} 800.0
vllm:prompt_tokens_by_source_total{model_name="m",source="local_cache_hit"} 1200.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 4.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 5.0
vllm:time_to_first_token_seconds_count{model_name="m"} 5.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 0.75
# TYPE process_cpu_seconds counter
process_cpu_seconds_total 12.5
"""


def test_parse_keeps_engine_families_and_drops_buckets_and_created():
    samples = parse_metrics(TEXT)
    names = {name for name, _ in samples}
    assert "vllm:prefix_cache_hits_total" in names
    assert "vllm:num_requests_running" in names  # gauges are kept (not delta'd)
    assert "vllm:time_to_first_token_seconds_count" in names
    assert not any(n.endswith(("_bucket", "_created")) for n in names)
    assert "process_cpu_seconds_total" not in names  # not an engine prefix
    key = ("vllm:prompt_tokens_by_source_total", (("model_name", "m"), ("source", "local_cache_hit")))
    assert samples[key] == 1200.0
    assert parse_metrics(TEXT, keep=()).keys() >= {("process_cpu_seconds_total", ())}  # () keeps all


def test_deltas_per_phase_are_after_minus_before():
    phase0 = parse_metrics(TEXT)
    phase1 = parse_metrics(TEXT.replace("1200.0", "5200.0").replace("} 3.0", "} 9.0"))
    phase2 = parse_metrics(TEXT.replace("1200.0", "5300.0").replace("800.0", "4800.0"))
    first, second = counter_deltas(phase0, phase1), counter_deltas(phase1, phase2)
    assert first["vllm:prefix_cache_hits_total"] == 4000.0  # engine/model_name labels dropped from keys
    assert second["vllm:prefix_cache_hits_total"] == 100.0
    assert first['vllm:prompt_tokens_by_source_total{source="local_cache_hit"}'] == 4000.0
    assert second['vllm:prompt_tokens_by_source_total{source="local_compute"}'] == 4000.0
    assert "vllm:num_requests_running" not in first  # a gauge has no meaningful delta
    assert first["vllm:time_to_first_token_seconds_count"] == 0.0
    assert sum_delta(first, ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total")) == 4000.0
    assert sum_delta(first, ("vllm:prompt_tokens_by_source_total",)) == 4000.0  # summed over labels
    assert sum_delta(first, ("nothing_total",)) is None


def test_a_counter_that_appears_mid_run_counts_from_zero():
    after = parse_metrics("# TYPE sglang:cached_tokens counter\nsglang:cached_tokens_total 64\n")
    assert counter_deltas({}, after) == {"sglang:cached_tokens_total": 64.0}


class TextHTTP:
    base_url = "http://fake"

    def __init__(self, status: int, text: str) -> None:
        self.status, self.text, self.gets = status, text, 0

    async def get_text(self, path: str) -> tuple[int, str]:
        self.gets += 1
        return self.status, self.text


def test_scraper_writes_rows_and_stops_asking_a_server_without_metrics(tmp_path):
    writer = JsonlWriter(tmp_path / "metrics.jsonl")
    http: Any = TextHTTP(200, TEXT)
    scraper = Scraper(http, writer, origin_ns=0)
    samples = asyncio.run(scraper.scrape("cached"))
    writer.close()
    assert samples and scraper.samples_written == len(samples)
    rows = read_jsonl(tmp_path / "metrics.jsonl")
    assert {r["phase"] for r in rows} == {"cached"} and rows[0]["t_ns"] > 0

    missing: Any = TextHTTP(404, "not found")
    scraper = Scraper(missing, None, origin_ns=0)
    assert asyncio.run(scraper.scrape("a")) is None and asyncio.run(scraper.scrape("b")) is None
    assert missing.gets == 1 and not scraper.enabled


def test_every_adapter_says_where_its_over_time_names_come_from():
    from kvbench.engines.adapters import REGISTRY

    for adapter in REGISTRY.values():
        for tc in adapter.transfer_counters:
            assert tc.direction in ("onboard", "offload") and tc.unit in ("bytes", "blocks", "tokens"), tc
            assert tc.source and (tc.tier or tc.tier_label), tc
            assert tc.name.startswith(adapter.metric_prefixes), (
                adapter.name,
                tc.name,
            )  # kept in metrics.jsonl
        for ref in (*adapter.queue_gauges, *adapter.kv_usage_gauges):
            assert ref.source and ref.name.startswith(adapter.metric_prefixes), (adapter.name, ref.name)


def test_the_mock_serves_the_names_its_adapter_declares():
    from kvbench.engines.adapters import get_adapter
    from kvbench.mock.metrics import MockMetrics

    metrics = MockMetrics("m")
    metrics.record_prompt(1000, {"G4": 800}, {"G4": 8e6})
    samples = parse_metrics(metrics.render().decode())
    names = {name for name, _ in samples}
    adapter = get_adapter("mock")
    for ref in (*adapter.transfer_counters, *adapter.queue_gauges, *adapter.kv_usage_gauges):
        assert ref.name in names, ref.name
    g4 = [
        v
        for (n, labels), v in samples.items()
        if n == "kvbench_mock_onboard_bytes_total" and ("tier", "G4") in labels
    ]
    assert g4 == [8e6]


def test_a_busy_server_is_asked_again_and_a_missing_metrics_is_not():
    for status, asked_again in ((503, True), (429, True), (404, False), (401, False)):
        http: Any = TextHTTP(status, "busy")
        scraper = Scraper(http, None, origin_ns=0)
        asyncio.run(scraper.scrape("a"))
        asyncio.run(scraper.scrape("b"))
        assert (http.gets == 2) is asked_again and scraper.enabled is asked_again, status
