"""The mock over HTTP (in-process, port 0): API shapes, cache behaviour, metrics, ground truth."""

import asyncio
import json
import time

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvbench.mock.api.server import MockServer


async def post_stream(session, url, body, headers=None):
    """(events as parsed JSON or '[DONE]', time of first content event, raw bytes)."""
    t0 = time.perf_counter()
    first = None
    events = []
    raw = b""
    async with session.post(url, json={**body, "stream": True}, headers=headers) as r:
        assert r.status == 200, await r.text()
        assert r.headers["Content-Type"].startswith("text/event-stream")
        async for line in r.content:
            raw += line
            if not line.startswith(b"data: "):
                continue
            data = line[6:].strip()
            if data == b"[DONE]":
                events.append("[DONE]")
                continue
            ev = json.loads(data)
            ch = ev["choices"][0] if ev["choices"] else {}
            if first is None and (ch.get("text") or ch.get("delta", {}).get("content")):
                first = time.perf_counter() - t0
            events.append(ev)
    return events, first, raw


def metrics_dict(text):
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.fixture
async def ci(tmp_path):
    async with MockServer("ci", ground_truth=tmp_path / "gt.jsonl") as srv, aiohttp.ClientSession() as s:
        yield srv, s, tmp_path / "gt.jsonl"


async def test_models_health_version(ci):
    srv, s, _ = ci
    assert srv.port > 0 and srv.base_url == f"http://127.0.0.1:{srv.port}"
    async with s.get(srv.base_url + "/v1/models") as r:
        body = await r.json()
    assert body["data"][0]["owned_by"] == "kvbench-mock"
    assert body["data"][0]["id"] == srv.profile.model_name
    async with s.get(srv.base_url + "/health") as r:
        assert r.status == 200
    async with s.get(srv.base_url + "/version") as r:
        assert (await r.json())["version"].startswith("kvbench-mock ")


