"""The client against an in-process aiohttp server on port 0 that records its own send times."""

import asyncio
import json
import time

import pytest
from aiohttp import web

from kvbench.client import ClientConfig, RequestRecord, StreamingClient, make_session

ROLE_DELAY = 0.30  # role-only chunk this long before the first content
CONTENT_DELAY = 0.25


def chunk(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


class Server:
    def __init__(self):
        self.truth = {}
        self.mode = "ok"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        rid = request.headers["X-Request-Id"]
        body = await request.json()
        received = time.perf_counter_ns()
        mode = self.mode
        if mode == "http500":
            return web.json_response({"error": {"message": "boom"}}, status=500)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)  # headers go out at once: TTFT must not be taken here
        await asyncio.sleep(ROLE_DELAY)
        await resp.write(chunk({"choices": [{"index": 0, "delta": {"role": "assistant"}}]}))
        if mode == "stall":
            await asyncio.sleep(1.5)
        await asyncio.sleep(CONTENT_DELAY)
        first = time.perf_counter_ns()
        await resp.write(chunk({"choices": [{"index": 0, "delta": {"content": "Hello"}}]}))
        if mode == "bad_json":
            await resp.write(b"data: {not json\n\n")
        if mode == "bad_sse":
            await resp.write(b"this is not sse\n\n")
        if mode == "truncate":
            request.transport.close()
            return resp
        for word in [" wor", "ld"]:
            await asyncio.sleep(0.01)
            await resp.write(chunk({"choices": [{"index": 0, "delta": {"content": word}}]}))
        await resp.write(chunk({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}))
        if body.get("stream_options", {}).get("include_usage"):
            await resp.write(
                chunk(
                    {
                        "choices": [],
                        "usage": {
                            "prompt_tokens": 11,
                            "completion_tokens": 3,
                            "prompt_tokens_details": {"cached_tokens": 8},
                        },
                    }
                )
            )
        if mode != "no_done":
            await resp.write(b"data: [DONE]\n\n")
        self.truth[rid] = (received, first)
        return resp


@pytest.fixture
async def server():
    srv = Server()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", srv.handle)
    app.router.add_post("/v1/completions", srv.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    srv.base_url = f"http://127.0.0.1:{port}"
    yield srv
    await runner.cleanup()


async def send(srv, rid="r1", **cfg_kw):
    origin = time.perf_counter_ns()
    cfg = ClientConfig(base_url=srv.base_url, model="m", api="chat", **cfg_kw)
    async with make_session(4, 5) as session:
        client = StreamingClient(cfg, session, origin)
        rec = await client.send(RequestRecord(request_id=rid), b'{"stream_options":{"include_usage":true}}')
    return rec, origin


async def test_ttft_matches_server_first_content_not_headers_or_role_chunk(server):
    rec, origin = await send(server)
    assert rec.ok, rec.error_message
    _received, first = server.truth["r1"]
    client_first_abs = rec.first_token_ns + origin
    # the client stamps the first CONTENT chunk: within a noisy-machine tolerance of the server's write
    assert 0 <= client_first_abs - first < 60e6
    # ...and not at the headers or at the role-only chunk, which came >= 250 ms earlier
    assert rec.first_token_ns - rec.headers_ns > 0.2e9
    ttft = (rec.first_token_ns - rec.sent_ns) / 1e9
    assert ttft >= ROLE_DELAY + CONTENT_DELAY - 0.01
    assert rec.output_text == "Hello world"
    assert rec.cached_tokens == 8 and rec.prompt_tokens_server == 11 and rec.output_tokens == 3
    assert len(rec.token_ns) == 3
    row = rec.to_row()
    assert row["ttft_ms"] == pytest.approx(ttft * 1000)
    assert row["itl_ms_mean"] > 0


@pytest.mark.parametrize(
    ("mode", "error_type"),
    [
        ("http500", "http_500"),
        ("bad_json", "bad_json"),
        ("bad_sse", "bad_sse"),
        ("truncate", "stream_truncated"),
    ],
)
async def test_failures_become_records(server, mode, error_type):
    server.mode = mode
    rec, _ = await send(server)
    assert rec.status == "error"
    assert rec.error_type == error_type
    if mode != "http500":
        assert rec.output_chars == len("Hello")  # partial output kept


async def test_missing_done_with_finish_reason_is_ok(server):
    server.mode = "no_done"
    rec, _ = await send(server)
    assert rec.ok


async def test_first_token_timeout(server):
    server.mode = "stall"
    rec, _ = await send(server, first_token_timeout_s=0.4)
    assert rec.error_type == "timeout_first_token"


async def test_connect_error():
    cfg = ClientConfig(base_url="http://127.0.0.1:9", model="m")
    async with make_session(1, 2) as session:
        rec = await StreamingClient(cfg, session, time.perf_counter_ns()).send(RequestRecord("x"), b"{}")
    assert rec.error_type == "connect_error"


async def test_cancel_marks_record(server):
    server.mode = "stall"
    cfg = ClientConfig(base_url=server.base_url, model="m", api="chat")
    rec = RequestRecord("c1")
    async with make_session(1, 2) as session:
        task = asyncio.create_task(StreamingClient(cfg, session, time.perf_counter_ns()).send(rec, b"{}"))
        await asyncio.sleep(0.4)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert rec.status == "cancelled" and rec.error_type == "cancelled"
