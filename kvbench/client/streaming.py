"""StreamingClient: one timed request in, one RequestRecord out, over a chosen TimedTransport.

Timing rules (they are the point of a benchmark):
- ONE clock, time.perf_counter_ns() (CLOCK_MONOTONIC on Linux, so comparable
  with a server on the same host), stamped relative to the run's origin.
- The body is serialised before `sent_ns` is taken; nothing is copied after.
- A chunk is stamped the moment it leaves the socket, before it is parsed (the transport's job).
- A failed request is a record with an error type, never an exception; only
  cancellation propagates, after the record is marked `cancelled`.
Timeouts, cancellation and the mapping of transport failures to error types are written here
once, for every transport. Secrets the server echoes in an error are redacted here too.
Where the http1 transport reads kernel receive stamps (transport/kstamp.py), a chunk's time is
when it reached the socket; `clock_manifest()` says which clock the run's times came from.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kvbench import __version__
from kvbench.baseurl import BaseURL, Redactor, auth_headers
from kvbench.client.body import ClientConfig
from kvbench.client.record import RequestRecord
from kvbench.client.sse import SSEError
from kvbench.client.stream import ResponseStream
from kvbench.client.transport import (
    BadResponse,
    ConnectFailed,
    ConnectionLost,
    TimedRequest,
    TimedTransport,
    choose,
    make_transport,
)
from kvbench.errors import UsageError

DEFAULT_LIMIT = 64
_FIXED = {"user-agent", "accept", "accept-encoding", "content-type", "host", "content-length", "x-request-id"}


class StreamingClient:
    """Issues the timed requests of a run.

    `session` is the run's untimed aiohttp session: only its limits are read (pool size, connect
    timeout) and it stays available to callers as `.session`. The timed transport is chosen from
    `cfg.transport` and the URL scheme (kvbench.client.transport.choose), or passed as `transport`.
    Call `aclose()` when done (the transports' connections).
    """

    def __init__(
        self,
        cfg: ClientConfig,
        session: Any,
        origin_ns: int,
        headers: dict[str, str] | None = None,
        *,
        transport: TimedTransport | None = None,
    ) -> None:
        self.session = session
        self.origin_ns = origin_ns
        self.user_headers = dict(headers or {})
        self._injected = transport
        self._transports: dict[str, TimedTransport] = {}
        connector = getattr(session, "connector", None)
        self._limit = int(getattr(connector, "limit", 0) or DEFAULT_LIMIT)
        timeout = getattr(session, "timeout", None)
        self._connect_s = float(getattr(timeout, "sock_connect", None) or 10.0)
        self.merged_first = 0  # kernel-stamped first-token reads that also held later tokens
        self.cfg = cfg

    @property
    def cfg(self) -> ClientConfig:
        return self._cfg

    @cfg.setter
    def cfg(self, cfg: ClientConfig) -> None:
        """A new config (the target moved, or a different model): rebuild the fixed request parts."""
        try:
            base, headers = auth_headers(cfg.base_url, self.user_headers)
            url = BaseURL.parse(base + cfg.url[len(cfg.base_url) :])
            kind = choose(cfg.transport, url.scheme)
        except ValueError as exc:
            raise UsageError(
                str(exc) if str(exc).startswith("target.") else f"target.base_url: {exc}"
            ) from None
        fixed = {
            "User-Agent": f"kvbench/{__version__}",
            "Accept": "*/*",
            "Accept-Encoding": "identity",  # a compressed stream would be garbage to the SSE parser
            "Content-Type": "application/json",
        }
        extra = {k: v for k, v in headers.items() if k.lower() not in _FIXED}
        fixed.update({k.title(): v for k, v in headers.items() if k.lower() in ("content-type", "accept")})
        pairs = tuple({**fixed, **extra}.items())
        if any(c in k + v for k, v in pairs for c in "\r\n"):
            raise UsageError("target.headers: a header name or value contains a line break")
        self._cfg = cfg
        self.base_url = base  # without credentials: safe to print
        self._req = TimedRequest(url.clean, url.host_header, url.address, url.path or "/", pairs)
        self._redact = Redactor(self.user_headers, cfg.base_url)
        if self._injected is not None:
            self.transport = self._injected
        else:
            if kind not in self._transports:
                self._transports[kind] = make_transport(kind, self._limit, self._connect_s)
            self.transport = self._transports[kind]

    def now(self) -> int:
        return time.perf_counter_ns() - self.origin_ns

    def clock_manifest(self) -> dict[str, Any]:
        """`clock_source` and the kernel-stamp calibration, for the run's manifest."""
        from kvbench.client.transport.http1 import Http1Transport

        if not isinstance(self.transport, Http1Transport):
            info: dict[str, Any] = {
                "clock_source": "user",
                "reason": "timed requests go through aiohttp (https://, or target.transport: aiohttp)",
            }
        else:
            info = self.transport.clock_info()
            if info["clock_source"] == "kernel":
                # these TTFTs are the later token's arrival: an upper bound (kstamp's docstring)
                info["first_token_reads_with_later_tokens"] = self.merged_first
        return {"clock_source": info["clock_source"], "clock": info}

    async def aclose(self) -> None:
        for transport in self._transports.values():
            await transport.aclose()
        self._transports.clear()

    async def send(self, rec: RequestRecord, body: bytes) -> RequestRecord:
        """Issue one streaming request; fill and return `rec`. Never raises but CancelledError."""
        cfg = self._cfg
        loop = asyncio.get_running_loop()
        first_s = min(cfg.first_token_timeout_s, cfg.total_timeout_s)
        now = loop.time()
        total_deadline = now + cfg.total_timeout_s
        stream = ResponseStream(rec, cfg)
        watch: list[Any] = [None, False]  # the idle watchdog's timer handle; whether it fired
        rec.sent_ns = self.now()
        try:
            async with asyncio.timeout_at(now + first_s) as deadline:

                def on_first() -> None:
                    deadline.reschedule(total_deadline)
                    if cfg.idle_timeout_s < cfg.total_timeout_s:
                        self._watch_idle(loop, stream, deadline, watch, int(cfg.idle_timeout_s * 1e9))

                stream.on_first = on_first
                await self.transport.send(self._req, rec.request_id, body, stream, self.origin_ns)
        except TimeoutError:
            rec.end_ns = self.now()
            if rec.first_token_ns is None:
                rec.fail("timeout_first_token", f"no content token within {first_s:g} s")
            elif watch[1]:
                rec.fail(
                    "timeout_idle", f"no response bytes for {cfg.idle_timeout_s:g} s after the first token"
                )
            else:
                rec.fail("timeout_total", f"request not finished within {cfg.total_timeout_s:g} s")
        except ConnectFailed as exc:
            rec.end_ns = self.now()
            rec.fail("connect_error", f"cannot connect to {self.base_url}: {exc}")
        except ConnectionLost as exc:
            rec.end_ns = self.now()
            if rec.headers_ns is None:
                rec.fail("connect_error", f"connection lost before a response: {exc}")
            else:
                rec.fail("stream_truncated", f"connection closed mid-stream: {exc}")
        except BadResponse as exc:
            rec.end_ns = self.now()
            rec.fail("client_error", f"bad HTTP response: {exc}")
        except SSEError as exc:
            rec.end_ns = self.now()
            rec.fail("response_too_large" if "larger than" in str(exc) else "bad_sse", str(exc))
        except asyncio.CancelledError:
            rec.end_ns = self.now()
            rec.fail("cancelled", "cancelled (run interrupted)", status="cancelled")
            raise
        finally:
            if watch[0] is not None:
                watch[0].cancel()
            stream.close()
            self.merged_first += stream.merged
            if rec.error_message:  # echoed credentials of any kind, not only the ones configured
                rec.error_message = self._redact(rec.error_message)
        return rec

    def _watch_idle(
        self,
        loop: asyncio.AbstractEventLoop,
        stream: ResponseStream,
        deadline: Any,
        watch: list[Any],
        idle_ns: int,
    ) -> None:
        """Fire the timeout when no chunk came for idle_ns; wakes once per idle period, not per chunk."""

        def check() -> None:
            gap = self.now() - stream.last_t
            if gap >= idle_ns:
                watch[1] = True
                deadline.reschedule(loop.time())
            else:
                watch[0] = loop.call_later((idle_ns - gap) / 1e9, check)

        watch[0] = loop.call_later(idle_ns / 1e9, check)