async def test_completion_stream_shape_and_usage(ci):
    srv, s, _ = ci
    body = {"prompt": "one two three, four", "max_tokens": 5, "stream_options": {"include_usage": True}}
    events, first, _ = await post_stream(s, srv.base_url + "/v1/completions", body)
    assert events[-1] == "[DONE]" and first is not None
    usage_ev = events[-2]
    assert usage_ev["choices"] == []
    assert usage_ev["usage"]["prompt_tokens"] == 5
    assert usage_ev["usage"]["completion_tokens"] == 5
    assert usage_ev["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    content = events[:-2]
    assert len(content) == 5 and all(e["object"] == "text_completion" for e in content)
    assert content[-1]["choices"][0]["finish_reason"] == "length"
    # without include_usage: no usage chunk
    events, _, _ = await post_stream(s, srv.base_url + "/v1/completions", {"prompt": "x", "max_tokens": 2})
    assert len(events) == 3 and all("usage" not in e for e in events[:-1])


async def test_chat_stream_role_chunk_first(ci):
    srv, s, _ = ci
    body = {
        "messages": [{"role": "user", "content": "hello there"}],
        "max_tokens": 3,
        "stream_options": {"include_usage": True},
    }
    events, _, _ = await post_stream(s, srv.base_url + "/v1/chat/completions", body)
    assert events[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert all("content" in e["choices"][0]["delta"] for e in events[1:4])
    assert events[-2]["choices"] == [] and events[-2]["usage"]["prompt_tokens"] == 2 + 4 + 3
    assert events[-1] == "[DONE]"


async def test_non_streaming_and_deterministic_text(ci):
    srv, s, _ = ci
    body = {"prompt": "alpha beta gamma", "max_tokens": 7, "temperature": 0}
    texts = []
    for _ in range(2):
        async with s.post(srv.base_url + "/v1/completions", json=body) as r:
            out = await r.json()
        texts.append(out["choices"][0]["text"])
        assert out["usage"]["completion_tokens"] == 7
    assert texts[0] == texts[1] and len(texts[0].split()) == 7
    async with s.post(srv.base_url + "/v1/completions", json={**body, "prompt": "other"}) as r:
        assert (await r.json())["choices"][0]["text"] != texts[0]
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "temperature": 0}
    async with s.post(srv.base_url + "/v1/chat/completions", json=chat) as r:
        out = await r.json()
    assert out["choices"][0]["message"]["role"] == "assistant"
    async with s.post(srv.base_url + "/v1/completions", json={"prompt": 5}) as r:
        assert r.status == 400 and "error" in await r.json()
    async with s.post(
        srv.base_url + "/v1/completions", json={"prompt": "x " * 131_070, "max_tokens": 16}
    ) as r:
        assert r.status == 400


async def test_tokenize_matches_usage_and_detokenize(ci):
    srv, s, _ = ci
    prompt = "Hello, world! KV-cache offload"
    async with s.post(srv.base_url + "/tokenize", json={"model": "m", "prompt": prompt}) as r:
        tok = await r.json()
    assert tok["count"] == 8 == len(tok["tokens"]) and tok["max_model_len"] == 131_072
    async with s.post(srv.base_url + "/v1/completions", json={"prompt": prompt, "max_tokens": 1}) as r:
        assert (await r.json())["usage"]["prompt_tokens"] == tok["count"]
    msgs = [{"role": "user", "content": prompt}]
    async with s.post(srv.base_url + "/tokenize", json={"messages": msgs, "add_special_tokens": False}) as r:
        ctok = await r.json()
    async with s.post(srv.base_url + "/v1/chat/completions", json={"messages": msgs, "max_tokens": 1}) as r:
        assert (await r.json())["usage"]["prompt_tokens"] == ctok["count"] == 8 + 7
    async with s.post(srv.base_url + "/detokenize", json={"tokens": tok["tokens"][:3]}) as r:
        assert (await r.json())["prompt"] == "Hello , world"


async def test_long_prompt_twice_hits_g4_and_is_faster(tmp_path):
    # ci at 5x its time scale: cold ~100 ms, warm ~2.5 ms (robust on a loaded machine)
    gt = tmp_path / "gt.jsonl"
    async with (
        MockServer("ci", ground_truth=gt, profile_overrides={"time_scale": 0.01}) as srv,
        aiohttp.ClientSession() as s,
    ):
        await _long_prompt_twice(srv, s, gt)


async def _long_prompt_twice(srv, s, gt):
    prompt = "salt-xyz " + "lorem " * 100_000
    url = srv.base_url + "/v1/completions"
    body = {"prompt": prompt, "max_tokens": 2, "stream_options": {"include_usage": True}}
    cold, cold_ttft, _ = await post_stream(s, url, body, {"X-Request-Id": "cold-1"})
    warm, warm_ttft, _ = await post_stream(s, url, body, {"X-Request-Id": "warm-1"})
    n = cold[-2]["usage"]["prompt_tokens"]
    assert n == 100_003
    assert cold[-2]["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    cached = warm[-2]["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert n - 16 <= cached < n
    assert warm_ttft < cold_ttft / 2
    rows = {r["request_id"]: r for r in map(json.loads, gt.read_text().splitlines())}
    c, w = rows["cold-1"], rows["warm-1"]
    assert c["tokens_computed"] == n and c["cached_tokens"] == 0
    assert w["tokens_from_tier"] == {"G1": 0, "G2": 0, "G3": 0, "G4": cached}
    assert w["onboard_ms"] > 0 and w["prefill_ms"] < c["prefill_ms"]
    assert c["received_ns"] < c["first_token_ns"] <= c["end_ns"]
    assert w["status"] == "ok" and w["in_flight_at_receive"] == 1
    # reset empties the cache
    async with s.post(srv.base_url + "/reset_prefix_cache") as r:
        assert (await r.json()) == {"success": True}
    again, _, _ = await post_stream(s, url, body)
    assert again[-2]["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


async def test_metrics_parse_and_only_grow(ci):
    srv, s, _ = ci

    async def scrape():
        async with s.get(srv.base_url + "/metrics") as r:
            assert r.status == 200
            return metrics_dict(await r.text())

    m0 = await scrape()
    prompt = "metrics " * 200
    for _ in range(2):
        async with s.post(srv.base_url + "/v1/completions", json={"prompt": prompt, "max_tokens": 3}) as r:
            await r.read()
    m1 = await scrape()
    mn = ("model_name", srv.profile.model_name)
    assert m1[("vllm:prompt_tokens_total", (mn,))] - m0[("vllm:prompt_tokens_total", (mn,))] == 400
    assert m1[("vllm:generation_tokens_total", (mn,))] - m0[("vllm:generation_tokens_total", (mn,))] == 6
    assert m1[("vllm:prefix_cache_hits_total", (mn,))] - m0[("vllm:prefix_cache_hits_total", (mn,))] == 192
    assert m1[("vllm:prefix_cache_queries_total", (mn,))] == 400
    ext = ("vllm:prompt_tokens_by_source_total", (mn, ("source", "external_kv_transfer")))
    assert m1[ext] == 192
    assert m1[("kvbench_mock_tier_hit_tokens_total", (mn, ("tier", "G4")))] == 192
    assert m1[("kvbench_mock_onboard_bytes_total", (mn, ("tier", "G4")))] > 0
    assert ("kvbench_mock_fabric_noise_bytes_total", (mn,)) in m1
    counters = [k for k in m1 if k[0].endswith("_total")]
    assert all(m1[k] >= m0.get(k, 0) for k in counters)


async def test_concurrent_prefills_share_the_gpu():
    # a scaled copy of ci where one 30k-token cold prefill takes ~0.26 s
    async with MockServer("ci", profile_overrides={"time_scale": 0.1}) as srv, aiohttp.ClientSession() as s:
        url = srv.base_url + "/v1/completions"

        async def one(salt):
            t0 = time.perf_counter()
            async with s.post(url, json={"prompt": f"{salt} " + "w " * 30_000, "max_tokens": 1}) as r:
                await r.read()
            return time.perf_counter() - t0

        alone = await one("a")
        both = await asyncio.gather(one("b"), one("c"))
    assert min(both) > 1.6 * alone


async def test_laptop_eviction_across_tiers(tmp_path):
    gt = tmp_path / "gt.jsonl"
    async with (
        MockServer("laptop", ground_truth=gt, profile_overrides={"time_scale": 0.001}) as srv,
        aiohttp.ClientSession() as s,
    ):
        url = srv.base_url + "/v1/completions"
        for rid, salt in (("a1", "A"), ("b1", "B"), ("a2", "A")):
            body = {"prompt": f"{salt} " + "w " * 10_000, "max_tokens": 1}
            async with s.post(url, json=body, headers={"X-Request-Id": rid}) as r:
                assert r.status == 200
    rows = {r["request_id"]: r for r in map(json.loads, gt.read_text().splitlines())}
    tiers = rows["a2"]["tokens_from_tier"]
    # G1 holds 16k tokens: B's 10k pushed A's first blocks out; they come back from G2
    assert tiers["G2"] > 0 and tiers["G1"] > 0
    assert rows["a2"]["cached_tokens"] == 10_000


async def test_fixed_delay_ttft():
    async with (
        MockServer("fixed-delay", profile_overrides={"ttft_ms": 80}) as srv,
        aiohttp.ClientSession() as s,
    ):
        for n in (10, 20_000):
            _, first, _ = await post_stream(
                s, srv.base_url + "/v1/completions", {"prompt": "w " * n, "max_tokens": 2}
            )
            assert 0.075 < first < 0.5
