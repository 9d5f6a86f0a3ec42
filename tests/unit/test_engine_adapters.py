"""Contract test: every registered engine adapter's rules, run without a network.

Counters: a sample exposition of each built-in engine (names as the real servers write them)
goes through the same parse + delta path a run uses, and the adapter must read its hits and
queries back. Every registered adapter (a plug-in's too) must have every counter it reads kept
by the telemetry prefixes, be findable by its detection words, and follow the reset rules.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kvbench.engines.adapters import (
    REGISTRY,
    EngineAdapter,
    TierUnsupported,
    detect_from,
    engine_help,
    engine_names,
    get_adapter,
    metric_prefixes,
    register,
    unregister,
)
from kvbench.engines.telemetry import counter_deltas, parse_metrics
from kvbench.scenario import load_scenario

ADAPTERS = sorted(REGISTRY)


def exposition(samples: dict[str, float]) -> str:
    """Prometheus text for `name{labels}` -> value, counters typed as the real servers type them."""
    lines: list[str] = []
    for key, value in samples.items():
        name = key.split("{", 1)[0]
        family = name.removesuffix("_total")
        if name.endswith("_total"):
            lines.append(f"# TYPE {family} counter")
        lines.append(f"{key} {value}")
    return "\n".join(lines) + "\n"


# (before, after, expected hit delta, expected query delta) per built-in engine
SAMPLES: dict[str, tuple[dict[str, float], dict[str, float], float, float | None]] = {
    "mock": (
        {
            'vllm:prefix_cache_hits_total{model_name="m"}': 10,
            'vllm:prefix_cache_queries_total{model_name="m"}': 100,
        },
        {
            'vllm:prefix_cache_hits_total{model_name="m"}': 70,
            'vllm:prefix_cache_queries_total{model_name="m"}': 400,
        },
        60,
        300,
    ),
    "vllm": (
        {
            'vllm:prefix_cache_hits_total{engine="0",model_name="m"}': 5,
            'vllm:prefix_cache_queries_total{engine="0",model_name="m"}': 9,
            'vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_cache_hit"}': 5,
        },
        {
            'vllm:prefix_cache_hits_total{engine="0",model_name="m"}': 4005,
            'vllm:prefix_cache_queries_total{engine="0",model_name="m"}': 8009,
            'vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_cache_hit"}': 4005,
        },
        4000,
        8000,
    ),
    "sglang": (
        {'sglang:cached_tokens_total{model_name="m"}': 0, 'sglang:prompt_tokens_total{model_name="m"}': 0},
        {
            'sglang:cached_tokens_total{model_name="m"}': 512,
            'sglang:prompt_tokens_total{model_name="m"}': 1024,
        },
        512,
        1024,
    ),
    "lmcache": (
        {"lmcache:num_hit_tokens_total": 1, "lmcache:num_requested_tokens_total": 2},
        {"lmcache:num_hit_tokens_total": 257, "lmcache:num_requested_tokens_total": 514},
        256,
        512,
    ),
    "dynamo": ({"kvbm_matched_tokens_total": 0}, {"kvbm_matched_tokens_total": 128}, 128, None),
    "llamacpp": (
        {"llamacpp:prompt_tokens_cached_total": 3, "llamacpp:prompt_tokens_total": 50},
        {"llamacpp:prompt_tokens_cached_total": 903, "llamacpp:prompt_tokens_total": 80},
        900,
        None,
    ),
}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_counters_scraped_from_a_sample_exposition(name):
    adapter = get_adapter(name)
    before, after, hits, queries = SAMPLES[name]
    noise = {"process_cpu_seconds_total": 1.0, "python_gc_objects_collected_total": 7.0}
    deltas = counter_deltas(
        parse_metrics(exposition({**noise, **before})), parse_metrics(exposition({**noise, **after}))
    )
    assert not any(k.startswith(("process_", "python_")) for k in deltas)  # other families dropped
    assert adapter.hits(deltas) == hits
    assert adapter.queries(deltas) == queries


def test_every_builtin_engine_has_a_sample():
    builtin = {n for n in engine_names() if type(get_adapter(n)).__module__.startswith("kvbench.")}
    assert set(SAMPLES) == builtin - {"generic"}


@pytest.mark.parametrize("name", ADAPTERS)
def test_every_counter_an_adapter_reads_is_kept(name):
    adapter = REGISTRY[name]
    keep = metric_prefixes()
    for counter in (*adapter.hit_counters, *adapter.query_counters, *adapter.source_counters):
        assert counter.startswith(keep), f"{name}: {counter} is not kept by any metric prefix"
        assert counter.startswith(adapter.metric_prefixes), f"{name}: {counter} outside its own prefixes"
    # the first (preferred) hit and query counter survive parse + delta in their canonical form
    for names, read in ((adapter.hit_counters, adapter.hits), (adapter.query_counters, adapter.queries)):
        if names:
            text0, text1 = exposition({names[0]: 1.0}), exposition({names[0]: 43.0})
            assert read(counter_deltas(parse_metrics(text0), parse_metrics(text1))) == 42.0


@pytest.mark.parametrize("name", ADAPTERS)
def test_detection_words_name_the_adapter(name):
    adapter = REGISTRY[name]
    for word in adapter.owned_by_words:
        models = {"data": [{"id": "m", "owned_by": f"{word}-server".upper()}]}
        assert detect_from(models) == name
    for word in adapter.metric_words:
        assert detect_from(None, f"{word}something_total 1\n") == name
    if name == "generic":
        assert not adapter.owned_by_words and not adapter.metric_words


def test_detection_order_and_fallbacks():
    mock_metrics = "vllm:prefix_cache_hits_total 1\nkvbench_mock_tier_hit_tokens_total 2\n"
    assert detect_from(None, mock_metrics) == "mock"  # the mock speaks vllm: too; asked first
    assert detect_from(None, "vllm:x_total 1\nlmcache:num_hit_tokens_total 1\n") == "vllm"  # LMCache in vLLM
    assert detect_from({"data": [{"owned_by": "vllm"}]}, "sglang:x 1") == "vllm"  # owned_by first
    assert detect_from({"data": [{"owned_by": "acme"}]}, "acme_requests_total 1\n") is None
    assert detect_from("not json", None) is None
    assert detect_from({"data": "nonsense"}, None) is None


@pytest.mark.parametrize("name", ADAPTERS)
def test_reset_rules(name):
    adapter = REGISTRY[name]
    assert adapter.can_reset == (adapter.reset_path is not None)
    assert adapter.reset_succeeded(200, None)
    assert adapter.reset_succeeded(200, {"success": True})
    assert not adapter.reset_succeeded(200, {"success": False})  # newer vLLM: 200 but NOT reset
    assert not adapter.reset_succeeded(500, "boom")
    assert adapter.reset_gives_up(404) and not adapter.reset_gives_up(400)


@pytest.mark.parametrize("name", ADAPTERS)
def test_request_rules(name):
    adapter = REGISTRY[name]
    assert adapter.tokenize_styles and set(adapter.tokenize_styles) <= {"vllm", "llamacpp"}
    json.dumps(dict(adapter.extra_body))
    json.dumps(adapter.pin_request(0))
    assert name in engine_help()
    scn, _ = load_scenario("ttft", {"target.engine": name})  # the scenario takes every registered name
    assert scn.target.engine == name


class FakeHTTP:
    """In-memory ControlHTTP: answers from a script, records the calls."""

    base_url = "http://fake"
    session = None

    def __init__(self, answers: dict[str, list[tuple[int, Any]]]) -> None:
        self.headers: dict[str, str] = {}
        self.answers = answers
        self.calls: list[str] = []

    async def request(self, method: str, path: str, json_body: Any = None) -> tuple[int, Any]:
        self.calls.append(f"{method} {path}")
        queue = self.answers.get(f"{method} {path}") or [(404, {"detail": "Not Found"})]
        return queue.pop(0) if len(queue) > 1 else queue[0]

    async def get_text(self, path: str) -> tuple[int, str]:
        return 404, ""


@pytest.fixture
def no_sleep(monkeypatch):
    async def instant(_s: float) -> None:
        return None

    monkeypatch.setattr("kvbench.engines.adapters.base.asyncio.sleep", instant)


async def test_vllm_200_success_false_is_not_a_reset(no_sleep):
    http = FakeHTTP({"POST /reset_prefix_cache": [(200, {"success": False})]})
    ok, detail = await get_adapter("vllm").reset(http, attempts=3)
    assert not ok and "200" in detail and len(http.calls) == 3  # retried, never believed


async def test_vllm_without_dev_mode_gives_up_with_a_hint(no_sleep):
    ok, detail = await get_adapter("vllm").reset(FakeHTTP({}))
    assert not ok and "404" in detail and "VLLM_SERVER_DEV_MODE=1" in detail


async def test_sglang_busy_then_flushed(no_sleep):
    http = FakeHTTP({"POST /flush_cache": [(400, "busy"), (200, "ok")]})
    assert await get_adapter("sglang").reset(http) == (True, "reset")
    assert http.calls == ["POST /flush_cache", "POST /flush_cache"]


async def test_llamacpp_erases_every_slot(no_sleep):
    http = FakeHTTP(
        {
            "GET /slots": [(200, [{"id": 0}, {"id": 1}])],
            "POST /slots/0?action=erase": [(200, {"n_erased": 3})],
            "POST /slots/1?action=erase": [(200, {"n_erased": 0})],
        }
    )
    assert await get_adapter("llamacpp").reset(http) == (True, "reset")
    assert http.calls == ["GET /slots", "POST /slots/0?action=erase", "POST /slots/1?action=erase"]


async def test_generic_has_no_reset():
    ok, detail = await get_adapter("generic").reset(FakeHTTP({}))
    assert not ok and "no cache-reset call" in detail


async def test_tier_operations():
    http = FakeHTTP({"POST /reset_prefix_cache?tiers=G1,G2": [(200, {"success": True})]})
    assert await get_adapter("mock").evict_fast_tiers(http) == {}
    with pytest.raises(TierUnsupported):
        await get_adapter("sglang").evict_fast_tiers(http)
    with pytest.raises(TierUnsupported):
        await get_adapter("vllm").disk_round_trip(http, 0, "f.bin")
    assert get_adapter("llamacpp").pin_request(0) == {"id_slot": 0}
    assert get_adapter("vllm").pin_request(0) == {}


def test_registry_rules():
    assert get_adapter("no-such-engine").name == "generic"
    assert engine_names()[-1] == "generic"
    assert engine_help().startswith("auto, ")

    class Auto(EngineAdapter):
        name = "auto"

    with pytest.raises(ValueError, match="auto"):
        register(Auto)

    @register
    class Temp(EngineAdapter):
        name = "temp-engine"
        metric_prefixes = ("temp_",)

    try:
        assert "temp-engine" in engine_names() and "temp_" in metric_prefixes()
    finally:
        unregister("temp-engine")
    assert "temp-engine" not in engine_names()


def test_tier_hits_by_label():
    deltas = {
        'kvbench_mock_tier_hit_tokens_total{tier="G1"}': 100.0,
        'kvbench_mock_tier_hit_tokens_total{tier="G4"}': 900.0,
        'vllm:prompt_tokens_by_source_total{source="local_cache_hit"}': 100.0,
        'vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}': 900.0,
        "vllm:prefix_cache_hits_total": 1000.0,
    }
    assert get_adapter("mock").tier_hits(deltas) == {"G1": 100.0, "G4": 900.0}
    assert get_adapter("vllm").tier_hits(deltas) == {"local_cache_hit": 100.0, "external_kv_transfer": 900.0}
    assert get_adapter("sglang").tier_hits(deltas) == {}


@pytest.mark.parametrize("name", ADAPTERS)
def test_tier_counter_is_kept(name):
    adapter = REGISTRY[name]
    if adapter.tier_counter is not None:
        assert adapter.tier_counter[0].startswith(adapter.metric_prefixes)
