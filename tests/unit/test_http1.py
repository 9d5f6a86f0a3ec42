"""kvbench's HTTP/1.1 response framing, fed byte sequences split at every position."""

import asyncio
import json
import time

import pytest

from kvbench.client import ClientConfig, RequestRecord, ResponseStream, build_body
from kvbench.client.transport.http1 import Exchange

EVENTS = [
    {"choices": [{"index": 0, "delta": {"role": "assistant"}}]},
    {"choices": [{"index": 0, "delta": {"content": "Hel"}}]},
    {"choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "length"}]},
    {
        "choices": [],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 3}},
    },
]
SSE = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in EVENTS) + b"data: [DONE]\n\n"


def chunked(payload: bytes, size: int = 37) -> bytes:
    parts = [payload[i : i + size] for i in range(0, len(payload), size)]
    return b"".join(b"%x;ext=1\r\n%b\r\n" % (len(p), p) for p in parts) + b"0\r\nX-Trailer: 1\r\n\r\n"


CHUNKED = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(SSE)
LENGTH = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%b" % (len(SSE), SSE)
CLOSE = b"HTTP/1.0 200 OK\r\n\r\n" + SSE
ERROR = b'HTTP/1.1 503 Service Unavailable\r\nContent-Length: 29\r\n\r\n{"error":{"message":"busy!"}}'


class FakePool:
    def __init__(self):
        self.released = []

    def release(self, conn):
        self.released.append(conn)


class FakeConn:
    def __init__(self):
        self.pool = FakePool()
        self.ex = None
        self.closed = False

    def close(self):
        self.closed = True


def feed(pieces, lost=False):
    loop = asyncio.new_event_loop()
    try:
        rec = RequestRecord("r")
        conn = FakeConn()
        ex = Exchange(
            conn, ResponseStream(rec, ClientConfig(base_url="http://x", model="m")), loop.create_future(), 0
        )
        conn.ex = ex
        for p in pieces:
            if conn.ex is ex:  # after [DONE] the record is final, but the rest is still read for reuse
                ex.received(time.perf_counter_ns(), p)
        if lost and conn.ex is ex:
            conn.ex = None
            ex.lost(None)
        if ex.finished.done() and not ex.finished.cancelled() and ex.finished.exception():
            exc = ex.finished.exception()
            rec.fail("client_error" if "Bad" in type(exc).__name__ else "stream_truncated", str(exc))
        return rec, conn, ex
    finally:
        loop.close()


@pytest.mark.parametrize("name", ["CHUNKED", "LENGTH", "CLOSE"])
def test_every_split_gives_the_same_record(name):
    raw = globals()[name]
    lost = name == "CLOSE"  # close-delimited: the body ends when the server closes
    for cut in range(1, len(raw)):
        rec, conn, ex = feed([raw[:cut], raw[cut:]], lost=lost)
        assert rec.ok, (cut, rec.error_type, rec.error_message)
        assert rec.http_status == 200
        assert rec.cached_tokens == 3 and rec.output_tokens == 2
        assert len(rec.token_ns) == 2
        assert ex.finished.done()
        # keep-alive only where HTTP/1.1 framing allows it
        assert bool(conn.pool.released) == (name != "CLOSE")


def test_error_response_is_http_code_with_message():
    rec, _conn, _ = feed([ERROR])
    assert rec.error_type == "http_503" and rec.error_message == "busy!"


def test_connection_lost_mid_body_is_truncation():
    rec, _conn, _ = feed([CHUNKED[: len(CHUNKED) // 2]], lost=True)
    assert rec.error_type == "stream_truncated"


def test_garbage_is_a_client_error():
    rec, conn, _ = feed([b"SMTP ready\r\n\r\n"])
    assert rec.error_type == "client_error" and conn.closed


@pytest.mark.parametrize(
    "prompt",
    ["plain words", 'quotes " and \\ back', "tab\tnew\nline \x00\x1f\x7f", "café ü 日本 🚀", "x" * 200_000],
)
@pytest.mark.parametrize("api", ["completions", "chat"])
def test_build_body_is_byte_identical_to_json_dumps(prompt, api):
    cfg = ClientConfig(
        base_url="http://x", model="m/é", api=api, extra_body={"cache_prompt": True, "max_tokens": 3}
    )
    body = build_body(cfg, prompt)
    expected = {
        "model": "m/é",
        "max_tokens": 16,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if api == "chat":
        expected["messages"] = [{"role": "user", "content": prompt}]
    else:
        expected["prompt"] = prompt
    expected["ignore_eos"] = True
    expected.update(cfg.extra_body)
    want = json.dumps(expected, ensure_ascii=False).encode("utf-8")
    assert body == want
    assert build_body(cfg, prompt) == want  # again, from the config's frame and the kept prompt


def test_each_config_gets_its_own_frame_and_a_replaced_prompt_is_built_whole():
    prompt = "w " * 600  # over 1 KB: its escaped form is kept
    a = ClientConfig(base_url="http://x", model="a", max_tokens=3)
    b = ClientConfig(base_url="http://x", model="b", max_tokens=4)
    for cfg in (a, b, a, b):
        got = json.loads(build_body(cfg, prompt))
        assert (got["model"], got["max_tokens"], got["prompt"]) == (cfg.model, cfg.max_tokens, prompt)
    # extra_body naming the prompt field: no frame, the caller's value wins, as json.dumps would have it
    c = ClientConfig(base_url="http://x", model="c", extra_body={"prompt": "theirs"})
    assert json.loads(build_body(c, prompt))["prompt"] == "theirs"


async def test_a_reused_connection_closed_by_the_server_is_resent_once():
    """llama-server closes connections after a stream despite Keep-Alive: the next request must not fail."""
    from kvbench.client import StreamingClient, make_session

    served, dropped = [], []

    async def read_request(reader):
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        length = int(next(x for x in lines if x.lower().startswith(b"content-length")).split(b":")[1])
        await reader.readexactly(length)

    async def handle(reader, writer):
        # answer one request per connection; a second one on it is dropped unanswered (the race
        # where the server closes an idle keep-alive connection just as the client reuses it)
        await read_request(reader)
        served.append(1)
        writer.write(
            b"HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5\r\nContent-Length: %d\r\n\r\n%b" % (len(SSE), SSE)
        )
        await writer.drain()
        try:
            await read_request(reader)
            dropped.append(1)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    cfg = ClientConfig(base_url=f"http://127.0.0.1:{port}", model="m")
    async with make_session(1, 5) as session:
        client = StreamingClient(cfg, session, time.perf_counter_ns())
        first = await client.send(RequestRecord("a"), b"{}")
        second = await client.send(RequestRecord("b"), b"{}")
    server.close()
    await server.wait_closed()
    assert first.ok and second.ok, (second.error_type, second.error_message)
    assert len(served) == 2 and len(dropped) == 1  # dropped once, then resent on a fresh connection
