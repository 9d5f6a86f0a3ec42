"""OpenAI-compatible streaming client: one request in, one RequestRecord out.

Timing rules (they are the point of a benchmark):
- ONE clock, time.perf_counter_ns() (CLOCK_MONOTONIC on Linux, so comparable
  with a server on the same host), stamped relative to the run's origin.
- The body is serialised before `sent_ns` is taken; nothing is copied after.
- A chunk is stamped the moment it leaves the socket, before it is parsed.
- TTFT is the first chunk that carries content or reasoning text; role-only
  and usage-only chunks never count (vLLM once shipped that bug, PR #3768).
- A failed request is a record with an error type, never an exception; only
  cancellation propagates, after the record is marked `cancelled`.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from json.encoder import encode_basestring, encode_basestring_ascii
from typing import Any

import aiohttp

from kvbench.http1 import Exchange, RawPool, Target, error_detail
from kvbench.sse import SSEError, SSEParser

OUTPUT_TEXT_KEEP = 4096


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    phase: str = ""
    label: str = ""
    repetition: int = 0
    prompt_id: int = -1
    prompt_tokens_requested: int = 0
    prompt_tokens: int = 0
    prompt_tokens_server: int | None = None
    cached_tokens: int | None = None
    output_tokens: int | None = None
    scheduled_ns: int | None = None
    sent_ns: int | None = None
    headers_ns: int | None = None
    first_token_ns: int | None = None
    end_ns: int | None = None
    token_ns: list[int] = field(default_factory=list)
    status: str = "ok"
    http_status: int | None = None
    error_type: str | None = None
    error_message: str | None = None
    output_chars: int = 0
    output_text: str = ""
    noise_active: bool = False
    attempt: int = 1
    finish_reason: str | None = None
    clock_source: str = "user"  # "kernel": receive times are the kernel's RX stamps (kstamp)
    first_token_user_ns: int | None = None  # when the loop got to the first token (kernel source)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def fail(self, error_type: str, message: str, status: str = "error") -> None:
        self.status = status
        self.error_type = error_type
        self.error_message = message.splitlines()[0][:500] if message else error_type

    def to_row(self) -> dict[str, Any]:
        def ms(a: int | None, b: int | None) -> float | None:
            return None if a is None or b is None else (a - b) / 1e6

        gaps = [b - a for a, b in zip(self.token_ns, self.token_ns[1:], strict=False)]
        return {
            "request_id": self.request_id,
            "phase": self.phase,
            "label": self.label,
            "repetition": self.repetition,
            "prompt_id": self.prompt_id,
            "prompt_tokens_requested": self.prompt_tokens_requested,
            "prompt_tokens": self.prompt_tokens,
            "prompt_tokens_server": self.prompt_tokens_server,
            "cached_tokens": self.cached_tokens,
            "output_tokens": self.output_tokens,
            "scheduled_ns": self.scheduled_ns,
            "sent_ns": self.sent_ns,
            "headers_ns": self.headers_ns,
            "first_token_ns": self.first_token_ns,
            "end_ns": self.end_ns,
            "token_ns": self.token_ns,
            "ttft_ms": ms(self.first_token_ns, self.sent_ns),
            "e2e_ms": ms(self.end_ns, self.sent_ns),
            "dispatch_delay_ms": ms(self.sent_ns, self.scheduled_ns),
            "itl_ms_mean": (sum(gaps) / len(gaps) / 1e6) if gaps else None,
            "status": self.status,
            "http_status": self.http_status,
            "error_type": self.error_type,
            "error_message": self.error_message,
            "output_chars": self.output_chars,
            "output_text": self.output_text,
            "noise_active": self.noise_active,
            "attempt": self.attempt,
            "finish_reason": self.finish_reason,
            "clock_source": self.clock_source,
            "first_token_user_ns": self.first_token_user_ns,
            "first_token_lag_ms": ms(self.first_token_user_ns, self.first_token_ns),
        }


@dataclass(frozen=True, slots=True)
class ClientConfig:
    base_url: str
    model: str
    api: str = "completions"
    max_tokens: int = 16
    temperature: float = 0.0
    ignore_eos: bool = True
    first_token_timeout_s: float = 900.0
    total_timeout_s: float = 3600.0
    extra_body: dict[str, Any] = field(default_factory=dict)
    max_event_bytes: int = 8 * 1024 * 1024

    @property
    def url(self) -> str:
        path = "/v1/chat/completions" if self.api == "chat" else "/v1/completions"
        return self.base_url + path


_PROMPT_SLOT = "\x00kvbench-prompt\x00"  # stands in for the prompt while the small part is serialised
_PROMPT_SLOT_JSON = json.dumps(_PROMPT_SLOT)
_PROMPT_CACHE_MIN = 64 * 1024  # prompts at least this long keep their JSON form ...
_PROMPT_CACHE_BYTES = 64 * 1024 * 1024  # ... up to this many bytes in all
_prompt_cache: dict[str, bytes] = {}
_prompt_cache_size = 0


def build_body(cfg: ClientConfig, prompt: str) -> bytes:
    """The request body: exactly `json.dumps(body, ensure_ascii=False).encode()`, built faster.

    The prompt is escaped on its own (the ASCII escaper is ~2x faster and gives the same output
    for ASCII text) and spliced in; a long prompt's escaped form is kept, so a phase that sends
    the same text again only copies it. This runs on the event loop, between other requests'
    chunks: 3 ms for a 130k-token prompt would delay their timestamps.
    """
    body: dict[str, Any] = {
        "model": cfg.model,
        "max_tokens": cfg.max_tokens,
        "temperature": cfg.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if cfg.api == "chat":
        body["messages"] = [{"role": "user", "content": _PROMPT_SLOT}]
    else:
        body["prompt"] = _PROMPT_SLOT
    if cfg.ignore_eos:
        body["ignore_eos"] = True
    body.update(cfg.extra_body)
    text = json.dumps(body, ensure_ascii=False)
    head, sep, tail = text.partition(_PROMPT_SLOT_JSON)
    if not sep or _PROMPT_SLOT_JSON in tail:  # extra_body replaced or repeated the prompt field
        key = "messages" if cfg.api == "chat" else "prompt"
        if key not in cfg.extra_body:
            body[key] = [{"role": "user", "content": prompt}] if cfg.api == "chat" else prompt
        return json.dumps(body, ensure_ascii=False).encode("utf-8")
    return b"".join((head.encode("utf-8"), _prompt_json(prompt), tail.encode("utf-8")))


def _prompt_json(prompt: str) -> bytes:
    global _prompt_cache_size
    cached = _prompt_cache.get(prompt)
    if cached is not None:
        return cached
    if prompt.isascii() and "\x7f" not in prompt:  # the ASCII escaper also escapes DEL
        out = encode_basestring_ascii(prompt).encode("ascii")
    else:
        out = encode_basestring(prompt).encode("utf-8")
    if len(prompt) >= _PROMPT_CACHE_MIN:
        while _prompt_cache and _prompt_cache_size + len(out) > _PROMPT_CACHE_BYTES:
            _prompt_cache_size -= len(_prompt_cache.pop(next(iter(_prompt_cache))))  # oldest first
        if len(out) <= _PROMPT_CACHE_BYTES:
            _prompt_cache[prompt] = out
            _prompt_cache_size += len(out)
    return out


def _chunk_text(obj: dict[str, Any]) -> str:
    """Content or reasoning text a chunk carries ('' for role-only / usage-only chunks)."""
    choices = obj.get("choices")
    if not choices:
        return ""
    choice = choices[0]
    text = choice.get("text")
    if text:
        return str(text)
    delta = choice.get("delta")
    if delta:
        for key in ("content", "reasoning_content", "reasoning"):
            value = delta.get(key)
            if value:
                return str(value)
    return ""


class _Stream:
    """What a response body means for the record: SSE events -> token times, text, usage, errors.

    Shared by both transports; `feed` is called with each body chunk and the time it left the
    socket, and returns True once the record has failed (the caller stops reading).
    """

    __slots__ = ("done", "kept", "on_first", "parser", "pieces", "rec")

    def __init__(self, rec: RequestRecord, cfg: ClientConfig) -> None:
        self.rec = rec
        self.parser = SSEParser(max_event_bytes=cfg.max_event_bytes)
        self.pieces: list[str] = []
        self.kept = 0
        self.done = False
        self.on_first: Callable[[], None] | None = None

    def feed(self, t: int, chunk: bytes) -> bool:
        rec = self.rec
        for ev in self.parser.feed(chunk):
            data = ev.data
            if data == "[DONE]":
                self.done = True
                continue
            try:
                obj = _loads(data)
            except ValueError:
                rec.fail("bad_json", f"data line is not JSON: {data[:120]!r}")
                rec.end_ns = t
                return True
            if not isinstance(obj, dict):
                rec.fail("bad_json", f"data line is not a JSON object: {data[:120]!r}")
                rec.end_ns = t
                return True
            choices = obj.get("choices")
            if "error" in obj and not choices:
                err = obj["error"]
                msg = err.get("message", str(err)) if isinstance(err, dict) else str(err)
                rec.fail("server_error", msg)
                rec.end_ns = t
                return True
            text = _chunk_text(obj) if choices else ""
            if text:
                if rec.first_token_ns is None:
                    rec.first_token_ns = t
                    if self.on_first is not None:
                        self.on_first()
                rec.token_ns.append(t)
                rec.output_chars += len(text)
                if self.kept < OUTPUT_TEXT_KEEP:
                    self.pieces.append(text)
                    self.kept += len(text)
            if choices and choices[0].get("finish_reason"):
                rec.finish_reason = choices[0]["finish_reason"]
            usage = obj.get("usage")
            if usage:
                _apply_usage(rec, usage)
        if self.parser.unknown_lines:
            rec.fail("bad_sse", "server sent a line that is not an SSE field")
            rec.end_ns = t
            return True
        return False

    def end(self, t: int) -> None:
        """The body ended normally at t: a stream without [DONE] or finish_reason is truncated."""
        rec = self.rec
        rec.end_ns = t
        if not self.done and rec.finish_reason is None:
            rec.fail("stream_truncated", "stream ended without [DONE] or a finish_reason")
        elif not self.done and self.parser.has_partial:
            rec.fail("stream_truncated", "stream ended inside an event")

    def close(self) -> None:
        rec = self.rec
        rec.output_text = "".join(self.pieces)[:OUTPUT_TEXT_KEEP]
        if rec.output_tokens is None and rec.token_ns:
            rec.output_tokens = len(rec.token_ns)


_loads = json.loads


class StreamingClient:
    """Issues the timed requests of a run over the run's single session.

    With a session from `make_session` and an http:// target, requests go over kvbench's own
    keep-alive HTTP/1.1 connections (`RawPool`): the request is written to the socket in the
    same step that stamps `sent_ns`, and each body chunk is handled in the socket's callback,
    stamped before anything else runs. aiohttp (one task switch per chunk, and on Python 3.11
    the body written by a task of its own, after every other ready callback) carries https
    targets, sessions made elsewhere, and KVBENCH_CLIENT_HTTP=aiohttp.
    """

    def __init__(
        self,
        cfg: ClientConfig,
        session: aiohttp.ClientSession,
        origin_ns: int,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.cfg = cfg
        self.session = session
        self.origin_ns = origin_ns
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        self._raw: tuple[ClientConfig, Target | None] | None = None

    def now(self) -> int:
        return time.perf_counter_ns() - self.origin_ns

    def clock_manifest(self) -> dict[str, Any]:
        """`clock_source` and the kernel-stamp calibration, for the run's manifest."""
        pool = getattr(self.session.connector, "raw_pool", None)
        if not isinstance(pool, RawPool):
            info: dict[str, Any] = {"clock_source": "user", "reason": "timed requests go through aiohttp"}
        elif self._raw_target() is None:
            info = {"clock_source": "user", "reason": "https (or a non-http URL) goes through aiohttp"}
        else:
            info = pool.clock_info()
        return {"clock_source": info["clock_source"], "clock": info}

    def _raw_target(self) -> Target | None:
        cfg = self.cfg
        if self._raw is None or self._raw[0] is not cfg:  # cfg is replaced when the target moves
            pool = getattr(self.session.connector, "raw_pool", None)
            target = Target.make(cfg, self.headers, pool) if isinstance(pool, RawPool) else None
            self._raw = (cfg, target)
        return self._raw[1]

    async def send(self, rec: RequestRecord, body: bytes) -> RequestRecord:
        """Issue one streaming request; fill and return `rec`. Never raises but CancelledError."""
        target = self._raw_target()
        if target is not None:
            return await self._send_raw(target, rec, body)
        return await self._send_aiohttp(rec, body)

    def _timeouts(self, loop: asyncio.AbstractEventLoop) -> tuple[float, float, float]:
        cfg = self.cfg
        first = min(cfg.first_token_timeout_s, cfg.total_timeout_s)
        now = loop.time()
        return first, now + first, now + cfg.total_timeout_s

    def _timed_out(self, rec: RequestRecord, first_s: float) -> None:
        rec.end_ns = self.now()
        if rec.first_token_ns is None:
            rec.fail("timeout_first_token", f"no content token within {first_s:g} s")
        else:
            rec.fail("timeout_total", f"request not finished within {self.cfg.total_timeout_s:g} s")

    async def _send_raw(self, target: Target, rec: RequestRecord, body: bytes) -> RequestRecord:
        loop = asyncio.get_running_loop()
        first_s, first_deadline, total_deadline = self._timeouts(loop)
        stream = _Stream(rec, self.cfg)
        pool = target.pool
        ex: Exchange | None = None
        rec.sent_ns = self.now()
        try:
            async with asyncio.timeout_at(first_deadline) as deadline:
                stream.on_first = lambda: deadline.reschedule(total_deadline)
                async with pool.slots:
                    head = target.head(rec.request_id, len(body))
                    conn = pool.idle_conn(target.key)
                    reused = conn is not None
                    if conn is None:
                        conn = await pool.connect(target)
                    ex = Exchange(conn, stream, loop.create_future(), self.origin_ns)
                    conn.start(ex, head, body)
                    await ex.finished
                    if reused and ex.dropped_unanswered:
                        # the keep-alive race: the server closed an idle connection as we reused it
                        # (llama-server does after every stream). Nothing was answered, so nothing
                        # was processed: send again, once, on a fresh connection.
                        rec.status, rec.error_type, rec.error_message, rec.end_ns = "ok", None, None, None
                        conn = await pool.connect(target)
                        ex = Exchange(conn, stream, loop.create_future(), self.origin_ns)
                        conn.start(ex, head, body)
                        await ex.finished
        except TimeoutError:
            if ex is not None:
                ex.abort()
            self._timed_out(rec, first_s)
        except OSError as exc:
            rec.end_ns = self.now()
            rec.fail("connect_error", f"cannot connect to {self.cfg.base_url}: {exc}")
        except asyncio.CancelledError:
            if ex is not None:
                ex.abort()
            rec.end_ns = self.now()
            rec.fail("cancelled", "cancelled (run interrupted)", status="cancelled")
            raise
        finally:
            stream.close()
        return rec

    async def _send_aiohttp(self, rec: RequestRecord, body: bytes) -> RequestRecord:
        cfg = self.cfg
        headers = {**self.headers, "X-Request-Id": rec.request_id}
        loop = asyncio.get_running_loop()
        first_s, first_deadline, total_deadline = self._timeouts(loop)
        origin = self.origin_ns
        stream = _Stream(rec, cfg)
        rec.sent_ns = self.now()
        try:
            async with asyncio.timeout_at(first_deadline) as deadline:
                stream.on_first = lambda: deadline.reschedule(total_deadline)
                async with self.session.post(cfg.url, data=body, headers=headers) as resp:
                    rec.headers_ns = self.now()
                    rec.http_status = resp.status
                    if resp.status >= 400:
                        detail = (await resp.content.read(2048)).decode("utf-8", "replace")
                        rec.fail(f"http_{resp.status}", error_detail(detail) or resp.reason or "")
                        rec.end_ns = self.now()
                        return rec
                    async for chunk in resp.content.iter_any():
                        if stream.feed(time.perf_counter_ns() - origin, chunk):
                            return rec
                    stream.end(self.now())
        except TimeoutError:
            self._timed_out(rec, first_s)
        except SSEError as exc:
            rec.end_ns = self.now()
            kind = "response_too_large" if "larger than" in str(exc) else "bad_sse"
            rec.fail(kind, str(exc))
        except aiohttp.ClientConnectorError as exc:
            rec.end_ns = self.now()
            rec.fail("connect_error", f"cannot connect to {cfg.base_url}: {exc.os_error}")
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientOSError) as exc:
            rec.end_ns = self.now()
            if rec.headers_ns is None:
                rec.fail("connect_error", f"connection lost before a response: {type(exc).__name__}")
            else:
                rec.fail("stream_truncated", f"connection closed mid-stream: {type(exc).__name__}: {exc}")
        except aiohttp.ClientResponseError as exc:
            rec.end_ns = self.now()
            rec.fail(f"http_{exc.status}", exc.message)
        except aiohttp.ClientError as exc:
            rec.end_ns = self.now()
            rec.fail("client_error", f"{type(exc).__name__}: {exc}")
        except asyncio.CancelledError:
            rec.end_ns = self.now()
            rec.fail("cancelled", "cancelled (run interrupted)", status="cancelled")
            raise
        finally:
            stream.close()
        return rec


