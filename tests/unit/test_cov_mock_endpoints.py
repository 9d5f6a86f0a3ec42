"""The mock's small endpoints through aiohttp's test client: /tokenize and /detokenize round trip,
/v1/models says the profile's limits, /reset_prefix_cache refuses unknown tiers, bad bodies are
400s with a message, and each finished request's ground-truth line is written whole."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from kvbench.mock.api.app import MockApp, mock_version
from kvbench.mock.config import FixedDelayProfile
from kvbench.mock.costs.engine import Trace
from kvbench.mock.faults import FaultConfig
from kvbench.mock.profiles import load_profile


@pytest.fixture
async def ci_app(tmp_path: Path) -> AsyncIterator[tuple[MockApp, TestClient]]:
    app = MockApp(load_profile("ci"), tmp_path / "truth.jsonl", FaultConfig(), None, False)
    client = TestClient(TestServer(app.build()))
    await client.start_server()
    try:
        yield app, client
    finally:
        await client.close()
        app.close()


async def test_tokenize_then_detokenize_gives_the_words_back(ci_app: tuple[MockApp, TestClient]) -> None:
    _, client = ci_app
    text = "the quick brown fox jumps over the lazy dog"
    resp = await client.post("/tokenize", json={"prompt": text, "return_token_strs": True})
    assert resp.status == 200
    body = await resp.json()
    assert body["count"] == len(body["tokens"]) == len(text.split())
    assert body["token_strs"] == text.split()
    # the same word is the same id
    assert body["tokens"][0] == body["tokens"][6]
    back = await (await client.post("/detokenize", json={"tokens": body["tokens"]})).json()
    assert back["prompt"] == text


async def test_chat_messages_count_their_template(ci_app: tuple[MockApp, TestClient]) -> None:
    _, client = ci_app
    plain = await (await client.post("/tokenize", json={"prompt": "hello there"})).json()
    chat = await (
        await client.post("/tokenize", json={"messages": [{"role": "user", "content": "hello there"}]})
    ).json()
    assert chat["count"] > plain["count"]  # the template's tokens come on top of the words


@pytest.mark.parametrize(
    ("path", "body", "words"),
    [
        ("/tokenize", {"nothing": 1}, "give 'prompt'"),
        ("/tokenize", {"prompt": 5}, "give 'prompt'"),
        ("/detokenize", {"tokens": ["a"]}, "list of integers"),
        ("/detokenize", {}, "list of integers"),
    ],
)
async def test_bad_bodies_are_400_with_the_reason(
    ci_app: tuple[MockApp, TestClient], path: str, body: dict[str, object], words: str
) -> None:
    _, client = ci_app
    resp = await client.post(path, json=body)
    assert resp.status == 400
    assert words in json.dumps(await resp.json())


async def test_models_health_version_metrics(ci_app: tuple[MockApp, TestClient]) -> None:
    app, client = ci_app
    models = await (await client.get("/v1/models")).json()
    (card,) = models["data"]
    assert card["id"] == app.profile.model_name and card["max_model_len"] == app.engine.max_model_len
    assert (await client.get("/health")).status == 200
    version = (await (await client.get("/version")).json())["version"]
    assert version.startswith(f"kvbench-mock {mock_version()} (")
    metrics = await client.get("/metrics")
    assert metrics.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert "vllm:prompt_tokens" in await metrics.text()


async def test_reset_takes_known_tiers_only(ci_app: tuple[MockApp, TestClient]) -> None:
    _, client = ci_app
    ok = await client.post("/reset_prefix_cache?tiers=g1, G2&include_persistent=yes")
    assert ok.status == 200 and (await ok.json()) == {"success": True}
    bad = await client.post("/reset_prefix_cache?tiers=G1,G7,X")
    assert bad.status == 400
    assert "unknown tier(s) G7, X" in json.dumps(await bad.json())


async def test_ground_truth_lines_are_whole_json(ci_app: tuple[MockApp, TestClient], tmp_path: Path) -> None:
    app, _ = ci_app
    for i in range(3):
        app.write_trace(Trace(request_id=f"r{i}", received_ns=i))
    lines = (tmp_path / "truth.jsonl").read_text().splitlines()
    assert [json.loads(line)["request_id"] for line in lines] == ["r0", "r1", "r2"]


async def test_a_fixed_delay_mock_has_its_own_limits() -> None:
    profile = FixedDelayProfile(name="f", description="d", model_name="fixed-m", max_model_len=4096)
    app = MockApp(profile, None, FaultConfig(), None, False)
    client = TestClient(TestServer(app.build()))
    await client.start_server()
    try:
        card = (await (await client.get("/v1/models")).json())["data"][0]
        assert card["id"] == "fixed-m" and card["max_model_len"] == 4096
        app.write_trace(Trace(request_id="r", received_ns=0))  # no ground-truth file: nothing written
    finally:
        await client.close()
        app.close()
