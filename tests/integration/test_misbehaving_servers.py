"""Small servers that behave like real gateways gone wrong, against both timed transports.

Each server is a few lines of asyncio on port 0 writing exact bytes: a stream held open after
`[DONE]`, a stall after the first token, response heads with bare `\\n` line ends, a JSON
answer to a streaming request, a compressed stream nobody asked for, an API key echoed in an
error, credentials that must become Basic auth with a clean Host header.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import time
from collections.abc import Awaitable, Callable

import pytest

from kvbench.client import ClientConfig, RequestRecord, StreamingClient, make_session
from kvbench.client.control import ControlClient
from kvbench.errors import TargetUnreachable, UsageError
from kvbench.run.runner import RunOptions, run_scenario
from kvbench.scenario import load_scenario

TRANSPORTS = ["http1", "aiohttp"]
TOKENS = [{"choices": [{"index": 0, "text": w}]} for w in ("Hel", "lo", " there")]
USAGE = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}}


def sse(*events: object) -> bytes:
    return b"".join(
        b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n" for e in events
    )


def chunk(data: bytes, eol: bytes = b"\r\n") -> bytes:
    return b"%x%b%b%b" % (len(data), eol, data, eol)


Handler = Callable[[bytes, asyncio.StreamWriter], Awaitable[None]]


class RawServer:
    """Reads each HTTP/1.1 request (head + Content-Length body) and hands it to `handler`."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.heads: list[bytes] = []
        self.writers: list[asyncio.StreamWriter] = []

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.heads.append(head)
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length)
                await self.handler(head + body, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> RawServer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        for w in self.writers:
            w.close()
        self.server.close()


async def send(url: str, transport: str, headers: dict[str, str] | None = None, **cfg_kw) -> RequestRecord:
    cfg = ClientConfig(base_url=url, model="m", transport=transport, **cfg_kw)
    async with make_session(1, 5) as session:
        client = StreamingClient(cfg, session, time.perf_counter_ns(), headers)
        try:
            return await client.send(RequestRecord("r"), b"{}")
        finally:
            await client.aclose()


SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_done_ends_the_record_and_a_held_stream_is_not_waited_for(transport):
    async def held(_req, w):
        w.write(SSE_HEAD + chunk(sse(*TOKENS, USAGE)))
        await asyncio.sleep(0.05)
        w.write(chunk(b"data: [DONE]\n\n"))  # ... and never the last chunk
        await asyncio.sleep(30)

    async with RawServer(held) as srv:
        t0 = time.monotonic()
        rec = await send(srv.url, transport, total_timeout_s=20)
        took = time.monotonic() - t0
    assert rec.ok, rec.error_message
    assert took < 1.0  # not total_s
    assert rec.end_ns - rec.token_ns[-1] >= 40e6  # end = the [DONE] event, 50 ms after the tokens
    assert rec.output_tokens == 3


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_stall_after_the_first_token_is_an_idle_timeout(transport):
    async def stall(_req, w):
        w.write(SSE_HEAD + chunk(sse(TOKENS[0])))
        await asyncio.sleep(30)

    async with RawServer(stall) as srv:
        t0 = time.monotonic()
        rec = await send(srv.url, transport, idle_timeout_s=0.3, total_timeout_s=20)
    assert rec.error_type == "timeout_idle" and "0.3 s" in rec.error_message
    assert 0.25 < time.monotonic() - t0 < 2.0


@pytest.mark.parametrize("framing", ["chunked", "close"])
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_bare_lf_heads_are_read_as_aiohttp_reads_them(transport, framing):
    body = sse(*TOKENS, USAGE) + b"data: [DONE]\n\n"

    async def bare(_req, w):
        if framing == "chunked":
            w.write(b"HTTP/1.1 200 OK\nContent-Type: text/event-stream\nTransfer-Encoding: chunked\n\n")
            eol = b"\n" if transport == "http1" else b"\r\n"  # aiohttp wants CRLF in chunk framing
            w.write(chunk(body, eol) + b"0" + eol + eol)
        else:
            w.write(b"HTTP/1.1 200 OK\nContent-Type: text/event-stream\nConnection: close\n\n" + body)
            w.close()

    async with RawServer(bare) as srv:
        rec = await send(srv.url, transport, first_token_timeout_s=3)
    assert rec.ok, (rec.error_type, rec.error_message)
    assert rec.output_tokens == 3


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_json_answer_to_a_stream_request_is_not_streamed(transport):
    answer = json.dumps({"choices": [{"index": 0, "text": "Hello there"}], "usage": {"completion_tokens": 3}})

    async def plain(_req, w):
        w.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%b"
            % (len(answer), answer.encode())
        )

    async with RawServer(plain) as srv:
        rec = await send(srv.url, transport)
    assert rec.error_type == "not_streamed"
    assert "stream: true" in rec.error_message


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_compressed_stream_is_its_own_error_never_sse_garbage(transport):
    payload = gzip.compress(sse(*TOKENS) + b"data: [DONE]\n\n")

    async def compressing(req, w):
        assert b"accept-encoding: identity" in req.lower()  # kvbench asked for none
        w.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\n"
            b"Content-Length: %d\r\n\r\n%b" % (len(payload), payload)
        )

    async with RawServer(compressing) as srv:
        rec = await send(srv.url, transport)
    assert rec.error_type == "compressed" and "gzip" in rec.error_message


