"""Count prompt tokens with the target's own tokenizer, through its HTTP endpoint.

vLLM, SGLang and the mock: POST /tokenize {"model", "prompt"} -> {"count", "tokens"}.
llama.cpp: POST /tokenize {"content", "add_special"} -> {"tokens"}.
The count includes BOS where the server's usage.prompt_tokens does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import aiohttp

from kvbench.cache import TargetHTTP

CountOne = Callable[[str], Awaitable[int]]


async def server_token_counter(http: TargetHTTP, model: str, engine: str) -> CountOne | None:
    """A working counter for this server, or None when it has no tokenize endpoint."""
    styles = ["llamacpp", "vllm"] if engine == "llamacpp" else ["vllm", "llamacpp"]
    for style in styles:
        counter = _counter(http, model, style)
        try:
            if await counter("hello world") > 0:
                return counter
        except (aiohttp.ClientError, TimeoutError, LookupError, ValueError, TypeError):
            continue
    return None


def _counter(http: TargetHTTP, model: str, style: str) -> CountOne:
    async def count(text: str) -> int:
        if style == "vllm":
            status, body = await http.request("POST", "/tokenize", {"model": model, "prompt": text})
        else:
            status, body = await http.request("POST", "/tokenize", {"content": text, "add_special": True})
        if status != 200 or not isinstance(body, dict):
            raise LookupError(f"/tokenize answered {status}")
        if isinstance(body.get("count"), int):
            return int(body["count"])
        return len(body["tokens"])

    return count
