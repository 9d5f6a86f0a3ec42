"""Small servers that behave like real gateways gone wrong, against both timed transports.

Each server is a few lines of asyncio on port 0 writing exact bytes: a stream held open after
`[DONE]`, a stall after the first token, response heads with bare `\\n` line ends, a JSON
answer to a streaming request, a compressed stream nobody asked for, an API key echoed in an
error, credentials that must become Basic auth with a clean Host header; and one view of a
server: large response heads judged alike on every path, every error shape a failed row, error
pages that keep their title, a timed probe that stops runs every request would fail.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import time
from collections.abc import Awaitable, Callable

import aiohttp
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


# -- one view of a server: the timed and the untimed paths accept the same responses ------------------

MODELS = json.dumps({"data": [{"id": "m", "owned_by": "x"}]}).encode()
OK_STREAM = SSE_HEAD + chunk(sse(*TOKENS, USAGE) + b"data: [DONE]\n\n") + b"0\r\n\r\n"


def json_answer(body: bytes, status: bytes = b"200 OK", extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 %b\r\nContent-Type: application/json\r\n%bContent-Length: %d\r\n\r\n%b" % (
        status,
        extra,
        len(body),
        body,
    )


@pytest.mark.parametrize("size", [64 * 1024, 200 * 1024])
async def test_a_large_response_header_is_judged_alike_on_every_path(size):
    """A 64 KiB header (a gateway's trace or cookie) passes every path; a 200 KiB one fails every path."""
    big = b"X-Trace: " + b"t" * size + b"\r\n"

    async def server(req, w):
        if req.startswith(b"GET /v1/models"):
            w.write(json_answer(MODELS, extra=big))
        else:
            w.write(OK_STREAM.replace(b"\r\n\r\n", b"\r\n" + big + b"\r\n", 1))

    async with RawServer(server) as srv:
        recs = [await send(srv.url, transport) for transport in TRANSPORTS]
        async with make_session(1, 5) as session:
            try:
                status, body = await ControlClient(session, srv.url, {}).request("GET", "/v1/models")
            except aiohttp.ClientResponseError as exc:
                status, body = None, str(exc)
    if size == 64 * 1024:
        assert [r.ok for r in recs] == [True, True] and status == 200 and body["data"][0]["id"] == "m"
    else:
        assert [r.error_type for r in recs] == ["client_error", "client_error"], [
            r.error_message for r in recs
        ]
        assert status is None and "131072" in body  # the one limit, named


ERROR_SHAPES = {
    "openai-nested": {"error": {"message": "prompt too long", "type": "BadRequestError", "code": 400}},
    "vllm-flat": {"object": "error", "message": "prompt too long", "type": "BadRequestError", "code": 400},
    "tgi-string": {"error": "prompt too long", "error_type": "validation"},
}


@pytest.mark.parametrize("shape", list(ERROR_SHAPES))
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_every_error_shape_in_a_200_stream_is_a_failed_row_with_its_message(transport, shape):
    async def server(_req, w):
        w.write(SSE_HEAD + chunk(sse(TOKENS[0], ERROR_SHAPES[shape]) + b"data: [DONE]\n\n") + b"0\r\n\r\n")

    async with RawServer(server) as srv:
        rec = await send(srv.url, transport)
    assert (rec.status, rec.error_type, rec.error_message) == ("error", "server_error", "prompt too long")


@pytest.mark.parametrize("shape", list(ERROR_SHAPES))
async def test_every_error_shape_as_a_json_answer_is_a_server_error(shape):
    async def server(_req, w):
        w.write(json_answer(json.dumps(ERROR_SHAPES[shape]).encode()))

    async with RawServer(server) as srv:
        rec = await send(srv.url, "http1")
    assert (rec.error_type, rec.error_message) == ("server_error", "prompt too long")


NGINX_502 = (
    b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    b"<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx/1.22.1</center>\r\n"
    b"</body>\r\n</html>\r\n"
)


async def run_against_raw(srv: RawServer, tmp_path, **overrides):
    scn, _ = load_scenario("throughput", {"target.base_url": srv.url, "cache.reset": "never", **overrides})
    return await run_scenario(scn, RunOptions(output_dir=tmp_path, quiet=True, report=False))


async def test_an_error_page_on_models_keeps_its_title_in_the_hint(tmp_path):
    async def server(_req, w):
        w.write(
            b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%b"
            % (len(NGINX_502), NGINX_502)
        )

    async with RawServer(server) as srv:
        with pytest.raises(TargetUnreachable) as exc:
            await run_against_raw(srv, tmp_path)
    msg = str(exc.value)
    assert "HTTP 502 (502 Bad Gateway)" in msg and "--model" not in msg and "down or not ready" in msg
    assert exc.value.exit_code == 3 and "\n" not in msg


async def test_probe_stops_a_run_whose_streams_are_cut(tmp_path):
    """Every stream ends without [DONE] or a finish_reason: tried 3 times, then exit 3, one line."""
    posts = []

    async def server(req, w):
        if req.startswith(b"GET /v1/models"):
            w.write(json_answer(MODELS))
        elif req.startswith(b"POST /v1/completions"):
            posts.append(req)
            w.write(SSE_HEAD + chunk(sse(TOKENS[0])) + b"0\r\n\r\n")
        else:
            w.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")

    async with RawServer(server) as srv:
        with pytest.raises(
            TargetUnreachable, match=r"3 attempts\): stream_truncated: .*cutting streams"
        ) as exc:
            await run_against_raw(srv, tmp_path)
    assert exc.value.exit_code == 3 and len(posts) == 3 and "\n" not in str(exc.value)
    assert not list(tmp_path.iterdir())  # stopped before a run directory was made


async def test_probe_tries_again_after_one_cut_stream(tmp_path):
    """A busy server's one-off failure does not stop the run: the second attempt passes."""
    from kvbench.run.preflight.target import probe_timed

    posts = []

    async def server(req, w):
        posts.append(req)
        w.write(SSE_HEAD + chunk(sse(TOKENS[0])) + b"0\r\n\r\n" if len(posts) == 1 else OK_STREAM)

    async with RawServer(server) as srv, make_session(1, 5) as session:
        scn, _ = load_scenario("throughput", {"target.base_url": srv.url, "prompts.lengths": [100]})
        rec = await probe_timed(ControlClient(session, srv.url, {}), scn, "m")
    assert rec.ok and len(posts) == 2


@pytest.mark.parametrize("tokens", [2_000, 20_000])
async def test_probe_stops_a_run_whose_long_bodies_a_proxy_refuses(tmp_path, tokens):
    """A proxy refuses bodies over 100 KB (nginx: client_max_body_size) with 413: 20k-token prompts
    would fail every request; the probe sends one as large as the longest and stops the run."""
    sizes = []

    async def server(req, w):
        if req.startswith(b"GET /v1/models"):
            w.write(json_answer(MODELS))
            return
        sizes.append(len(req.partition(b"\r\n\r\n")[2]))
        if sizes[-1] > 100_000:
            page = NGINX_502.replace(b"502 Bad Gateway", b"413 Request Entity Too Large")
            w.write(
                b"HTTP/1.1 413 Request Entity Too Large\r\nContent-Length: %d\r\n\r\n%b" % (len(page), page)
            )
        else:
            w.write(OK_STREAM)

    async with RawServer(server) as srv, make_session(1, 5) as session:
        from kvbench.run.preflight.target import probe_timed

        scn, _ = load_scenario("throughput", {"target.base_url": srv.url, "prompts.lengths": [tokens]})
        probe = probe_timed(ControlClient(session, srv.url, {}), scn, "m")
        if tokens == 2_000:  # 12 KB at most: no size probe, nothing refused
            assert (await probe).ok and len(sizes) == 1
            return
        with pytest.raises(
            TargetUnreachable, match=r"refused: 413 Request Entity Too Large; .*client_max_body_size"
        ):
            await probe
    assert len(sizes) == 2 and sizes[1] >= tokens * 4  # the size probe: at least the longest prompt's bytes
