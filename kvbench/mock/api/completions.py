"""Completion requests: /v1/completions and /v1/chat/completions, from arrival to answer.

`handle()` owns what every completion request gets, whatever happens to it: a Trace (the ground
truth line, written when the request ends, cancelled or not), the in-flight count, the request id.
`_complete()` applies the request-level faults (exit, injected error status, 429), validates the
body into a CompletionRequest (400 with an OpenAI error otherwise), and hands the engine's token
generator to the one token loop in responses.py with the right body writer.

Request rules: max_tokens (or max_completion_tokens for chat) defaults to 16 and must fit the
context with the prompt; temperature 0 gives text derived from the prompt alone (identical
prompts, identical text); any other temperature draws words from `seed` if given, else at random.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import time
import uuid
from typing import Any

from aiohttp import web

from kvbench.mock import native
from kvbench.mock.api.http_replies import BadRequest, abort, error_response, json_object, log, read_body
from kvbench.mock.api.plain_body import split_prompt
from kvbench.mock.api.responses import BodyWriter, JsonWriter, SseWriter, answer
from kvbench.mock.api.serving import CompletionRequest, ServerState
from kvbench.mock.costs.engine import Trace
from kvbench.mock.tokenizer import PromptInfo, Tokenizer

DEFAULT_MAX_TOKENS = 16


async def handle(app: ServerState, request: web.Request, chat: bool) -> web.StreamResponse:
    """One completion request, traced from arrival to its end, whatever the end is."""
    received_ns = time.perf_counter_ns()
    app.in_flight += 1
    rid = request.headers.get("X-Request-Id") or f"mock-{uuid.uuid4().hex}"
    trace = Trace(
        request_id=rid,
        received_ns=received_ns,
        endpoint=request.path,
        in_flight_at_receive=app.in_flight,
        fabric_noise_bytes_per_s=app.engine.noise_bytes_per_s,
    )
    try:
        return await _complete(app, request, chat, trace)
    except ConnectionResetError:
        # the client left, or a fault aborted the transport: nothing more can be sent
        if trace.status == "ok":
            trace.status = "cancelled"
        return web.Response(status=499)
    except asyncio.CancelledError:
        trace.status = "cancelled"
        raise
    finally:
        app.in_flight -= 1
        trace.end_ns = time.perf_counter_ns()
        app.write_trace(trace)


async def _complete(app: ServerState, request: web.Request, chat: bool, trace: Trace) -> web.StreamResponse:
    decision = app.faults.next()
    fc = app.faults.config
    model_name = app.profile.model_name
    if decision.exit_process:
        app.metrics.faults.labels(model_name, "exit_after_requests").inc()
        if app.exit_process_on_fault:
            log.warning("fault exit_after_requests: exiting now")
            os._exit(3)
        abort(request, trace, "fault_exit")
    if decision.error_status is not None:
        app.metrics.faults.labels(model_name, "error_rate").inc()
        trace.status, trace.http_status = "fault_error", decision.error_status
        return error_response(decision.error_status, "injected fault", "InternalServerError")
    if decision.rate_limited:
        app.metrics.faults.labels(model_name, "rate_limit").inc()
        trace.status, trace.http_status = "fault_rate_limit", 429
        return error_response(
            429, "rate limited (injected fault)", "RateLimitError", {"Retry-After": str(fc.retry_after_s)}
        )
    checks = not native.available()  # split_prompt checks the words itself (no C accelerator)
    try:
        raw, charset = await read_body(request), request.charset
        cpu0 = time.thread_time_ns()

        def parse(raw: bytes) -> tuple[CompletionRequest, Any, Any]:
            # a plain-words prompt's 700 KB are not decoded as JSON (plain_body.py); else, or when
            # unsure, the whole body is. With the C accelerator the tokenizer's own pass checks
            # the words (and answers None for other text), so split_prompt does not.
            split = split_prompt(raw, check=checks) if not chat and charset in (None, "utf-8") else None
            prompt = app.tokenizer.plain_prompt(split[1]) if split else None
            body = split[0] if split and prompt is not None else json_object(raw, charset)
            req = parse_request(app, body, chat, prompt)
            return req, body.get("temperature", 1.0), body.get("seed")

        if charset in (None, "utf-8"):
            (req, temperature, seed), remembered = app.body_memo.get(chat, raw, parse)
            if remembered:  # the answer's words are drawn afresh for every request
                req = dataclasses.replace(req, words=word_source(temperature, seed, req.prompt))
        else:
            req = parse(raw)[0]
        trace.mock_cpu_ms += (time.thread_time_ns() - cpu0) / 1e6
    except (BadRequest, ValueError) as exc:
        trace.status, trace.http_status = "bad_request", 400
        return error_response(400, str(exc))
    trace.prompt_tokens = req.prompt.num_tokens
    endless = decision.stream_faults and fc.endless_stream
    tokens = app.engine.generate(req.prompt, 10**9 if endless else req.max_tokens, trace)
    writer: BodyWriter
    if req.stream:
        writer = SseWriter(request, req, trace, hold_last=not decision.stream_faults)
    else:
        writer = JsonWriter(req, trace)
    try:
        return await answer(app, request, req, trace, tokens, decision, writer)
    finally:
        await tokens.aclose()


def parse_request(
    app: ServerState, body: dict[str, Any], chat: bool, prompt: PromptInfo | None = None
) -> CompletionRequest:
    """Validate a completion body; BadRequest (or ValueError) with the message a client sees.
    `prompt`: the body's prompt, already tokenized (plain_body.split_prompt's)."""
    prompt = extract_prompt(app.tokenizer, body, chat) if prompt is None else prompt
    max_tokens = body.get("max_completion_tokens") if chat else None
    max_tokens = body.get("max_tokens", DEFAULT_MAX_TOKENS) if max_tokens is None else max_tokens
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise BadRequest("max_tokens must be a positive integer")
    limit = app.engine.max_model_len
    if prompt.num_tokens + max_tokens > limit:
        raise BadRequest(
            f"This model's maximum context length is {limit} tokens. "
            f"However, you requested {prompt.num_tokens + max_tokens} tokens "
            f"({prompt.num_tokens} in the messages, {max_tokens} in the completion)."
        )
    opts = body.get("stream_options") or {}
    return CompletionRequest(
        chat=chat,
        prompt=prompt,
        max_tokens=max_tokens,
        stream=bool(body.get("stream", False)),
        include_usage=bool(opts.get("include_usage", False)) if isinstance(opts, dict) else False,
        model=str(body.get("model") or app.profile.model_name),
        words=word_source(body.get("temperature", 1.0), body.get("seed"), prompt),
    )


def extract_prompt(tokenizer: Tokenizer, body: dict[str, Any], chat: bool) -> PromptInfo:
    """The prompt of a chat (messages) or text (prompt: a string, or a list of one) request."""
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("'messages' must be a non-empty list")
        return tokenizer.chat(messages, True)
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], str):
        p = p[0]
    if not isinstance(p, str):
        raise BadRequest("'prompt' must be a string (batched or token-id prompts are not supported)")
    return tokenizer.prompt(p)


def word_source(temperature: Any, seed: Any, prompt: PromptInfo) -> random.Random:
    """Temperature 0: words from the prompt alone; otherwise from `seed`, or at random."""
    if temperature == 0:
        return random.Random(prompt.seed)
    return random.Random(hash((prompt.seed, seed)) if seed is not None else None)
