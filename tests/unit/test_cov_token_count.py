"""Counting prompt tokens with the server's /tokenize: which dialect each engine is asked in and
in which order, answers in either shape, a server without the endpoint, and a 413 as one line."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from kvbench.engines.token_count import server_token_counter
from kvbench.errors import PromptTooLarge


class FakeServer:
    """A /tokenize that speaks one dialect: answers 400 to the others."""

    def __init__(self, dialect: str, *, status: int = 200, tokens_per_word: int = 1) -> None:
        self.dialect = dialect
        self.status = status
        self.k = tokens_per_word
        self.asked: list[dict[str, Any]] = []

    async def post_bytes(self, path: str, payload: dict[str, Any]) -> tuple[int, bytes]:
        assert path == "/tokenize"
        self.asked.append(payload)
        if self.status != 200:
            return self.status, b"{}"
        if self.dialect == "llamacpp" and "content" in payload:
            words = len(str(payload["content"]).split())
            return 200, json.dumps({"tokens": list(range(1 + self.k * words))}).encode()  # with BOS
        if self.dialect == "vllm" and "prompt" in payload:
            words = len(str(payload["prompt"]).split())
            return 200, json.dumps({"count": self.k * words, "max_model_len": 8, "tokens": []}).encode()
        if self.dialect == "vllm-chat" and "messages" in payload:
            words = len(str(payload["messages"][0]["content"]).split())
            return 200, json.dumps({"tokens": [0] * (self.k * words + 5)}).encode()  # + the template
        return 400, b'{"error": "bad request"}'


async def test_vllm_answers_in_its_own_dialect_first() -> None:
    srv = FakeServer("vllm", tokens_per_word=2)
    count = await server_token_counter(srv, "m", "vllm")  # type: ignore[arg-type]
    assert count is not None and not count.counts_chat  # type: ignore[attr-defined]
    assert await count("one two three") == 6
    assert srv.asked[0] == {"model": "m", "prompt": "hello world"}  # the probe


async def test_llamacpp_is_asked_in_its_dialect_and_counts_bos() -> None:
    srv = FakeServer("llamacpp")
    count = await server_token_counter(srv, "m", "llamacpp")  # type: ignore[arg-type]
    assert count is not None
    assert srv.asked[0] == {"content": "hello world", "add_special": True}
    assert await count("a b c d") == 5  # four words and the BOS the server adds


async def test_a_generic_server_falls_through_to_the_dialect_it_speaks() -> None:
    srv = FakeServer("llamacpp")
    count = await server_token_counter(srv, "m", "generic")  # type: ignore[arg-type]
    assert count is not None
    assert "prompt" in srv.asked[0] and "content" in srv.asked[1]  # vllm tried first, then llama.cpp
    assert await count("x y") == 3


async def test_chat_counts_with_the_template_where_the_server_can() -> None:
    srv = FakeServer("vllm-chat")
    count = await server_token_counter(srv, "m", "vllm", api="chat")  # type: ignore[arg-type]
    assert count is not None and count.counts_chat  # type: ignore[attr-defined]
    assert await count("a b") == 2 + 5
    plain = await server_token_counter(FakeServer("vllm"), "m", "vllm", api="chat")  # type: ignore[arg-type]
    assert plain is not None and not plain.counts_chat  # type: ignore[attr-defined]


async def test_no_tokenize_endpoint_means_no_counter() -> None:
    srv = FakeServer("vllm", status=404)
    assert await server_token_counter(srv, "m", "vllm") is None  # type: ignore[arg-type]
    assert len(srv.asked) == 2  # both dialects tried once


async def test_a_counter_that_raises_transport_errors_is_skipped() -> None:
    class Down:
        async def post_bytes(self, path: str, payload: dict[str, Any]) -> tuple[int, bytes]:
            raise aiohttp.ClientConnectionError("refused")

    assert await server_token_counter(Down(), "m", "vllm") is None  # type: ignore[arg-type]


async def test_a_413_is_one_line_naming_the_body_limit() -> None:
    class Limited(FakeServer):
        async def post_bytes(self, path: str, payload: dict[str, Any]) -> tuple[int, bytes]:
            text = str(payload.get("prompt", ""))
            if len(text) > 100:
                return 413, b""
            return await super().post_bytes(path, payload)

    count = await server_token_counter(Limited("vllm"), "m", "vllm")  # type: ignore[arg-type]
    assert count is not None
    with pytest.raises(PromptTooLarge) as err:
        await count("w " * 1000)
    text = str(err.value)
    assert "HTTP 413" in text and "2,000 characters" in text and "client_max_body_size" in text
    assert "\n" not in text


async def test_an_answer_that_is_not_an_object_is_refused() -> None:
    class Odd(FakeServer):
        async def post_bytes(self, path: str, payload: dict[str, Any]) -> tuple[int, bytes]:
            return 200, b"[1, 2, 3]"

    assert await server_token_counter(Odd("vllm"), "m", "vllm") is None  # type: ignore[arg-type]
