"""The aiohttp timed transport against a local aiohttp server: stamps in order, the request id
header, a sink that stops early, redirects not followed, the rest of a finished body drained in
the background, and transport failures as the transport's own error kinds."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from aiohttp import web

from kvbench.client.transport.aiohttp import AiohttpTransport, head_limits
from kvbench.client.transport.base import HEAD_LIMITS, ConnectFailed, ConnectionLost, TimedRequest


class Sink:
    def __init__(self, stop_on_head: bool = False, done_after: bytes | None = None) -> None:
        self.stop_on_head = stop_on_head
        self.done_after = done_after
        self.status: int | None = None
        self.headers: Mapping[str, str] = {}
        self.chunks: list[tuple[int, bytes]] = []
        self.ended: int | None = None
        self.done = False
        self.t_head = 0

    def head(self, t: int, status: int, reason: str, headers: Mapping[str, str]) -> bool:
        self.t_head, self.status, self.headers = t, status, headers
        return self.stop_on_head

    def feed(self, t: int, data: bytes) -> bool:
        self.chunks.append((t, bytes(data)))
        if self.done_after is not None and self.done_after in b"".join(c for _, c in self.chunks):
            self.done = True
            return True
        return False

    def end(self, t: int) -> None:
        self.ended = t

    def stamp(self, t_user: int, kernel: bool) -> None:
        pass

    @property
    def body(self) -> bytes:
        return b"".join(c for _, c in self.chunks)


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, dict[str, Any]]]:
    seen: dict[str, Any] = {}

    async def stream(request: web.Request) -> web.StreamResponse:
        seen["request_id"] = request.headers.get("X-Request-Id")
        seen["body"] = await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(3):
            await resp.write(f"data: {i}\n\n".encode())
            await asyncio.sleep(0.01)
        await resp.write(b"data: [DONE]\n\n")
        await asyncio.sleep(0.05)
        await resp.write(b"trailing bytes nobody waits for")
        await resp.write_eof()
        return resp

    async def moved(request: web.Request) -> web.Response:
        raise web.HTTPFound("/elsewhere")

    async def drop(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Length": "1000"})
        await resp.prepare(request)
        await resp.write(b"partial")
        assert request.transport is not None
        request.transport.close()  # the server goes away mid-body
        return resp

    app = web.Application()
    app.router.add_post("/stream", stream)
    app.router.add_post("/moved", moved)
    app.router.add_post("/drop", drop)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


def _req(base: str, path: str) -> TimedRequest:
    host = base.split("//", 1)[1]
    return TimedRequest(
        f"{base}{path}",
        host,
        ("127.0.0.1", int(host.split(":")[1])),
        path,
        (("Content-Type", "application/json"),),
    )


async def test_a_streamed_response_is_stamped_in_order(server: tuple[str, dict[str, Any]]) -> None:
    base, seen = server
    tr = AiohttpTransport(limit=4, connect_timeout_s=5)
    sink = Sink()
    origin = time.perf_counter_ns()
    try:
        await tr.send(_req(base, "/stream"), "req-1", b'{"x": 1}', sink, origin)
    finally:
        await tr.aclose()
    assert seen == {"request_id": "req-1", "body": b'{"x": 1}'}
    assert sink.status == 200 and sink.headers["Content-Type"] == "text/event-stream"
    assert sink.body.startswith(b"data: 0\n\ndata: 1\n\ndata: 2\n\ndata: [DONE]")
    stamps = [sink.t_head, *(t for t, _ in sink.chunks), sink.ended]
    assert all(s is not None and s >= 0 for s in stamps)
    assert stamps == sorted(stamps)  # head before body, body before the end


async def test_a_finished_record_leaves_the_rest_to_a_background_drain(
    server: tuple[str, dict[str, Any]],
) -> None:
    base, _ = server
    tr = AiohttpTransport(limit=4, connect_timeout_s=5)
    sink = Sink(done_after=b"[DONE]")
    try:
        await tr.send(_req(base, "/stream"), "r", b"{}", sink, 0)
        assert sink.done and sink.ended is None
        assert b"trailing" not in sink.body  # returned before the server's last bytes
        for _ in range(200):
            if not tr._drains:
                break
            await asyncio.sleep(0.01)
        assert not tr._drains  # the drain task finished and removed itself
    finally:
        await tr.aclose()


async def test_redirects_are_not_followed_and_the_sink_can_stop_at_the_head(
    server: tuple[str, dict[str, Any]],
) -> None:
    base, _ = server
    tr = AiohttpTransport(limit=4, connect_timeout_s=5)
    sink = Sink(stop_on_head=True)
    try:
        await tr.send(_req(base, "/moved"), "r", b"{}", sink, 0)
    finally:
        await tr.aclose()
    assert sink.status == 302 and sink.headers["Location"] == "/elsewhere"
    assert sink.chunks == [] and sink.ended is None


async def test_a_server_that_goes_away_mid_body_is_connection_lost(
    server: tuple[str, dict[str, Any]],
) -> None:
    base, _ = server
    tr = AiohttpTransport(limit=4, connect_timeout_s=5)
    try:
        with pytest.raises(ConnectionLost):
            await tr.send(_req(base, "/drop"), "r", b"{}", Sink(), 0)
    finally:
        await tr.aclose()


async def test_nothing_listening_is_connect_failed() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: refused
        tr = AiohttpTransport(limit=1, connect_timeout_s=2)
        try:
            with pytest.raises(ConnectFailed):
                await tr.send(_req(f"http://127.0.0.1:{port}", "/x"), "r", b"{}", Sink(), 0)
        finally:
            await tr.aclose()
    await tr.aclose()  # closing twice is harmless


def test_head_limits_are_a_subset_of_the_shared_ones() -> None:
    limits = head_limits()
    assert limits.items() <= HEAD_LIMITS.items()
    assert "max_line_size" in limits and "max_field_size" in limits