KEY = "sk-live-0123456789abcdef"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_echoed_key_is_redacted(transport):
    async def echo(req, w):
        auth = next(line for line in req.split(b"\r\n") if line.lower().startswith(b"authorization"))
        body = json.dumps({"error": {"message": f"invalid token: {auth.decode()}"}}).encode()
        w.write(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body))

    async with RawServer(echo) as srv:
        rec = await send(srv.url, transport, headers={"Authorization": f"Bearer {KEY}"})
    assert rec.error_type == "http_401"
    assert KEY not in rec.error_message and "<redacted>" in rec.error_message
    assert KEY not in json.dumps(rec.to_row())


async def test_control_calls_redact_an_echoed_key_too():
    async def echo(req, w):
        body = json.dumps({"detail": f"bad key {KEY}"}).encode()
        w.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body))

    async with RawServer(echo) as srv, make_session(1, 5) as session:
        status, body = await ControlClient(session, srv.url, {"Authorization": f"Bearer {KEY}"}).request(
            "GET", "/x"
        )
    assert status == 400 and body == {"detail": "bad key <redacted>"}


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_url_credentials_become_basic_auth_with_a_clean_host(transport):
    ok = SSE_HEAD + chunk(sse(*TOKENS, USAGE) + b"data: [DONE]\n\n") + b"0\r\n\r\n"

    async def check(_req, w):
        w.write(ok)

    async with RawServer(check) as srv:
        port = srv.url.rsplit(":", 1)[1]
        rec = await send(srv.url.replace("http://", "http://us%40er:p%3Ass@"), transport)
        head = srv.heads[0].decode().lower()
    assert rec.ok, rec.error_message
    assert f"\r\nhost: 127.0.0.1:{port}\r\n" in head
    assert "authorization: basic " + base64.b64encode(b"us@er:p:ss").decode().lower() in head


async def test_ipv6_host_header_has_brackets():
    from kvbench.baseurl import BaseURL

    url = BaseURL.parse("http://u:p@[::1]:8000/base")
    assert (
        url.host_header == "[::1]:8000"
        and url.address == ("::1", 8000)
        and url.clean == "http://[::1]:8000/base"
    )


def test_transport_choice_is_explicit(monkeypatch):
    from kvbench.client.transport import choose

    assert choose("auto", "http") == "http1" and choose("auto", "https") == "aiohttp"
    assert choose("aiohttp", "http") == "aiohttp"
    with pytest.raises(ValueError, match="http1 carries http:// only"):
        choose("http1", "https")
    monkeypatch.setenv("KVBENCH_CLIENT_HTTP", "aiohttp")  # the deprecated alias still works
    assert choose("auto", "http") == "aiohttp"
    with pytest.raises(UsageError, match=r"target\.transport"):
        StreamingClient(ClientConfig(base_url="https://x", model="m", transport="http1"), None, 0)


async def test_probe_stops_a_run_the_untimed_calls_would_have_started(tmp_path):
    """/v1/models and /tokenize answer; every timed request would be compressed: exit 3 before phase 1."""
    models = json.dumps({"data": [{"id": "m", "owned_by": "x"}]}).encode()

    async def server(req, w):
        if req.startswith(b"GET /v1/models"):
            w.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%b"
                % (len(models), models)
            )
        elif req.startswith(b"POST /v1/completions"):
            payload = gzip.compress(sse(*TOKENS) + b"data: [DONE]\n\n")
            w.write(
                b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Type: text/event-stream\r\n"
                b"Content-Length: %d\r\n\r\n%b" % (len(payload), payload)
            )
        else:
            w.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")

    async with RawServer(server) as srv:
        scn, _ = load_scenario("throughput", {"target.base_url": srv.url, "cache.reset": "never"})
        with pytest.raises(TargetUnreachable, match=r"timed streaming request fails.*compressed") as exc:
            await run_scenario(scn, RunOptions(output_dir=tmp_path, quiet=True, report=False))
    assert exc.value.exit_code == 3
    assert not list(tmp_path.iterdir())  # stopped before a run directory was made
