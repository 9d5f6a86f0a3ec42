"""StreamingClient's error contract with a stand-in transport: every transport failure becomes one
error type on the record (never an exception but cancellation), the three timeouts are told
apart, secrets in a message are redacted, and bad headers are refused before anything is sent."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from kvbench.client.body import ClientConfig
from kvbench.client.record import RequestRecord
from kvbench.client.sse import SSEError
from kvbench.client.streaming import StreamingClient
from kvbench.client.transport import BadResponse, ConnectFailed, ConnectionLost, TimedTransport
from kvbench.errors import UsageError

SSE_TOKEN = b'data: {"choices":[{"text":"hi","index":0}]}\n\n'


class Scripted(TimedTransport):
    name = "scripted"

    def __init__(self, script: Callable[[Any, int], Awaitable[None]]) -> None:
        self.script = script
        self.sent: list[tuple[Any, str, bytes]] = []

    async def send(self, req: Any, request_id: str, body: bytes, sink: Any, origin_ns: int) -> None:
        self.sent.append((req, request_id, body))
        await self.script(sink, origin_ns)

    async def aclose(self) -> None:
        pass


def time_now(origin: int) -> int:
    return time.perf_counter_ns() - origin


def _client(script: Callable[[Any, int], Awaitable[None]], **cfg: Any) -> tuple[StreamingClient, Scripted]:
    tr = Scripted(script)
    config = ClientConfig(base_url="http://127.0.0.1:9", model="m", **cfg)
    return StreamingClient(
        config, None, 0, headers={"Authorization": "Bearer sk-secret-123"}, transport=tr
    ), tr


async def _send(client: StreamingClient) -> RequestRecord:
    return await client.send(RequestRecord("r1"), b"{}")


def _raises(exc: Exception) -> Callable[[Any, int], Awaitable[None]]:
    async def script(sink: Any, origin: int) -> None:
        raise exc

    return script


@pytest.mark.parametrize(
    ("exc", "error_type", "words"),
    [
        (ConnectFailed("refused"), "connect_error", "cannot connect to http://127.0.0.1:9: refused"),
        (ConnectionLost("reset"), "connect_error", "connection lost before a response"),
        (BadResponse("HTTP/0.9 garbage"), "client_error", "bad HTTP response"),
        (SSEError("an event larger than 8 MiB"), "response_too_large", "larger than"),
        (SSEError("not SSE"), "bad_sse", "not SSE"),
    ],
)
async def test_each_transport_failure_is_one_error_type(exc: Exception, error_type: str, words: str) -> None:
    client, tr = _client(_raises(exc))
    rec = await _send(client)
    assert rec.status == "error" and rec.error_type == error_type
    assert words in (rec.error_message or "")
    assert rec.end_ns is not None and rec.sent_ns is not None and rec.end_ns >= rec.sent_ns
    assert tr.sent[0][1] == "r1"


async def test_a_connection_lost_after_the_head_is_a_truncated_stream() -> None:
    async def script(sink: Any, origin: int) -> None:
        sink.head(1, 200, "OK", {"content-type": "text/event-stream"})
        sink.feed(2, SSE_TOKEN)
        raise ConnectionLost("peer closed")

    rec = await _send(_client(script)[0])
    assert rec.error_type == "stream_truncated" and "mid-stream" in (rec.error_message or "")


async def test_no_first_token_in_time_is_timeout_first_token() -> None:
    async def script(sink: Any, origin: int) -> None:
        await asyncio.sleep(30)

    rec = await _send(_client(script, first_token_timeout_s=0.05)[0])
    assert rec.error_type == "timeout_first_token" and "0.05 s" in (rec.error_message or "")


async def test_silence_after_the_first_token_is_timeout_idle() -> None:
    async def script(sink: Any, origin: int) -> None:
        sink.head(1, 200, "OK", {"content-type": "text/event-stream"})
        sink.feed(time_now(origin), SSE_TOKEN)
        await asyncio.sleep(30)

    rec = await _send(_client(script, idle_timeout_s=0.05, total_timeout_s=20)[0])
    assert rec.first_token_ns is not None
    assert rec.error_type == "timeout_idle"


async def test_a_stream_that_keeps_talking_past_the_total_is_timeout_total() -> None:
    async def script(sink: Any, origin: int) -> None:
        sink.head(1, 200, "OK", {"content-type": "text/event-stream"})
        while True:
            sink.feed(time_now(origin), SSE_TOKEN)
            await asyncio.sleep(0.01)

    rec = await _send(_client(script, idle_timeout_s=5, total_timeout_s=0.15)[0])
    assert rec.error_type == "timeout_total"


async def test_cancellation_is_recorded_and_raised() -> None:
    async def script(sink: Any, origin: int) -> None:
        await asyncio.sleep(30)

    client, _ = _client(script)
    rec = RequestRecord("r1")
    task = asyncio.create_task(client.send(rec, b"{}"))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert rec.status == "cancelled" and rec.error_type == "cancelled"


async def test_a_secret_echoed_by_the_server_is_redacted() -> None:
    rec = await _send(_client(_raises(BadResponse("echo: Bearer sk-secret-123")))[0])
    assert "sk-secret-123" not in (rec.error_message or "")


def test_fixed_headers_and_a_refused_line_break() -> None:
    client, _ = _client(_raises(BadResponse("x")))
    headers = dict(client._req.headers)
    assert headers["Accept-Encoding"] == "identity"  # a compressed stream would reach the parser
    assert headers["Authorization"] == "Bearer sk-secret-123"
    assert client._req.path == "/v1/completions"
    with pytest.raises(UsageError, match="line break"):
        StreamingClient(
            ClientConfig(base_url="http://h:1", model="m"), None, 0, headers={"X-A": "a\r\nInjected: 1"},
            transport=Scripted(_raises(BadResponse("x"))),
        )  # fmt: skip
    with pytest.raises(UsageError, match=r"target\.base_url"):
        StreamingClient(ClientConfig(base_url="ftp://h", model="m"), None, 0)
