"""The mock OpenAI-compatible server (aiohttp.web) and MockServer, its in-process runner.

Endpoints
  GET  /v1/models                       one model, owned_by "kvbench-mock"
  POST /v1/completions                  streaming (SSE) or not; usage with cached_tokens
  POST /v1/chat/completions             streaming: a role-only first chunk, then content deltas
  POST /tokenize, /detokenize           vLLM's shapes (tokenizer.py explains the tokenizer)
  GET  /health, /version, /metrics      metrics: Prometheus text (metrics.py)
  POST /reset_prefix_cache              {"success": true} after emptying every tier (or
                                        ?tiers=G1,G2 only those); a
                                        persisted G4 (--persist-dir) only with
                                        ?include_persistent=true or the profile's
                                        reset_clears_persistent
Requests: max_tokens (or max_completion_tokens) default 16; the mock never stops early,
so ignore_eos changes nothing; temperature 0 gives text derived from the prompt alone
(identical prompts, identical text; cold and warm match); any other temperature draws
words from `seed` if given, else at random. Any `model` value is accepted.
`X-Request-Id` is recorded in the ground truth (one is made up when absent) and echoed.

Ground truth (`ground_truth=PATH`): one JSON line per completion request, written when it
ends; fields in engine.Trace. Times are real (already multiplied by time_scale).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import time
import uuid
from pathlib import Path
from typing import IO, Any

from aiohttp import web

from kvbench.errors import UsageError
from kvbench.mock.config import FixedDelayProfile, TieredProfile
from kvbench.mock.engine import FixedDelayEngine, TieredEngine, Trace
from kvbench.mock.fabric import FabricSink
from kvbench.mock.faults import FaultConfig, FaultDecision, FaultPlan, parse_fault_flags
from kvbench.mock.metrics import MockMetrics
from kvbench.mock.tokenizer import PromptInfo, Tokenizer, chat_tokens, split_tokens

log = logging.getLogger("kvbench.mock")

WORDS = (
    "alpha",
    "bravo",
    "cache",
    "delta",
    "echo",
    "fabric",
    "gamma",
    "hit",
    "index",
    "jitter",
    "kernel",
    "latency",
    "memory",
    "node",
    "offload",
    "prefix",
    "quorum",
    "rack",
    "storage",
    "tier",
    "uplink",
    "vector",
    "warm",
    "xfer",
    "yield",
    "zone",
    "block",
    "chunk",
    "drive",
    "edge",
    "flash",
    "grid",
    "host",
    "io",
    "jump",
    "key",
    "lane",
    "mesh",
    "net",
    "orbit",
    "page",
    "queue",
    "route",
    "shard",
    "token",
    "unit",
    "volume",
    "wire",
)
ENDLESS_MIN_GAP_S = 0.01


def mock_version() -> str:
    try:
        from importlib.metadata import version

        return version("kvbench")
    except Exception:
        return "0.0.0+unknown"


def _error(status: int, message: str, etype: str = "BadRequestError", headers: Any = None) -> web.Response:
    body = {"error": {"message": message, "type": etype, "param": None, "code": status}}
    return web.json_response(body, status=status, headers=headers)


class _BadRequest(Exception):
    pass


def _resolve_profile(profile: Any, overrides: dict[str, Any] | None) -> TieredProfile | FixedDelayProfile:
    from kvbench.mock.profiles import load_profile, validate_profile

    if isinstance(profile, str):
        result: TieredProfile | FixedDelayProfile = load_profile(profile, overrides)
        return result
    if isinstance(profile, TieredProfile | FixedDelayProfile):
        if overrides:
            from kvbench.mock.profiles import _set_dotted

            data = profile.model_dump()
            for k, v in overrides.items():
                _set_dotted(data, k, v)
            validated: TieredProfile | FixedDelayProfile = validate_profile(data)
            return validated
        return profile
    raise UsageError(f"profile: expected a name or a profile model, got {type(profile).__name__}")


def _resolve_faults(faults: Any) -> FaultConfig:
    if faults is None:
        return FaultConfig()
    if isinstance(faults, FaultConfig):
        return faults
    if isinstance(faults, dict):
        return FaultConfig.model_validate(faults)
    if isinstance(faults, list | tuple):
        return parse_fault_flags(list(faults))
    raise UsageError(f"faults: expected FaultConfig, dict or flag list, got {type(faults).__name__}")


class MockApp:
    """State and handlers of one mock server."""

    def __init__(
        self,
        profile: TieredProfile | FixedDelayProfile,
        ground_truth: Path | None,
        faults: FaultConfig,
        persist_dir: Path | None,
        exit_process_on_fault: bool,
    ) -> None:
        self.profile = profile
        self.metrics = MockMetrics(profile.model_name)
        self.engine: TieredEngine | FixedDelayEngine
        if isinstance(profile, TieredProfile):
            from kvbench.mock.timing import derive_params

            self.engine = TieredEngine(profile, derive_params(profile), self.metrics, persist_dir)
        else:
            self.engine = FixedDelayEngine(profile, self.metrics)
        self.tokenizer = Tokenizer(self.engine.block_tokens, root=profile.model_name, cache_entries=128)
        self.tokenizer.ids(WORDS)
        self.faults = FaultPlan(faults)
        self.exit_process_on_fault = exit_process_on_fault
        self.in_flight = 0
        self._gt: IO[str] | None = open(ground_truth, "a", encoding="utf-8") if ground_truth else None  # noqa: SIM115
        self.created = int(time.time())

    def close(self) -> None:
        self.engine.close()
        if self._gt is not None:
            self._gt.close()
            self._gt = None

    def build(self) -> web.Application:
        app = web.Application(client_max_size=1 << 30)
        r = app.router
        r.add_get("/v1/models", self.models)
        r.add_post("/v1/completions", self.completions)
        r.add_post("/v1/chat/completions", self.chat_completions)
        r.add_post("/tokenize", self.tokenize)
        r.add_post("/detokenize", self.detokenize)
        r.add_get("/health", self.health)
        r.add_get("/version", self.version)
        r.add_get("/metrics", self.metrics_handler)
        r.add_post("/reset_prefix_cache", self.reset_prefix_cache)
        return app

    # ------------------------------------------------------------------ small endpoints
    async def models(self, request: web.Request) -> web.Response:
        mn = self.profile.model_name
        card = {
            "id": mn,
            "object": "model",
            "created": self.created,
            "owned_by": "kvbench-mock",
            "root": mn,
            "parent": None,
            "max_model_len": self.engine.max_model_len,
        }
        return web.json_response({"object": "list", "data": [card]})

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": f"kvbench-mock {mock_version()}"})

    async def metrics_handler(self, request: web.Request) -> web.Response:
        return web.Response(
            body=self.metrics.render(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
        )

    async def reset_prefix_cache(self, request: web.Request) -> web.Response:
        include = request.query.get("include_persistent", "false").lower() in ("1", "true", "yes")
        tiers = None
        if "tiers" in request.query:  # e.g. ?tiers=G1,G2: evict the fast tiers only
            tiers = [t.strip().upper() for t in request.query["tiers"].split(",") if t.strip()]
            unknown = sorted(set(tiers) - {"G1", "G2", "G3", "G4"})
            if unknown:
                return _error(400, f"tiers: unknown tier(s) {', '.join(unknown)} (known: G1, G2, G3, G4)")
        return web.json_response({"success": self.engine.reset(include, tiers)})

    async def _json(self, request: web.Request) -> dict[str, Any]:
        try:
            body = await request.json(loads=json.loads)
        except (ValueError, UnicodeDecodeError) as exc:
            raise _BadRequest(f"request body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise _BadRequest("request body must be a JSON object")
        return body

    async def tokenize(self, request: web.Request) -> web.Response:
        try:
            body = await self._json(request)
            if "messages" in body:
                tokens = chat_tokens(body["messages"], bool(body.get("add_generation_prompt", True)))
            elif isinstance(body.get("prompt"), str):
                tokens = split_tokens(body["prompt"])
            else:
                raise _BadRequest("give 'prompt' (a string) or 'messages'")
        except (_BadRequest, ValueError) as exc:
            return _error(400, str(exc))
        out: dict[str, Any] = {
            "count": len(tokens),
            "max_model_len": self.engine.max_model_len,
            "tokens": self.tokenizer.ids(tokens),
            "token_strs": tokens if body.get("return_token_strs") else None,
        }
        return web.json_response(out)

    async def detokenize(self, request: web.Request) -> web.Response:
        try:
            body = await self._json(request)
            ids = body.get("tokens")
            if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
                raise _BadRequest("'tokens' must be a list of integers")
        except _BadRequest as exc:
            return _error(400, str(exc))
        return web.json_response({"prompt": self.tokenizer.detokenize(ids)})

    # ------------------------------------------------------------------ completions
    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, chat=True)

    async def _handle(self, request: web.Request, chat: bool) -> web.StreamResponse:
        received_ns = time.perf_counter_ns()
        self.in_flight += 1
        rid = request.headers.get("X-Request-Id") or f"mock-{uuid.uuid4().hex}"
        trace = Trace(
            request_id=rid,
            received_ns=received_ns,
            endpoint=request.path,
            in_flight_at_receive=self.in_flight,
            fabric_noise_bytes_per_s=self.engine.noise_bytes_per_s,
        )
        try:
            return await self._complete(request, chat, trace)
        except ConnectionResetError:
            # the client left, or a fault aborted the transport: nothing more can be sent
            if trace.status == "ok":
                trace.status = "cancelled"
            return web.Response(status=499)
        except asyncio.CancelledError:
            trace.status = "cancelled"
            raise
        finally:
            self.in_flight -= 1
            trace.end_ns = time.perf_counter_ns()
            if self._gt is not None:
                self._gt.write(json.dumps(trace.as_dict()) + "\n")
                self._gt.flush()

    def _abort(self, request: web.Request, trace: Trace, status: str) -> web.StreamResponse:
        trace.status = status
        trace.http_status = 0
        if request.transport is not None:
            request.transport.abort()
        raise ConnectionResetError(status)

    async def _complete(self, request: web.Request, chat: bool, trace: Trace) -> web.StreamResponse:
        decision = self.faults.next()
        fc = self.faults.config
        if decision.exit_process:
            self.metrics.faults.labels(self.profile.model_name, "exit_after_requests").inc()
            if self.exit_process_on_fault:
                log.warning("fault exit_after_requests: exiting now")
                os._exit(3)
            return self._abort(request, trace, "fault_exit")
        if decision.error_status is not None:
            self.metrics.faults.labels(self.profile.model_name, "error_rate").inc()
            trace.status, trace.http_status = "fault_error", decision.error_status
            return _error(decision.error_status, "injected fault", "InternalServerError")
        if decision.rate_limited:
            self.metrics.faults.labels(self.profile.model_name, "rate_limit").inc()
            trace.status, trace.http_status = "fault_rate_limit", 429
            return _error(
                429, "rate limited (injected fault)", "RateLimitError", {"Retry-After": str(fc.retry_after_s)}
            )
        try:
            body = await self._json(request)
            prompt = self._prompt(body, chat)
            max_tokens = body.get("max_completion_tokens") if chat else None
            max_tokens = body.get("max_tokens", 16) if max_tokens is None else max_tokens
            if max_tokens is None:
                max_tokens = 16
            if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
                raise _BadRequest("max_tokens must be a positive integer")
            if prompt.num_tokens + max_tokens > self.engine.max_model_len:
                raise _BadRequest(
                    f"This model's maximum context length is {self.engine.max_model_len} tokens. "
                    f"However, you requested {prompt.num_tokens + max_tokens} tokens "
                    f"({prompt.num_tokens} in the messages, {max_tokens} in the completion)."
                )
        except (_BadRequest, ValueError) as exc:
            trace.status, trace.http_status = "bad_request", 400
            return _error(400, str(exc))
        trace.prompt_tokens = prompt.num_tokens
        words = self._words(body, prompt)
        stream = bool(body.get("stream", False))
        opts = body.get("stream_options") or {}
        include_usage = bool(opts.get("include_usage", False)) if isinstance(opts, dict) else False
        model = str(body.get("model") or self.profile.model_name)
        faulty = decision.stream_faults
        endless = faulty and fc.endless_stream
        n_out = 10**9 if endless else max_tokens
        agen = self.engine.generate(prompt, n_out, trace)
        try:
            if stream:
                return await self._stream(
                    request, chat, trace, agen, words, max_tokens, model, include_usage, decision
                )
            return await self._plain(request, chat, trace, agen, words, max_tokens, model, decision)
        finally:
            await agen.aclose()

    def _prompt(self, body: dict[str, Any], chat: bool) -> PromptInfo:
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise _BadRequest("'messages' must be a non-empty list")
            return self.tokenizer.chat(messages, True)
        p = body.get("prompt")
        if isinstance(p, list) and len(p) == 1 and isinstance(p[0], str):
            p = p[0]
        if not isinstance(p, str):
            raise _BadRequest("'prompt' must be a string (batched or token-id prompts are not supported)")
        return self.tokenizer.prompt(p)

    def _words(self, body: dict[str, Any], prompt: PromptInfo) -> random.Random:
        temperature = body.get("temperature", 1.0)
        if temperature == 0:
            return random.Random(prompt.seed)
        seed = body.get("seed")
        return random.Random(hash((prompt.seed, seed)) if seed is not None else None)

    def _usage(self, trace: Trace, completion_tokens: int) -> dict[str, Any]:
        return {
            "prompt_tokens": trace.prompt_tokens,
            "total_tokens": trace.prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
            "prompt_tokens_details": {"cached_tokens": trace.cached_tokens},
        }

    def _token_text(self, rng: random.Random, i: int, decision: FaultDecision) -> str:
        fc = self.faults.config
        if i == 0 and decision.stream_faults and fc.giant_chunk_bytes:
            return "x" * fc.giant_chunk_bytes
        return " " + rng.choice(WORDS)

    def _count_token(self) -> None:
        self.metrics.generation_tokens.labels(self.profile.model_name).inc()

    async def _stream(
        self,
        request: web.Request,
        chat: bool,
        trace: Trace,
        agen: Any,
        rng: random.Random,
        max_tokens: int,
        model: str,
        include_usage: bool,
        decision: FaultDecision,
    ) -> web.StreamResponse:
        fc = self.faults.config
        faulty = decision.stream_faults
        cid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        obj = "chat.completion.chunk" if chat else "text_completion"
        resp = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Request-Id": trace.request_id,
            }
        )
        await resp.prepare(request)

        async def send(payload: dict[str, Any]) -> None:
            await resp.write(b"data: " + json.dumps(payload).encode() + b"\n\n")

        def choice(text: str | None, finish: str | None, role: bool = False) -> dict[str, Any]:
            if chat:
                delta: dict[str, Any] = {"role": "assistant"} if role else {"content": text}
                return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}

        if chat:
            await send(
                {
                    "id": cid,
                    "object": obj,
                    "created": created,
                    "model": model,
                    "choices": [choice(None, None, True)],
                }
            )
        if faulty and fc.close_after_tokens == 0:
            return self._abort(request, trace, "fault_close")
        endless = faulty and fc.endless_stream
        loop = asyncio.get_running_loop()
        started = loop.time()
        count = 0
        async for i in agen:
            if i == 0 and faulty and fc.stall_first_token_s:
                await asyncio.sleep(fc.stall_first_token_s)
            if endless and i > 0:
                await asyncio.sleep(ENDLESS_MIN_GAP_S)
            last = (not endless and i == max_tokens - 1) or (
                endless and loop.time() - started >= fc.endless_cap_s
            )
            text = self._token_text(rng, i, decision)
            if i == 0:
                trace.first_token_ns = time.perf_counter_ns()
            await send(
                {
                    "id": cid,
                    "object": obj,
                    "created": created,
                    "model": model,
                    "choices": [choice(text, "length" if last else None)],
                }
            )
            count += 1
            trace.completion_tokens = count
            self._count_token()
            if faulty and fc.close_after_tokens is not None and count >= fc.close_after_tokens:
                return self._abort(request, trace, "fault_close")
            if faulty and i == 0 and fc.bad_sse:
                await resp.write(b"\xff\xfe\x00garbage line without a data field\n\n")
            if faulty and i == 0 and fc.bad_json:
                await resp.write(b"data: {not json\n\n")
            if faulty and fc.stall_mid_stream_s and count == max(1, max_tokens // 2):
                await asyncio.sleep(fc.stall_mid_stream_s)
            if last:
                break
        if include_usage:
            await send(
                {
                    "id": cid,
                    "object": obj,
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": self._usage(trace, count),
                }
            )
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        self.metrics.request_success.labels(self.profile.model_name, "length").inc()
        return resp

    async def _plain(
        self,
        request: web.Request,
        chat: bool,
        trace: Trace,
        agen: Any,
        rng: random.Random,
        max_tokens: int,
        model: str,
        decision: FaultDecision,
    ) -> web.StreamResponse:
        fc = self.faults.config
        faulty = decision.stream_faults
        loop = asyncio.get_running_loop()
        started = loop.time()
        parts = []
        async for i in agen:
            if i == 0:
                if faulty and fc.stall_first_token_s:
                    await asyncio.sleep(fc.stall_first_token_s)
                trace.first_token_ns = time.perf_counter_ns()
            parts.append(self._token_text(rng, i, decision))
            self._count_token()
            if faulty and fc.endless_stream:
                if loop.time() - started >= fc.endless_cap_s:
                    break
                await asyncio.sleep(ENDLESS_MIN_GAP_S)
            elif i == max_tokens - 1:
                break
            if faulty and fc.stall_mid_stream_s and len(parts) == max(1, max_tokens // 2):
                await asyncio.sleep(fc.stall_mid_stream_s)
        trace.completion_tokens = len(parts)
        if faulty and fc.close_after_tokens is not None:
            return self._abort(request, trace, "fault_close")
        text = "".join(parts)
        cid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        if chat:
            choices: list[dict[str, Any]] = [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "logprobs": None,
                    "finish_reason": "length",
                }
            ]
        else:
            choices = [
                {"index": 0, "text": text, "logprobs": None, "finish_reason": "length", "stop_reason": None}
            ]
        out = {
            "id": cid,
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": model,
            "choices": choices,
            "usage": self._usage(trace, len(parts)),
        }
        self.metrics.request_success.labels(self.profile.model_name, "length").inc()
        headers = {"X-Request-Id": trace.request_id}
        if faulty and fc.bad_json:
            return web.Response(body=b"{not json", content_type="application/json", headers=headers)
        return web.json_response(out, headers=headers)


class MockServer:
    """The mock, serving in the current event loop: ``async with MockServer(...) as srv``.

    profile: a profile name (kvbench.mock.profiles) or a TieredProfile / FixedDelayProfile.
    port: 0 picks a free port. fabric_port: None = no fabric sink; 0 = a free port.
    faults: FaultConfig, a dict of its fields, or a list of "NAME[=VALUE]" flags.
    profile_overrides: dotted keys applied to the profile, e.g. {"time_scale": 0.01}.
    exit_process_on_fault: let exit_after_requests call os._exit (only for a spawned mock).
    """

    def __init__(
        self,
        profile: str | TieredProfile | FixedDelayProfile = "ci",
        host: str = "127.0.0.1",
        port: int = 0,
        ground_truth: str | Path | None = None,
        fabric_port: int | None = None,
        faults: FaultConfig | dict[str, Any] | list[str] | None = None,
        persist_dir: str | Path | None = None,
        *,
        profile_overrides: dict[str, Any] | None = None,
        exit_process_on_fault: bool = False,
    ) -> None:
        self.profile: TieredProfile | FixedDelayProfile = _resolve_profile(profile, profile_overrides)
        self.host = host
        self.port = port
        self.ground_truth = Path(ground_truth) if ground_truth is not None else None
        self.fabric_port = fabric_port
        self.faults = _resolve_faults(faults)
        self.persist_dir = Path(persist_dir) if persist_dir is not None else None
        self.exit_process_on_fault = exit_process_on_fault
        self.fabric_address: tuple[str, int] | None = None
        self.app: MockApp | None = None
        self._runner: web.AppRunner | None = None
        self._sink: FabricSink | None = None

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> MockServer:
        self.app = MockApp(
            self.profile, self.ground_truth, self.faults, self.persist_dir, self.exit_process_on_fault
        )
        self._runner = web.AppRunner(self.app.build(), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        try:
            await site.start()
        except OSError as exc:
            await self.stop()
            raise UsageError(
                f"--port: cannot listen on {self.host}:{self.port}: {exc.strerror or exc}"
            ) from None
        sockets = getattr(site._server, "sockets", None)
        assert sockets, "the site is not listening"
        self.port = int(sockets[0].getsockname()[1])
        if self.fabric_port is not None:
            scale = self.profile.fabric.noise_scale if isinstance(self.profile, TieredProfile) else 1.0
            self._sink = FabricSink(
                self.host, self.fabric_port, scale, self.app.engine.set_noise_rate, self.app.metrics
            )
            self.fabric_address = await self._sink.start()
        return self

    async def stop(self) -> None:
        if self._sink is not None:
            await self._sink.close()
            self._sink = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.app is not None:
            self.app.close()
            self.app = None

    async def __aenter__(self) -> MockServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
