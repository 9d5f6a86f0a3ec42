"""aiohttp as a timed transport: https targets, or any target with `target.transport: aiohttp`.

Costs a task switch per chunk (see http1.py for why http:// does not use it by default);
chunks are stamped as soon as aiohttp hands them over. Redirects are never followed and the
body is never decompressed here: the sink judges both. After `[DONE]` the rest of the body
is drained by a background task, so the connection can be reused without anyone waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from typing import Any

import aiohttp

from kvbench.client.transport.base import (
    HEAD_LIMITS,
    BadResponse,
    ConnectFailed,
    ConnectionLost,
    ResponseSink,
    TimedRequest,
    TimedTransport,
)
from kvbench.client.transport.http1 import DRAIN_S


def head_limits() -> dict[str, Any]:
    """HEAD_LIMITS as this aiohttp takes them: `max_headers` came in aiohttp 3.13.4 (before it,
    32,768 headers passed)."""
    known = inspect.signature(aiohttp.ClientSession).parameters
    return {k: v for k, v in HEAD_LIMITS.items() if k in known}


class AiohttpTransport(TimedTransport):
    """Timed requests over an aiohttp session of its own (no decompression, no shared pool)."""

    name = "aiohttp"

    def __init__(self, limit: int, connect_timeout_s: float) -> None:
        self.limit = limit
        self.connect_timeout_s = connect_timeout_s
        self._session: aiohttp.ClientSession | None = None
        self._drains: set[asyncio.Task[None]] = set()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:  # made on first use: a session belongs to the running loop
            connector = aiohttp.TCPConnector(limit=self.limit, limit_per_host=0, ttl_dns_cache=300)
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout_s, sock_read=None)
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=timeout,
                auto_decompress=False,
                read_bufsize=2**18,
                **head_limits(),
            )
        return self._session

    async def send(
        self, req: TimedRequest, request_id: str, body: bytes, sink: ResponseSink, origin_ns: int
    ) -> None:
        headers = {**dict(req.headers), "X-Request-Id": request_id}
        resp: aiohttp.ClientResponse | None = None
        try:
            resp = await self.session.post(req.url, data=body, headers=headers, allow_redirects=False)
            t = time.perf_counter_ns() - origin_ns
            if sink.head(t, resp.status, resp.reason or "", resp.headers):
                resp.close()
                return
            async for chunk in resp.content.iter_any():
                if sink.feed(time.perf_counter_ns() - origin_ns, chunk):
                    if sink.done and not resp.content.at_eof():
                        self._drain(resp)
                        resp = None
                    return
            sink.end(time.perf_counter_ns() - origin_ns)
        except aiohttp.ClientConnectorError as exc:
            raise ConnectFailed(str(exc.os_error) or type(exc).__name__) from None
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientOSError) as exc:
            raise ConnectionLost(f"{type(exc).__name__}: {exc}") from None
        except aiohttp.ClientResponseError as exc:
            raise BadResponse(f"HTTP {exc.status}: {exc.message}") from None
        except aiohttp.ClientError as exc:
            raise BadResponse(f"{type(exc).__name__}: {exc}") from None
        finally:
            if resp is not None:
                resp.release()

    def _drain(self, resp: aiohttp.ClientResponse) -> None:
        async def drain() -> None:
            try:
                async with asyncio.timeout(DRAIN_S):
                    await resp.read()
            except (TimeoutError, aiohttp.ClientError, OSError):
                resp.close()
            finally:
                resp.release()

        task = asyncio.get_running_loop().create_task(drain())
        self._drains.add(task)
        task.add_done_callback(self._drains.discard)

    async def aclose(self) -> None:
        for task in list(self._drains):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._session is not None:
            await self._session.close()
            self._session = None
