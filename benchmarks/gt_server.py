"""A tiny OpenAI-compatible ground-truth server for `make bench` (raw asyncio, no framework).

Why not the kvbench mock: the mock is an aiohttp.web application with a tokenizer, a
metrics registry and a JSON dump per chunk; on one core it tops out well below the
2,000 req/s the capacity test must show, and every millisecond it spends on one request
delays the others' timestamps, which the bench would then charge to the client.  This
server does the least a streaming server can do, and stamps its own times:

  received_ns      the whole request (headers and body) is in, i.e. what a real server
                   could start working on (CLOCK_MONOTONIC, time.perf_counter_ns): the
                   kernel's receive stamp of the read that completed it (kvbench.client.transport.kstamp), so
                   that the server's own loop lag under load is not charged to the client;
                   received_user_ns is when this server's loop got to it (both recorded;
                   --no-kernel-stamps: the loop's time only, uvloop's own transport)
  first_byte_ns    the first byte of the request arrived
  first_token_ns   just after the first content chunk was handed to the socket
  token_ns         the same for every content chunk (to see which one a client's stamp matches)
  end_ns           after the last chunk
  in_flight_at_receive  completion requests received and not yet finished, this one included

The first content chunk is written `ttft_ms` after received_ns (or a seeded uniform draw
in [ttft_ms, ttft_ms_max] per request); the rest `decode_ms` apart. Records are kept in
memory and written as JSONL to --ground-truth when the server stops (SIGTERM, SIGINT or
stdin EOF), so no file I/O runs while it serves.

Endpoints: GET /v1/models, GET /version, GET /metrics (a few vLLM-named series), POST /tokenize
(whitespace words, the same count the kvbench prompts assume), POST /v1/completions (streaming,
chunked, with a usage chunk and [DONE]); anything else 404.

    python benchmarks/gt_server.py --port 0 --ttft-ms 50 --decode-ms 1 --ground-truth gt.jsonl --announce
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import random
import re
import signal
import socket
import sys
import threading
import time
from typing import Any

MODEL = "kvbench-bench-gt"
_MAX_TOKENS = re.compile(rb'"max_tokens"\s*:\s*(\d+)')
_WORD = b" hello"
_EVENT_HEAD = b'data: {"id":"%b","object":"text_completion","created":0,"model":"%b'


class State:
    def __init__(self, ttft_s: float, decode_s: float, ttft_max_s: float | None = None) -> None:
        self.ttft_s = ttft_s
        self.ttft_max_s = ttft_max_s
        self.rng = random.Random(0)
        self.decode_s = decode_s
        self.in_flight = 0
        self.records: list[dict[str, Any]] = []
        self.seq = 0
        self.conns = 0


def _chunk(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk holding one SSE event."""
    return b"%x\r\n%b\r\n" % (len(payload), payload)


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _json_response(status: int, obj: Any, keep_alive: bool) -> bytes:
    body = json.dumps(obj).encode()
    reason = {200: b"OK", 400: b"Bad Request", 404: b"Not Found"}.get(status, b"X")
    return b"HTTP/1.1 %d %b\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%b\r\n%b" % (
        status,
        reason,
        len(body),
        b"" if keep_alive else b"Connection: close\r\n",
        body,
    )


_TTFT_LE = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)


def _metrics_response(state: State, keep_alive: bool) -> bytes:
    """vLLM-named counters, gauges and one histogram (names kvbench's scraper keeps and parses, so
    the scrape costs what a small engine's does; the numbers are this server's own counts)."""
    done, lab = len(state.records), f'{{model_name="{MODEL}"}}'
    lines = [
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{lab} {state.in_flight}",
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{lab} 0",
        "# TYPE vllm:request_success_total counter",
        f"vllm:request_success_total{lab} {done}",
        "# TYPE vllm:prefix_cache_queries_total counter",
        f"vllm:prefix_cache_queries_total{lab} {done * 1000}",
        "# TYPE vllm:prefix_cache_hits_total counter",
        f"vllm:prefix_cache_hits_total{lab} 0",
        "# TYPE vllm:time_to_first_token_seconds histogram",
    ]
    lines += [
        f'vllm:time_to_first_token_seconds_bucket{{le="{le}",model_name="{MODEL}"}} 0' for le in _TTFT_LE
    ]
    lines += [
        f'vllm:time_to_first_token_seconds_bucket{{le="+Inf",model_name="{MODEL}"}} {done}',
        f"vllm:time_to_first_token_seconds_count{lab} {done}",
        f"vllm:time_to_first_token_seconds_sum{lab} {done * state.ttft_s}",
    ]
    body = ("\n".join(lines) + "\n").encode()
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: %d\r\n%b\r\n"
    return head % (len(body), b"" if keep_alive else b"Connection: close\r\n") + body


