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
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

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


def build_body(cfg: ClientConfig, prompt: str) -> bytes:
    body: dict[str, Any] = {
        "model": cfg.model,
        "max_tokens": cfg.max_tokens,
        "temperature": cfg.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if cfg.api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if cfg.ignore_eos:
        body["ignore_eos"] = True
    body.update(cfg.extra_body)
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


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


class StreamingClient:
    """Holds the run's single aiohttp session (keep-alive, connection limit >= concurrency)."""

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

    def now(self) -> int:
        return time.perf_counter_ns() - self.origin_ns

    async def send(self, rec: RequestRecord, body: bytes) -> RequestRecord:
        """Issue one streaming request; fill and return `rec`. Never raises but CancelledError."""
        cfg = self.cfg
        headers = {**self.headers, "X-Request-Id": rec.request_id}
        rec.sent_ns = sent = self.now()
        loop = asyncio.get_running_loop()
        origin = self.origin_ns
        first_deadline = loop.time() + min(cfg.first_token_timeout_s, cfg.total_timeout_s)
        total_deadline = loop.time() + cfg.total_timeout_s
        parser = SSEParser(max_event_bytes=cfg.max_event_bytes)
        pieces: list[str] = []
        kept = 0
        done = False
        try:
            async with asyncio.timeout_at(first_deadline) as deadline:
                async with self.session.post(cfg.url, data=body, headers=headers) as resp:
                    rec.headers_ns = self.now()
                    rec.http_status = resp.status
                    if resp.status >= 400:
                        detail = (await resp.content.read(2048)).decode("utf-8", "replace")
                        rec.fail(f"http_{resp.status}", _error_detail(detail) or resp.reason or "")
                        rec.end_ns = self.now()
                        return rec
                    async for chunk in resp.content.iter_any():
                        t = time.perf_counter_ns() - origin
                        for ev in parser.feed(chunk):
                            data = ev.data
                            if data == "[DONE]":
                                done = True
                                continue
                            try:
                                obj = json.loads(data)
                            except ValueError:
                                rec.fail("bad_json", f"data line is not JSON: {data[:120]!r}")
                                rec.end_ns = t
                                return rec
                            if not isinstance(obj, dict):
                                rec.fail("bad_json", f"data line is not a JSON object: {data[:120]!r}")
                                rec.end_ns = t
                                return rec
                            if "error" in obj and not obj.get("choices"):
                                err = obj["error"]
                                msg = err.get("message", str(err)) if isinstance(err, dict) else str(err)
                                rec.fail("server_error", msg)
                                rec.end_ns = t
                                return rec
                            text = _chunk_text(obj)
                            if text:
                                if rec.first_token_ns is None:
                                    rec.first_token_ns = t
                                    deadline.reschedule(total_deadline)
                                rec.token_ns.append(t)
                                rec.output_chars += len(text)
                                if kept < OUTPUT_TEXT_KEEP:
                                    pieces.append(text)
                                    kept += len(text)
                            choices = obj.get("choices")
                            if choices and choices[0].get("finish_reason"):
                                rec.finish_reason = choices[0]["finish_reason"]
                            usage = obj.get("usage")
                            if usage:
                                _apply_usage(rec, usage)
                        if parser.unknown_lines:
                            rec.fail("bad_sse", "server sent a line that is not an SSE field")
                            rec.end_ns = t
                            return rec
                    rec.end_ns = self.now()
                    if not done and rec.finish_reason is None:
                        rec.fail("stream_truncated", "stream ended without [DONE] or a finish_reason")
                    elif not done and parser.has_partial:
                        rec.fail("stream_truncated", "stream ended inside an event")
        except TimeoutError:
            rec.end_ns = self.now()
            if rec.first_token_ns is None:
                rec.fail(
                    "timeout_first_token",
                    f"no content token within {min(cfg.first_token_timeout_s, cfg.total_timeout_s):g} s",
                )
            else:
                rec.fail("timeout_total", f"request not finished within {cfg.total_timeout_s:g} s")
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
            rec.output_text = "".join(pieces)[:OUTPUT_TEXT_KEEP]
            if rec.output_tokens is None and rec.token_ns:
                rec.output_tokens = len(rec.token_ns)
            _ = sent
        return rec


def _apply_usage(rec: RequestRecord, usage: dict[str, Any]) -> None:
    if (pt := usage.get("prompt_tokens")) is not None:
        rec.prompt_tokens_server = int(pt)
    if (ct := usage.get("completion_tokens")) is not None:
        rec.output_tokens = int(ct)
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and details.get("cached_tokens") is not None:
        rec.cached_tokens = int(details["cached_tokens"])


def _error_detail(body: str) -> str:
    try:
        obj = json.loads(body)
    except ValueError:
        return body.strip()[:300]
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            return str(err.get("message") or err)[:300]
        return str(err)[:300]
    return body.strip()[:300]


def make_session(concurrency: int, connect_timeout_s: float) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=max(concurrency, 1) + 4, limit_per_host=0, ttl_dns_cache=300)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s, connect=None, sock_read=None)
    return aiohttp.ClientSession(
        connector=connector, timeout=timeout, auto_decompress=False, read_bufsize=2**18
    )