def _apply_usage(rec: RequestRecord, usage: dict[str, Any]) -> None:
    if (pt := usage.get("prompt_tokens")) is not None:
        rec.prompt_tokens_server = int(pt)
    if (ct := usage.get("completion_tokens")) is not None:
        rec.output_tokens = int(ct)
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and details.get("cached_tokens") is not None:
        rec.cached_tokens = int(details["cached_tokens"])


class _Connector(aiohttp.TCPConnector):
    """aiohttp's connector, plus the RawPool that carries the timed requests (closed with it)."""

    def __init__(self, raw_pool: RawPool | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.raw_pool = raw_pool

    async def close(self, *, abort_ssl: bool = False) -> None:
        if self.raw_pool is not None:
            self.raw_pool.close()
        await super().close(abort_ssl=abort_ssl)


def make_session(concurrency: int, connect_timeout_s: float) -> aiohttp.ClientSession:
    """The run's session. KVBENCH_CLIENT_HTTP=aiohttp sends the timed requests through aiohttp too."""
    limit = max(concurrency, 1) + 4
    raw = RawPool(limit, connect_timeout_s) if os.environ.get("KVBENCH_CLIENT_HTTP") != "aiohttp" else None
    connector = _Connector(raw, limit=limit, limit_per_host=0, ttl_dns_cache=300)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s, connect=None, sock_read=None)
    return aiohttp.ClientSession(
        connector=connector, timeout=timeout, auto_decompress=False, read_bufsize=2**18
    )