class GTProtocol(asyncio.Protocol):
    def __init__(self, state: State) -> None:
        self.state = state
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.first_byte_ns = 0
        self.read_ns = 0  # the last read: kernel receive stamp where there is one
        self.need: int | None = None  # total bytes of the pending request, once headers are parsed
        self.head: tuple[bytes, bytes, dict[bytes, bytes]] | None = None
        self.busy = False  # a response is being streamed; the next request waits (no pipelining)
        self.closed = False
        state.conns += 1
        self.conn_id = state.conns

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:  # small SSE chunks must not wait for the peer's delayed ACK (Nagle)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def data_received(self, data: bytes) -> None:
        t = time.perf_counter_ns()
        self.data_received_stamped(data, t, None)

    def data_received_stamped(self, data: bytes, t_user: int, t_kernel: int | None) -> None:
        self.read_ns = t_user if t_kernel is None else t_kernel
        if not self.buf:
            self.first_byte_ns = self.read_ns
        self.buf += data
        if not self.busy:
            self._try_request()

    def _try_request(self) -> None:
        buf = self.buf
        if self.head is None:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            lines = bytes(buf[:end]).split(b"\r\n")
            method, path, _ = lines[0].split(b" ", 2)
            headers: dict[bytes, bytes] = {}
            for line in lines[1:]:
                k, _, v = line.partition(b":")
                headers[k.strip().lower()] = v.strip()
            self.head = (method, path, headers)
            self.need = end + 4 + int(headers.get(b"content-length", b"0"))
        assert self.need is not None
        if len(buf) < self.need:
            return
        received_user = time.perf_counter_ns()
        received = self.read_ns  # the read that completed the request
        method, path, headers = self.head
        body = buf[self.need - int(headers.get(b"content-length", b"0")) : self.need]
        first_byte = self.first_byte_ns
        del buf[: self.need]
        if buf:
            self.first_byte_ns = received_user
        self.head, self.need = None, None
        keep = headers.get(b"connection", b"").lower() != b"close"
        path = path.split(b"?", 1)[0]
        if method == b"POST" and path in (b"/v1/completions", b"/v1/chat/completions"):
            self.busy = True
            asyncio.get_running_loop().create_task(
                self._stream(headers, body, received, first_byte, received_user)
            )
            return
        assert self.transport is not None
        if method == b"GET" and path == b"/v1/models":
            card = {"id": MODEL, "object": "model", "owned_by": "kvbench-bench", "max_model_len": 1_000_000}
            self.transport.write(_json_response(200, {"object": "list", "data": [card]}, keep))
        elif method == b"GET" and path == b"/metrics":  # for the scraper-overhead row (scraper_overhead.py)
            self.transport.write(_metrics_response(self.state, keep))
        elif method == b"GET" and path == b"/version":
            self.transport.write(_json_response(200, {"version": "kvbench-bench-gt 1"}, keep))
        elif method == b"POST" and path == b"/tokenize":
            try:
                prompt = json.loads(body).get("prompt", "")
                self.transport.write(_json_response(200, {"count": len(prompt.split())}, keep))
            except (ValueError, AttributeError):
                self.transport.write(_json_response(400, {"error": "bad body"}, keep))
        else:
            self.transport.write(_json_response(404, {"error": "not found"}, keep))
        if not keep:
            self.transport.close()
        elif self.buf:
            self._try_request()

    async def _stream(
        self,
        headers: dict[bytes, bytes],
        body: bytearray,
        received: int,
        first_byte: int,
        received_user: int,
    ) -> None:
        st = self.state
        st.in_flight += 1
        st.seq += 1
        rid = headers.get(b"x-request-id", b"gt-%d" % st.seq).decode()
        rec: dict[str, Any] = {
            "request_id": rid,
            "first_byte_ns": first_byte,
            "received_ns": received,
            "received_user_ns": received_user,
            "in_flight_at_receive": st.in_flight,
            "body_bytes": len(body),
            "conn": self.conn_id,
            "first_token_ns": None,
            "end_ns": None,
            "token_ns": [],  # just after each content chunk's write
        }
        tr = self.transport
        assert tr is not None
        token_ns: list[int] = rec["token_ns"]
        try:
            m = _MAX_TOKENS.search(body, 0, 4096) or _MAX_TOKENS.search(body, max(0, len(body) - 4096))
            n_out = int(m.group(1)) if m else 16
            prompt_words = len(body) // 6  # an estimate: counting would cost the server ~1 ms per 130k
            loop = asyncio.get_running_loop()
            tr.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                b"Transfer-Encoding: chunked\r\nX-Request-Id: " + rid.encode() + b"\r\n\r\n"
            )
            ttft = st.ttft_s if st.ttft_max_s is None else st.rng.uniform(st.ttft_s, st.ttft_max_s)
            due = loop.time() + ttft - (time.perf_counter_ns() - received) / 1e9
            cid = b"cmpl-" + rid.encode()
            head = b'data: {"id":"%b","object":"text_completion","created":0,"model":"%b' % (
                cid,
                MODEL.encode(),
            )
            for i in range(n_out):
                delay = due - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                if self.closed:
                    rec["status"] = "client_closed"
                    return
                fin = b'"length"' if i == n_out - 1 else b"null"
                tr.write(
                    _chunk(
                        head
                        + b'","choices":[{"index":0,"text":"'
                        + _WORD
                        + b'","logprobs":null,"finish_reason":'
                        + fin
                        + b',"stop_reason":null}]}\n\n'
                    )
                )
                written = time.perf_counter_ns()
                if i == 0:
                    rec["first_token_ns"] = written
                token_ns.append(written)
                due += st.decode_s
            total = prompt_words + n_out
            usage = {"prompt_tokens": prompt_words, "completion_tokens": n_out, "total_tokens": total}
            last = {"id": cid.decode(), "object": "text_completion", "choices": [], "usage": usage}
            tr.write(_chunk(_event(last)) + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            rec["status"] = "ok"
        finally:
            rec["end_ns"] = time.perf_counter_ns()
            st.in_flight -= 1
            st.records.append(rec)
            self.busy = False
            if not self.closed and self.buf:
                self._try_request()


async def serve(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    ttft_max = None if args.ttft_ms_max is None else args.ttft_ms_max / 1000.0
    state = State(args.ttft_ms / 1000.0, args.decode_ms / 1000.0, ttft_max)
    clock = None
    if not args.no_kernel_stamps:
        from kvbench.client.transport import kstamp

        clock = kstamp.ClockMap() if kstamp.unavailable() is None else None
    if clock is not None:
        server = _StampedServer(loop, state, clock, args.host, args.port)
        port = server.port
    else:
        server = await loop.create_server(lambda: GTProtocol(state), args.host, args.port, backlog=1024)
        port = server.sockets[0].getsockname()[1]
    if args.announce:
        info = {"base_url": f"http://{args.host}:{port}", "pid": os.getpid()}
        info["clock_source"] = "user" if clock is None else "kernel"
        print(json.dumps(info), flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    def watch_stdin() -> None:
        try:
            while sys.stdin.buffer.read(65536):
                pass
        except (OSError, ValueError):
            pass
        loop.call_soon_threadsafe(stop.set)

    if args.exit_on_stdin_eof:
        threading.Thread(target=watch_stdin, daemon=True).start()
    await stop.wait()
    server.close()
    if args.ground_truth:
        with open(args.ground_truth, "w", encoding="utf-8") as fh:
            for rec in state.records:
                fh.write(json.dumps(rec) + "\n")


class _StampedServer:
    """Accepts on a listening socket; each connection read with kernel receive stamps (kstamp)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, state: State, clock: Any, host: str, port: int):
        from kvbench.client.transport import kstamp

        self.kstamp, self.loop, self.state, self.clock = kstamp, loop, state, clock
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(1024)
        self.sock.setblocking(False)
        self.port = self.sock.getsockname()[1]
        loop.add_reader(self.sock.fileno(), self._accept)

    def _accept(self) -> None:
        for _ in range(64):
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            conn.setblocking(False)
            self.kstamp.enable(conn)
            self.kstamp.StampedTransport(self.loop, conn, GTProtocol(self.state), self.clock)

    def close(self) -> None:
        self.loop.remove_reader(self.sock.fileno())
        self.sock.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--ttft-ms-max", type=float, default=None, help="draw each TTFT in [ttft-ms, this]")
    ap.add_argument("--decode-ms", type=float, default=1.0)
    ap.add_argument("--no-kernel-stamps", action="store_true", help="received_ns from the loop's clock")
    ap.add_argument("--ground-truth", default=None)
    ap.add_argument("--announce", action="store_true")
    ap.add_argument("--exit-on-stdin-eof", action="store_true")
    ap.add_argument("--no-uvloop", action="store_true")
    args = ap.parse_args()
    factory = None
    if not args.no_uvloop:
        try:
            import uvloop

            factory = uvloop.new_event_loop
        except ModuleNotFoundError:
            pass
    # no collector pauses while serving: the records are plain dicts, and a pause would be charged
    # to the client as send/return error
    gc.collect()
    gc.freeze()
    gc.disable()
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(serve(args))


if __name__ == "__main__":
    main()
