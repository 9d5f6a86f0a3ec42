"""Answering a completion: ONE token loop, two body writers (SSE stream, one JSON body).

`answer()` drives the engine's token generator for a validated request. Everything that decides
which tokens there are, when they come and what the faults do to them happens once, in that loop:
the first-token stall, the endless stream and its cap, close-after-K, the mid-stream stall, the
giant first chunk, the ground-truth trace (first-token time, completion tokens) and the token
metric. What differs between a streamed and a plain answer is only how the tokens reach the wire,
which is the body writer's job:

    SseWriter   an SSE stream: for chat, a role-only first chunk; a chunk per token; an optional
                usage chunk; `data: [DONE]`. Sent as it goes (with `X-Accel-Buffering: no`, so
                that a proxy in front of the mock does not hold the stream back).
    JsonWriter  collects the tokens and sends one JSON body at the end.

A fault that damages the wire format is the writer's business too (`corrupt()`): bad_sse and
bad_json write a bad line into a stream; a plain answer's body becomes invalid JSON (bad_json).
A close fault drops the connection after K tokens; a plain answer has sent nothing by then, so
it ends "aborted before the response" (faults.py) even when the answer is shorter than K.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections.abc import AsyncIterator
from json.encoder import encode_basestring_ascii
from typing import Any, Protocol

from aiohttp import web

from kvbench.mock.api.http_replies import abort
from kvbench.mock.api.serving import CompletionRequest, ServerState
from kvbench.mock.costs.engine import Trace
from kvbench.mock.faults import FaultConfig, FaultDecision

# fmt: off
WORDS = (
    "alpha", "bravo", "cache", "delta", "echo", "fabric", "gamma", "hit", "index", "jitter", "kernel",
    "latency", "memory", "node", "offload", "prefix", "quorum", "rack", "storage", "tier", "uplink",
    "vector", "warm", "xfer", "yield", "zone", "block", "chunk", "drive", "edge", "flash", "grid",
    "host", "io", "jump", "key", "lane", "mesh", "net", "orbit", "page", "queue", "route", "shard",
    "token", "unit", "volume", "wire",
)
# fmt: on
ENDLESS_MIN_GAP_S = 0.01
_MARK = "\x00kvbench-token\x00"  # stands for a token's text in a chunk template (never a word)


def usage(trace: Trace, completion_tokens: int) -> dict[str, Any]:
    """OpenAI usage, with the cached prompt tokens the engine found (vLLM's field)."""
    return {
        "prompt_tokens": trace.prompt_tokens,
        "total_tokens": trace.prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": {"cached_tokens": trace.cached_tokens},
    }


def completion_id(chat: bool) -> str:
    return ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex


class BodyWriter(Protocol):
    """How the tokens of one answer reach the client."""

    buffered: bool  # True: nothing reaches the client before finish()

    async def begin(self) -> None: ...

    async def token(self, text: str, last: bool) -> None: ...

    async def corrupt(self, faults: FaultConfig) -> None: ...

    async def finish(self, usage: dict[str, Any]) -> web.StreamResponse: ...


class SseWriter:
    """A `text/event-stream` answer, one chunk per token."""

    buffered = False

    def __init__(
        self, request: web.Request, req: CompletionRequest, trace: Trace, hold_last: bool = False
    ) -> None:
        self.request = request
        self.req = req
        self.trace = trace
        # the last token leaves with the usage chunk, [DONE] and the end of the chunked body: one
        # send instead of four (each send on loopback costs the mock ~0.03-0.1 ms of CPU). Not when
        # a stream fault may act after a token (close-after-K must see it sent).
        self.hold_last = hold_last
        self._tail = b""
        self._templates: dict[bool, tuple[bytes, bytes]] = {}
        self.cid = completion_id(req.chat)
        self.created = int(time.time())
        self.object = "chat.completion.chunk" if req.chat else "text_completion"
        self.resp = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",  # nginx and friends: do not buffer a token stream
                "X-Request-Id": trace.request_id,
            }
        )

    def _event(self, choices: list[dict[str, Any]], **extra: Any) -> bytes:
        payload = {
            "id": self.cid,
            "object": self.object,
            "created": self.created,
            "model": self.req.model,
            "choices": choices,
            **extra,
        }
        return b"data: " + json.dumps(payload).encode() + b"\n\n"

    async def _send(self, choices: list[dict[str, Any]], **extra: Any) -> None:
        await self.resp.write(self._event(choices, **extra))

    def _choice(self, text: str | None, finish: str | None, role: bool = False) -> dict[str, Any]:
        if self.req.chat:
            delta: dict[str, Any] = {"role": "assistant"} if role else {"content": text}
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}

    async def begin(self) -> None:
        await self.resp.prepare(self.request)
        if self.req.chat:  # like vLLM: a role-only chunk first (it carries no text: not the first token)
            await self._send([self._choice(None, None, True)])

    def _token_event(self, text: str, last: bool) -> bytes:
        """What _event gives for one token, from the request's two templates (mid-stream, last):
        only the text is encoded per token, not the whole chunk (byte-identical to json.dumps)."""
        parts = self._templates.get(last)
        if parts is None:
            mark = json.dumps(_MARK).encode()
            pre, post = self._event([self._choice(_MARK, "length" if last else None)]).split(mark)
            parts = self._templates[last] = (pre, post)
        return parts[0] + encode_basestring_ascii(text).encode() + parts[1]

    async def token(self, text: str, last: bool) -> None:
        event = self._token_event(text, last)
        if last and self.hold_last:
            self._tail = event  # sent by finish(), with what follows it at once
            return
        await self.resp.write(event)

    async def corrupt(self, faults: FaultConfig) -> None:
        if faults.bad_sse:
            await self.resp.write(b"\xff\xfe\x00garbage line without a data field\n\n")
        if faults.bad_json:
            await self.resp.write(b"data: {not json\n\n")

    async def finish(self, usage: dict[str, Any]) -> web.StreamResponse:
        tail = self._tail + (self._event([], usage=usage) if self.req.include_usage else b"")
        await self.resp.write_eof(tail + b"data: [DONE]\n\n")
        return self.resp


