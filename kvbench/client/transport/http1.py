"""kvbench's own keep-alive HTTP/1.1 transport for the timed requests (the default for http://).

Why not aiohttp for these: on Python 3.11 aiohttp writes a request body from a task
of its own, which runs only after every other ready callback, and hands each chunk
over through a task switch. Under a burst of 28 requests, sends went out after all
completions had been processed, and that lag was counted as TTFT. Here the request
is written in the same step that stamps `sent_ns`, and each body chunk is stamped in
the socket's own callback before anything else runs (`make bench` measures both:
benchmarks/results/latest.md). aiohttp still carries https and everything untimed.

Scope, deliberately small: one request per keep-alive connection at a time (no
pipelining), responses framed by chunked encoding, Content-Length or connection
close; interim 1xx responses skipped; line ends CRLF or bare LF (as aiohttp's parser
accepts). Status, headers and body meaning belong to the sink (kvbench.client.stream):
compression, redirects and errors are judged there, once for every transport.

Receive times are the kernel's where Linux gives them (kstamp: SO_TIMESTAMPNS read with
recvmsg): a read's time is when its segment reached the socket, however busy the loop was.
The loop's own stamp of the same read goes to the sink beside it (`ResponseSink.stamp`), so
the record keeps both for the first token (`first_token_user_ns`, `clock_source`).
Send times too (txstamp): `sent_ns` is when the last request byte left, the loop's `sent_user_ns`.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import time
from typing import Any

from kvbench.client.transport import kstamp, txstamp
from kvbench.client.transport.base import (
    MAX_HEAD_FIELDS,
    MAX_HEAD_LINE,
    BadResponse,
    ConnectFailed,
    ConnectionLost,
    ResponseSink,
    TimedRequest,
    TimedTransport,
)

# After a record ends at `data: [DONE]`, the rest of the body (the last chunk) is read for this
# long so the connection can be reused; a server that holds the stream open is dropped then.
DRAIN_S = 2.0
_BLANK_LINE = re.compile(rb"\r?\n\r?\n")
_MAX_HEAD = (MAX_HEAD_FIELDS + 1) * (MAX_HEAD_LINE + 2)  # what the per-line limits allow in all


class Http1Transport(TimedTransport):
    """Keep-alive HTTP/1.1 connections for the timed requests, at most `limit` busy at once."""

    name = "http1"

    def __init__(self, limit: int, connect_timeout_s: float) -> None:
        self.limit = limit
        self.connect_timeout_s = connect_timeout_s
        self._slots: asyncio.Semaphore | None = None
        self._idle: dict[tuple[str, int], list[_Conn]] = {}
        self._all: set[_Conn] = set()
        self._prefix: tuple[TimedRequest, bytes] | None = None
        # kernel receive stamps (kstamp) where the platform has them, send stamps (txstamp) on those sockets
        self.clock = kstamp.ClockMap() if kstamp.unavailable() is None else None
        self.tx_attach = txstamp.attach if self.clock is not None and txstamp.unavailable() is None else None

    def _head(self, req: TimedRequest, request_id: str, body_len: int) -> bytes:
        cached = self._prefix
        if cached is None or cached[0] is not req:
            lines = [f"POST {req.path} HTTP/1.1", f"Host: {req.host_header}"]
            lines += [f"{k}: {v}" for k, v in req.headers]
            cached = self._prefix = (req, ("\r\n".join(lines) + "\r\nX-Request-Id: ").encode("utf-8"))
        return b"%b%b\r\nContent-Length: %d\r\n\r\n" % (cached[1], request_id.encode(), body_len)

    async def send(
        self, req: TimedRequest, request_id: str, body: bytes, sink: ResponseSink, origin_ns: int
    ) -> None:
        head = self._head(req, request_id, len(body))
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.limit)
        async with self._slots:
            conn = self._idle_conn(req.address)
            reused = conn is not None
            if conn is None:
                conn = await self._connect(req.address)
            try:
                await _exchange(conn, head, body, sink, origin_ns)
            except ConnectionLost as exc:
                if not (reused and exc.unanswered):
                    raise
                # the keep-alive race: the server closed an idle connection as we reused it
                # (llama-server does after every stream). Nothing was answered, so nothing was
                # processed: send again, once, on a fresh connection.
                conn = await self._connect(req.address)
                await _exchange(conn, head, body, sink, origin_ns)

    def _idle_conn(self, key: tuple[str, int]) -> _Conn | None:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()  # most recently used first
            if not conn.closed:
                return conn
        return None

    async def _connect(self, address: tuple[str, int]) -> _Conn:
        host, port = address
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await kstamp.open_stamped(
                    loop, lambda: _Conn(self, address), host, port, self.clock, self.tx_attach
                )
        except TimeoutError:
            raise ConnectFailed(f"connect timed out after {self.connect_timeout_s:g} s") from None
        except OSError as exc:
            raise ConnectFailed(str(exc) or type(exc).__name__) from None
        self._all.add(conn)
        return conn

    def release(self, conn: _Conn) -> None:
        if not conn.closed:
            self._idle.setdefault(conn.key, []).append(conn)

    def forget(self, conn: _Conn) -> None:
        self._all.discard(conn)

    def clock_info(self) -> dict[str, Any]:
        """Where this transport's receive times came from, for the run's manifest (`clock`)."""
        why = kstamp.unavailable()
        if self.clock is None or why is not None:
            return {"clock_source": "user", "reason": why or "kernel stamps not enabled"}
        info = self.clock.finish()
        if not self.clock.stamped:
            return {"clock_source": "user", "reason": "no read carried a kernel stamp", **info}
        return {"clock_source": "kernel", "stamp": "SO_TIMESTAMPNS (software RX, CLOCK_REALTIME)", **info}

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        for conn in list(self._all):
            conn.close()
        self._all.clear()
        self._idle.clear()
        if self.clock is not None:
            self.clock.close()


async def _exchange(conn: _Conn, head: bytes, body: bytes, sink: ResponseSink, origin_ns: int) -> None:
    ex = Exchange(conn, sink, asyncio.get_running_loop().create_future(), origin_ns)
    conn.start(ex, head, body)
    try:
        await ex.finished
    except asyncio.CancelledError:  # timeout or interrupt: nothing more is read from this connection
        ex.abort()
        raise


class _Conn(asyncio.Protocol):
    """One keep-alive connection; one exchange at a time (no pipelining)."""

    def __init__(self, pool: Any, key: tuple[str, int]) -> None:
        self.pool = pool
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.ex: Exchange | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not an asyncio.Transport
        self.tx: txstamp.TxStamps | None = getattr(transport, "tx", None)  # kstamp.StampedTransport's
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def start(self, ex: Exchange, head: bytes, body: bytes) -> None:
        tr = self.transport
        assert tr is not None
        self.ex = ex
        if len(body) <= 65536:
            tr.write(head + body)
        else:  # no copy of a large body (uvloop writes both with one writev)
            tr.writelines((head, body))

    def data_received(self, data: bytes) -> None:
        t = time.perf_counter_ns()  # before anything else
        ex = self.ex
        if ex is None:  # bytes nobody asked for: the connection is not reusable
            self.close()
            return
        ex.received(t, data)

    def data_received_stamped(self, data: bytes, t_user: int, t_kernel: int | None) -> None:
        """kstamp.StampedTransport's read: the kernel's receive time where the read carried one."""
        ex = self.ex
        if ex is None:
            self.close()
            return
        if t_kernel is None:
            ex.received(t_user, data)
        else:
            ex.received(t_kernel, data, t_user, True)

    def eof_received(self) -> bool:
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.forget(self)
        ex = self.ex
        self.ex = None
        if ex is not None:
            ex.lost(exc)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


_HEAD, _BODY = 0, 1


class Exchange:
    """One request's response on a _Conn: HTTP/1.1 framing (chunked, length, until close) -> ResponseSink."""

    __slots__ = (
        "buf",
        "chunk_left",
        "conn",
        "crlf",
        "drain_timer",
        "draining",
        "finished",
        "framing",
        "keep_alive",
        "left",
        "origin",
        "sink",
        "state",
        "trailers",
        "unsent",
    )

    def __init__(self, conn: Any, sink: ResponseSink, finished: asyncio.Future[None], origin: int) -> None:
        self.conn = conn
        self.sink = sink
        self.finished = finished
        self.origin = origin
        self.state = _HEAD
        self.buf = b""
        self.framing = ""  # "chunked" | "length" | "close"
        self.left = 0  # length framing: bytes still due
        self.chunk_left = 0
        self.crlf = False  # chunked: a line end closes the current chunk
        self.trailers = False
        self.keep_alive = True
        self.draining = False  # the record is final ([DONE]); reading the rest only to reuse the connection
        self.drain_timer: asyncio.TimerHandle | None = None
        self.unsent = True  # the send stamp is settled at the first response bytes

    # -- callbacks from _Conn ---------------------------------------------------------------------------

    def received(self, t_abs: int, data: bytes, t_user_abs: int | None = None, kernel: bool = False) -> None:
        """Bytes read at t_abs: the kernel's receive stamp when `kernel`, t_user_abs the loop's."""
        if self.unsent:  # the row's send stamp is settled at the first response bytes
            self.unsent = False
            if getattr(self.conn, "tx", None) is not None:
                txstamp.settle(self.conn, self.sink, self.origin, t_abs if t_user_abs is None else t_user_abs)
        t = t_abs - self.origin
        try:
            if self.state == _HEAD:
                data = self._head(t, data)
                if self.state == _HEAD or self.conn.ex is not self:
                    return
            if self.framing == "chunked":
                body, complete = self._dechunk(data)
            elif self.framing == "length":
                if len(data) > self.left:
                    raise BadResponse("more bytes than Content-Length")
                body, self.left = data, self.left - len(data)
                complete = self.left == 0
            else:
                body, complete = data, False
            if self.draining:
                if complete:
                    self._finish(reuse=self.keep_alive)
                return
            if body:
                self.sink.stamp(t if t_user_abs is None else t_user_abs - self.origin, kernel)
            if body and self.sink.feed(t, body):
                # [DONE]: the record is final; the rest is read (never waited for) only to reuse
                # the connection, which a close-delimited body cannot be
                if self.sink.done and self.keep_alive and not complete:
                    self._drain()
                else:
                    self._finish(reuse=self.sink.done and complete and self.keep_alive)
                return
            if complete:
                self.sink.end(t)
                self._finish(reuse=self.keep_alive)
        except Exception as exc:  # SSE errors from the sink, bad framing: raised in send()
            self._fail(exc)

    def lost(self, exc: Exception | None) -> None:
        if self.draining:
            self._finish(reuse=False)
            return
        if self.finished.done():
            return
        if self.state == _BODY and self.framing == "close":
            self.sink.end(time.perf_counter_ns() - self.origin)
            self._finish(reuse=False)
            return
        why = f"ServerDisconnected: {exc}" if exc else "ServerDisconnected"
        self.finished.set_exception(ConnectionLost(why, unanswered=self.state == _HEAD and not self.buf))

    def abort(self) -> None:
        """Timeout or cancellation: drop the connection, ignore whatever else arrives."""
        self._finish(reuse=False)

    # -- parsing ---------------------------------------------------------------------------------------

    def _head(self, t: int, data: bytes) -> bytes:
        buf = self.buf + data if self.buf else data
        m = _BLANK_LINE.search(buf)
        if m is None:
            if len(buf) > _MAX_HEAD:
                raise BadResponse(f"response head larger than {_MAX_HEAD:,} bytes")
            self.buf = buf
            return b""
        self.buf = b""
        lines = [line.rstrip("\r") for line in buf[: m.start()].decode("latin-1").split("\n")]
        if len(lines) > MAX_HEAD_FIELDS + 1 or max(map(len, lines)) > MAX_HEAD_LINE:
            raise BadResponse(
                f"response head has a line over {MAX_HEAD_LINE:,} bytes or over {MAX_HEAD_FIELDS} headers"
            )
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise BadResponse(f"bad status line {lines[0][:80]!r}")
        status = int(parts[1])
        rest = buf[m.end() :]
        if 100 <= status < 200:  # interim response: the real one follows
            return self._head(t, rest) if rest else b""
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        self.keep_alive = parts[0] != "HTTP/1.0"
        if "connection" in headers:
            v = headers["connection"].lower()
            self.keep_alive = v != "close" and (self.keep_alive or v == "keep-alive")
        length: int | None = None
        if "content-length" in headers:
            try:
                length = int(headers["content-length"])
            except ValueError:
                raise BadResponse(f"bad Content-Length {headers['content-length'][:40]!r}") from None
        self.state = _BODY
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self.framing = "chunked"
        elif length is not None:
            self.framing, self.left = "length", length
        else:
            self.framing, self.keep_alive = "close", False
        if self.sink.head(t, status, parts[2] if len(parts) > 2 else "", headers):
            self._finish(reuse=False)
            return b""
        if self.framing == "length" and length == 0:
            self.sink.end(t)
            self._finish(reuse=self.keep_alive)
        return rest

    def _dechunk(self, data: bytes) -> tuple[bytes, bool]:
        """Body bytes in `data` (chunked framing) and whether the last chunk has been seen."""
        buf = self.buf + data if self.buf else data
        self.buf = b""
        pos, n = 0, len(buf)
        out: list[bytes] = []
        while pos < n:
            if self.chunk_left:
                take = min(self.chunk_left, n - pos)
                out.append(buf[pos : pos + take])
                pos += take
                self.chunk_left -= take
                if not self.chunk_left:
                    self.crlf = True
                continue
            eol = buf.find(b"\n", pos)
            if eol < 0:
                if n - pos > 4096:
                    raise BadResponse("chunk size line too long")
                break
            line = buf[pos:eol]
            if line[-1:] == b"\r":
                line = line[:-1]
            pos = eol + 1
            if self.crlf:
                if line:
                    raise BadResponse("chunk data not followed by a line end")
                self.crlf = False
                continue
            if self.trailers:
                if not line:  # blank line after the last chunk: the body is complete
                    if pos < n:
                        self.keep_alive = False  # bytes after the response: never reuse
                    return b"".join(out), True
                continue
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise BadResponse(f"bad chunk size {line[:40]!r}") from None
            if size == 0:
                self.trailers = True
            else:
                self.chunk_left = size
        self.buf = buf[pos:]
        body = out[0] if len(out) == 1 else b"".join(out)
        return body, False

    # -- ending ----------------------------------------------------------------------------------------

    def _drain(self) -> None:
        self.draining = True
        self.drain_timer = self.finished.get_loop().call_later(DRAIN_S, self._finish, False)
        if not self.finished.done():
            self.finished.set_result(None)

    def _fail(self, exc: Exception) -> None:
        self._finish(reuse=False, exc=exc)

    def _finish(self, reuse: bool, exc: Exception | None = None) -> None:
        conn = self.conn
        if self.drain_timer is not None:
            self.drain_timer.cancel()
            self.drain_timer = None
        self.draining = False
        if conn.ex is self:
            conn.ex = None
        if reuse and not conn.closed:
            conn.pool.release(conn)
        else:
            conn.close()
        if not self.finished.done():
            if exc is None:
                self.finished.set_result(None)
            else:
                self.finished.set_exception(exc)
