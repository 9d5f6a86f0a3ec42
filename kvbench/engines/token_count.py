"""Count prompt tokens with the target's own tokenizer, through its HTTP endpoint.

vLLM, SGLang and the mock: POST /tokenize {"model", "prompt"} -> {"count", "tokens"}.
llama.cpp: POST /tokenize {"content", "add_special"} -> {"tokens"}.
The count includes BOS where the server's usage.prompt_tokens does. Which dialect is tried
first is the engine adapter's `tokenize_styles` (kvbench.engines.adapters).

A 413 (a proxy's or server's body limit, e.g. nginx's client_max_body_size with a 130k-token
prompt) is the deployment refusing the prompts themselves: the run stops with one line
(`PromptTooLarge`, exit 3) instead of failing every timed request the same way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable

import aiohttp

from kvbench.client.control import ControlClient
from kvbench.engines.adapters import get_adapter
from kvbench.errors import PromptTooLarge

CountOne = Callable[[str], Awaitable[int]]


async def server_token_counter(
    http: ControlClient, model: str, engine: str, api: str = "completions"
) -> CountOne | None:
    """A working counter for this server, or None when it has no tokenize endpoint.

    For the chat API the text is counted as a user message with the model's chat template
    applied (vLLM's /tokenize takes `messages`), so lengths include the template's tokens, as
    usage.prompt_tokens does; servers without that count the raw text (`counter.counts_chat`
    says which), and the template's overhead then shows in prompt_tokens_server.
    """
    styles = list(get_adapter(engine).tokenize_styles)
    if api == "chat":
        styles = ["vllm-chat", *styles]
    for style in styles:
        counter = _counter(http, model, style)
        try:
            if await counter("hello world") > 0:
                return counter
        except (aiohttp.ClientError, TimeoutError, LookupError, ValueError, TypeError, PromptTooLarge):
            continue
    return None


def _too_large(text: str, size: int, status: int) -> PromptTooLarge:
    return PromptTooLarge(
        f"POST /tokenize answered HTTP {status} (payload too large) for a prompt of {len(text):,} "
        f"characters ({size:,} bytes of JSON): the prompt is larger than what the server or a proxy "
        "in front of it accepts; raise the proxy's body limit (nginx: client_max_body_size) or use "
        "shorter prompts.lengths"
    )


_COUNT = re.compile(rb'^\s*\{\s*"count"\s*:\s*(\d+)\s*[,}]')


def _counter(http: ControlClient, model: str, style: str) -> CountOne:
    async def count(text: str) -> int:
        payload: dict[str, object] = {"model": model, "prompt": text}
        if style == "vllm-chat":
            payload = {"model": model, "messages": [{"role": "user", "content": text}]}
        elif style == "llamacpp":
            payload = {"content": text, "add_special": True}
        status, raw = await http.post_bytes("/tokenize", payload)
        if status == 413:
            raise _too_large(text, len(json.dumps(payload)), status)
        if status != 200:
            raise LookupError(f"/tokenize answered {status}")
        # vLLM-style answers lead with "count": read it without decoding a 130k-entry token list
        if m := _COUNT.match(raw[:64]):
            return int(m.group(1))
        body = json.loads(raw)
        if not isinstance(body, dict):
            raise LookupError("/tokenize answered something other than a JSON object")
        if isinstance(body.get("count"), int):
            return int(body["count"])
        return len(body["tokens"])

    count.counts_chat = style == "vllm-chat"  # type: ignore[attr-defined]
    return count