class JsonWriter:
    """A plain answer: the tokens joined into one JSON body."""

    buffered = True

    def __init__(self, req: CompletionRequest, trace: Trace) -> None:
        self.req = req
        self.trace = trace
        self.parts: list[str] = []
        self.bad_json = False

    async def begin(self) -> None:
        return None

    async def token(self, text: str, last: bool) -> None:
        self.parts.append(text)

    async def corrupt(self, faults: FaultConfig) -> None:
        self.bad_json = faults.bad_json  # bad_sse has no meaning without a stream

    async def finish(self, usage: dict[str, Any]) -> web.StreamResponse:
        text = "".join(self.parts)
        chat = self.req.chat
        choice: dict[str, Any]
        if chat:
            message = {"role": "assistant", "content": text}
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": "length"}
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": "length",
                "stop_reason": None,
            }
        out = {
            "id": completion_id(chat),
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": self.req.model,
            "choices": [choice],
            "usage": usage,
        }
        headers = {"X-Request-Id": self.trace.request_id}
        if self.bad_json:
            return web.Response(body=b"{not json", content_type="application/json", headers=headers)
        return web.json_response(out, headers=headers)


def token_text(rng: random.Random, i: int, decision: FaultDecision, faults: FaultConfig) -> str:
    if i == 0 and decision.stream_faults and faults.giant_chunk_bytes:
        return "x" * faults.giant_chunk_bytes
    return " " + rng.choice(WORDS)


async def answer(
    app: ServerState,
    request: web.Request,
    req: CompletionRequest,
    trace: Trace,
    tokens: AsyncIterator[int],
    decision: FaultDecision,
    writer: BodyWriter,
) -> web.StreamResponse:
    """The token loop: pace tokens from the engine, apply the faults, hand each token to `writer`."""
    fc = app.faults.config
    faulty = decision.stream_faults
    endless = faulty and fc.endless_stream
    await writer.begin()
    if faulty and fc.close_after_tokens == 0:
        abort(request, trace, "fault_close")
    loop = asyncio.get_running_loop()
    started = loop.time()
    count = 0
    async for i in tokens:
        if i == 0 and faulty and fc.stall_first_token_s:
            await asyncio.sleep(fc.stall_first_token_s)
        if endless and i > 0:
            await asyncio.sleep(ENDLESS_MIN_GAP_S)
        last = (not endless and i == req.max_tokens - 1) or (
            endless and loop.time() - started >= fc.endless_cap_s
        )
        text = token_text(req.words, i, decision, fc)
        if i == 0:
            trace.first_token_ns = time.perf_counter_ns()
        await writer.token(text, last)
        count += 1
        trace.completion_tokens = count
        app.count_token()
        if faulty and fc.close_after_tokens is not None and count >= fc.close_after_tokens:
            abort(request, trace, "fault_close")
        if faulty and i == 0:
            await writer.corrupt(fc)
        if faulty and fc.stall_mid_stream_s and count == max(1, req.max_tokens // 2):
            await asyncio.sleep(fc.stall_mid_stream_s)
        if last:
            break
    if faulty and fc.close_after_tokens is not None and writer.buffered:
        abort(request, trace, "fault_close")  # a plain answer shorter than K: still no response
    resp = await writer.finish(usage(trace, count))
    app.metrics.request_success.labels(app.profile.model_name, "length").inc()
    return resp
