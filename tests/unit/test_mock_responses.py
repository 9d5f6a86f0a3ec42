"""The mock's one token loop: a streamed and a plain answer to the same request carry the same
tokens and usage, and the faults act on both through the same hooks (in-process mock, port 0)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from kvbench.mock.api.server import MockServer

PROMPT = "the same prompt, answered twice " * 20


async def ask(
    s: aiohttp.ClientSession, base: str, chat: bool, stream: bool, **extra: Any
) -> tuple[str, dict[str, Any], aiohttp.ClientResponse]:
    """(text, usage, response) of one temperature-0 request, streamed or not."""
    body: dict[str, Any] = {"model": "m", "max_tokens": 12, "temperature": 0, "stream": stream, **extra}
    if chat:
        body["messages"] = [{"role": "user", "content": PROMPT}]
    else:
        body["prompt"] = PROMPT
    if stream:
        body["stream_options"] = {"include_usage": True}
    path = "/v1/chat/completions" if chat else "/v1/completions"
    # a cold cache for each answer, so that cached_tokens match too
    async with s.post(base + "/reset_prefix_cache") as r:
        assert (await r.json())["success"] is True
    async with s.post(base + path, json=body) as r:
        assert r.status == 200
        raw = await r.read()
    if not stream:
        out = json.loads(raw)
        choice = out["choices"][0]
        return (choice["message"]["content"] if chat else choice["text"]), out["usage"], r
    text, usage, done = [], None, False
    for event in raw.decode().split("\n\n"):
        if not event.strip():
            continue
        data = event.removeprefix("data: ")
        if data == "[DONE]":
            done = True
            continue
        chunk = json.loads(data)
        if chunk.get("usage"):
            usage = chunk["usage"]
        for c in chunk["choices"]:
            text.append((c["delta"].get("content") or "") if chat else c["text"])
    assert done and usage is not None
    return "".join(text), usage, r


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
async def test_streamed_and_plain_answers_match(chat: bool) -> None:
    async with MockServer("ci") as srv, aiohttp.ClientSession() as s:
        text_s, usage_s, resp_s = await ask(s, srv.base_url, chat, stream=True)
        text_p, usage_p, resp_p = await ask(s, srv.base_url, chat, stream=False)
    assert text_s == text_p and len(text_s.split()) == 12
    assert usage_s == usage_p
    assert usage_s["completion_tokens"] == 12 and usage_s["prompt_tokens"] > 100
    assert usage_s["total_tokens"] == usage_s["prompt_tokens"] + 12
    assert resp_s.headers["X-Accel-Buffering"] == "no"  # a proxy must not hold the stream back
    assert resp_s.headers["Content-Type"].startswith("text/event-stream")
    assert resp_p.headers["Content-Type"].startswith("application/json")


async def test_a_close_fault_cuts_both_answers_at_the_same_token(tmp_path: Path) -> None:
    gt = tmp_path / "gt.jsonl"
    async with MockServer("ci", ground_truth=gt, faults=["close_after_tokens=3"]) as srv:
        for stream in (True, False):
            async with aiohttp.ClientSession() as s:
                with pytest.raises(aiohttp.ClientError):
                    await ask(s, srv.base_url, chat=False, stream=stream)
    traces = [json.loads(line) for line in gt.read_text().splitlines()]
    assert [(t["status"], t["completion_tokens"]) for t in traces] == [("fault_close", 3)] * 2


def test_token_chunks_from_templates_are_the_json_dumps_bytes() -> None:
    """A token's SSE chunk is built from per-request templates; it must be exactly the chunk
    json.dumps of the whole payload gives, for text and chat, mid-stream and last."""
    import random

    from kvbench.mock.api.responses import SseWriter
    from kvbench.mock.api.serving import CompletionRequest
    from kvbench.mock.costs.engine import Trace
    from kvbench.mock.tokenizer import PromptInfo

    prompt = PromptInfo(b"\x01" * 16, 3, ())
    for chat in (False, True):
        req = CompletionRequest(chat, prompt, 4, True, True, 'm"odel\\é', random.Random(0))
        w = SseWriter(None, req, Trace("r", 0))  # type: ignore[arg-type]
        for text in (" alpha", ' "quoted"\\', " naïve ☃", "", "x" * 5000, "\x00kvbench"):
            for last in (False, True):
                want = w._event([w._choice(text, "length" if last else None)])
                assert w._token_event(text, last) == want, (chat, text, last)
