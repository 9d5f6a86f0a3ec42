"""kvbench's own HTTP/1.1 client transport for the timed requests (http:// targets).

Why not aiohttp for these: on Python 3.11 aiohttp writes a request body from a task
of its own, which runs only after every other ready callback, and hands each chunk
over through a task switch. Under a burst of 28 requests, sends went out after all
completions had been processed, and that lag was counted as TTFT. Here the request
is written in the same step that stamps `sent_ns`, and each body chunk is stamped in
the socket's own callback before anything else runs (`make bench` measures both:
benchmarks/results/latest.md). aiohttp still carries https and everything untimed.

Receive times are the kernel's where Linux gives them (kvbench.kstamp: SO_TIMESTAMPNS read
with recvmsg): a chunk's time is when its segment reached the socket, however busy the loop
was; the loop's own stamp of the first token is kept beside it (`first_token_user_ns`), and
`clock_source` on the record says which one `first_token_ns` is.

Scope, deliberately small: one request per keep-alive connection at a time (no
pipelining), responses framed by chunked encoding, Content-Length or connection
close; interim 1xx responses skipped; no compression, redirects or proxies.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from kvbench import __version__, kstamp
from kvbench.sse import SSEError


class RecordLike(Protocol):
    end_ns: int | None
    headers_ns: int | None
    http_status: int | None
    first_token_ns: int | None
    first_token_user_ns: int | None
    token_ns: list[int]
    clock_source: str

    def fail(self, error_type: str, message: str, status: str = "error") -> None: ...


class BodySink(Protocol):
    """Where the response body goes (the client's SSE handling)."""

    @property
    def rec(self) -> RecordLike: ...

    def feed(self, t: int, chunk: bytes) -> bool: ...

    def end(self, t: int) -> None: ...


class TargetConfig(Protocol):
    @property
    def url(self) -> str: ...


class _BadHTTP(Exception):
    """The server's bytes are not an HTTP/1.1 response we can read."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where the timed requests go, and the fixed part of their request head."""

    pool: RawPool
    key: tuple[str, int]
    prefix: bytes  # request line and fixed headers, up to the X-Request-Id value

    @staticmethod
    def make(cfg: TargetConfig, headers: dict[str, str], pool: RawPool) -> Target | None:
        url = urlsplit(cfg.url)
        if url.scheme != "http" or not url.hostname:
            return None
        if any(c in k + v for k, v in headers.items() for c in "\r\n"):
            return None  # let aiohttp refuse it with its own error
        path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        lines = [f"POST {path} HTTP/1.1", f"Host: {url.netloc}", f"User-Agent: kvbench/{__version__}"]
        lines += ["Accept: */*", *(f"{k}: {v}" for k, v in headers.items() if k.lower() != "x-request-id")]
        prefix = ("\r\n".join(lines) + "\r\nX-Request-Id: ").encode("utf-8")
        return Target(pool, (url.hostname, url.port or 80), prefix)

    def head(self, request_id: str, body_len: int) -> bytes:
        return b"%b%b\r\nContent-Length: %d\r\n\r\n" % (self.prefix, request_id.encode(), body_len)


class RawPool:
    """Keep-alive HTTP/1.1 connections for the timed requests, at most `limit` busy at once."""

    def __init__(self, limit: int, connect_timeout_s: float) -> None:
        self.limit = limit
        self.connect_timeout_s = connect_timeout_s
        self._slots: asyncio.Semaphore | None = None
        self._idle: dict[tuple[str, int], list[_Conn]] = {}
        self._all: set[_Conn] = set()
        # kernel receive stamps (kstamp) where the platform has them; None: user-space stamps
        self.clock = kstamp.ClockMap() if kstamp.unavailable() is None else None

    @property
    def slots(self) -> asyncio.Semaphore:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.limit)
        return self._slots

    def idle_conn(self, key: tuple[str, int]) -> _Conn | None:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()  # most recently used first
            if not conn.closed:
                return conn
        return None

    async def connect(self, target: Target) -> _Conn:
        host, port = target.key
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await kstamp.open_stamped(
                    loop, lambda: _Conn(self, target.key), host, port, self.clock
                )
        except TimeoutError:
            raise OSError(f"connect timed out after {self.connect_timeout_s:g} s") from None
        self._all.add(conn)
        return conn

    def release(self, conn: _Conn) -> None:
        if not conn.closed:
            self._idle.setdefault(conn.key, []).append(conn)

    def forget(self, conn: _Conn) -> None:
        self._all.discard(conn)

    def clock_info(self) -> dict[str, object]:
        """Where this pool's receive times came from, for the run's manifest (`clock_source`)."""
        why = kstamp.unavailable()
        if self.clock is None or why is not None:
            return {"clock_source": "user", "reason": why or "kernel stamps not enabled"}
        info = self.clock.finish()
        if not self.clock.stamped:
            return {"clock_source": "user", "reason": "no read carried a kernel stamp", **info}
        return {"clock_source": "kernel", "stamp": "SO_TIMESTAMPNS (software RX, CLOCK_REALTIME)", **info}

    def close(self) -> None:
        for conn in list(self._all):
            conn.close()
        self._all.clear()
        self._idle.clear()


class _Conn(asyncio.Protocol):
    """One keep-alive connection; one exchange at a time (no pipelining)."""

    def __init__(self, pool: RawPool, key: tuple[str, int]) -> None:
        self.pool = pool
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.ex: Exchange | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not an asyncio.Transport
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
        ex.received(t, data, t, False)

    def data_received_stamped(self, data: bytes, t_user: int, t_kernel: int | None) -> None:
        """kstamp.StampedTransport's read: the kernel's receive time where the read carried one."""
        ex = self.ex
        if ex is None:
            self.close()
            return
        if t_kernel is None:
            ex.received(t_user, data, t_user, False)
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
    """One request's response on a _Conn: HTTP/1.1 framing (chunked, length, until close) -> BodySink."""

    __slots__ = (
        "buf",
        "chunk_left",
        "conn",
        "crlf",
        "dropped_unanswered",
        "errbody",
        "finished",
        "framing",
        "keep_alive",
        "left",
        "origin",
        "state",
        "status",
        "stream",
        "trailers",
    )

    def __init__(self, conn: _Conn, stream: BodySink, finished: asyncio.Future[None], origin: int) -> None:
        self.conn = conn
        self.stream = stream
        self.finished = finished
        self.origin = origin
        self.state = _HEAD
        self.buf = b""
        self.status = 0
        self.framing = ""  # "chunked" | "length" | "close"
        self.left = 0  # length framing: bytes still due
        self.chunk_left = 0
        self.crlf = False  # chunked: a CRLF closes the current chunk
        self.trailers = False
        self.keep_alive = True
        self.errbody: bytearray | None = None
        self.dropped_unanswered = False  # closed before one byte of response: safe to resend

    # -- callbacks from _Conn ---------------------------------------------------------------------------

    def received(self, t_abs: int, data: bytes, t_user_abs: int | None = None, kernel: bool = False) -> None:
        """Bytes read at t_abs: the kernel's receive stamp when `kernel`; t_user_abs the loop's."""
        t = t_abs - self.origin
        try:
            if self.state == _HEAD:
                data = self._head(t, data)
                if self.state == _HEAD or self.finished.done():
                    return
            if self.framing == "chunked":
                body, complete = self._dechunk(data)
            elif self.framing == "length":
                if len(data) > self.left:
                    raise _BadHTTP("more bytes than Content-Length")
                body, self.left = data, self.left - len(data)
                complete = self.left == 0
            else:
                body, complete = data, False
            if body and self._body(t, body, t if t_user_abs is None else t_user_abs - self.origin, kernel):
                return
            if complete:
                self._complete(t)
        except SSEError as exc:
            rec = self.stream.rec
            rec.end_ns = t
            rec.fail("response_too_large" if "larger than" in str(exc) else "bad_sse", str(exc))
            self._finish(reuse=False)
        except _BadHTTP as exc:
            self.stream.rec.end_ns = t
            self.stream.rec.fail("client_error", f"bad HTTP response: {exc}")
            self._finish(reuse=False)

    def lost(self, exc: Exception | None) -> None:
        if self.finished.done():
            return
        rec = self.stream.rec
        t = time.perf_counter_ns() - self.origin
        if self.state == _BODY and self.framing == "close":
            self._complete(t)
            return
        why = f"ServerDisconnected: {exc}" if exc else "ServerDisconnected"
        self.dropped_unanswered = self.state == _HEAD and not self.buf
        rec.end_ns = t
        if rec.headers_ns is None:
            rec.fail("connect_error", f"connection lost before a response: {why}")
        else:
            rec.fail("stream_truncated", f"connection closed mid-stream: {why}")
        self.finished.set_result(None)

    def abort(self) -> None:
        """Timeout or cancellation: drop the connection, ignore whatever else arrives."""
        if self.conn.ex is self:
            self.conn.ex = None
        self.conn.close()

    # -- parsing ---------------------------------------------------------------------------------------

    def _head(self, t: int, data: bytes) -> bytes:
        buf = self.buf + data if self.buf else data
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > 65536:
                raise _BadHTTP("response head larger than 64 KiB")
            self.buf = buf
            return b""
        self.buf = b""
        lines = buf[:end].decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise _BadHTTP(f"bad status line {lines[0][:80]!r}")
        status = int(parts[1])
        rest = buf[end + 4 :]
        if 100 <= status < 200:  # interim response: the real one follows
            return self._head(t, rest) if rest else b""
        length: int | None = None
        chunked = False
        self.keep_alive = parts[0] != "HTTP/1.0"
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                try:
                    length = int(value.strip())
                except ValueError:
                    raise _BadHTTP(f"bad Content-Length {value.strip()[:40]!r}") from None
            elif name == "transfer-encoding":
                chunked = "chunked" in value.lower()
            elif name == "connection":
                v = value.strip().lower()
                self.keep_alive = v != "close" and (self.keep_alive or v == "keep-alive")
        rec = self.stream.rec
        rec.headers_ns = t
        rec.http_status = self.status = status
        self.state = _BODY
        if chunked:
            self.framing = "chunked"
        elif length is not None:
            self.framing, self.left = "length", length
        else:
            self.framing, self.keep_alive = "close", False
        if status >= 400:
            self.errbody = bytearray()
        if self.framing == "length" and length == 0:
            self._complete(t)
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
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                if n - pos > 4096:
                    raise _BadHTTP("chunk size line too long")
                break
            line = buf[pos:eol]
            pos = eol + 2
            if self.crlf:
                if line:
                    raise _BadHTTP("chunk data not followed by CRLF")
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
                raise _BadHTTP(f"bad chunk size {line[:40]!r}") from None
            if size == 0:
                self.trailers = True
            else:
                self.chunk_left = size
        self.buf = buf[pos:]
        body = out[0] if len(out) == 1 else b"".join(out)
        return body, False

    def _body(self, t: int, body: bytes, t_user: int, kernel: bool) -> bool:
        """Hand body bytes on; True when the exchange is over (failed)."""
        if self.errbody is not None:
            self.errbody += body
            if len(self.errbody) >= 2048:
                self._http_error(t)
                self._finish(reuse=False)
                return True
            return False
        rec = self.stream.rec
        before = rec.first_token_ns
        failed = self.stream.feed(t, body)
        if before is None and rec.first_token_ns is not None:  # this read carried the first token
            rec.first_token_user_ns = t_user  # the loop's stamp beside the kernel's: their gap is lag
            rec.clock_source = "kernel" if kernel else "user"
            if kernel and len(rec.token_ns) > 1 and self.conn.pool.clock is not None:
                self.conn.pool.clock.merged_first += 1  # stamped as the later token's arrival (kstamp)
        if failed:
            self._finish(reuse=False)
            return True
        return False

    def _http_error(self, t: int) -> None:
        rec = self.stream.rec
        assert self.errbody is not None
        detail = bytes(self.errbody[:2048]).decode("utf-8", "replace")
        rec.fail(f"http_{self.status}", error_detail(detail) or _status_phrase(self.status))
        rec.end_ns = t

    def _complete(self, t: int) -> None:
        if self.errbody is not None:
            self._http_error(t)
        else:
            self.stream.end(t)
        self._finish(reuse=self.keep_alive)

    def _finish(self, reuse: bool) -> None:
        conn = self.conn
        if conn.ex is self:
            conn.ex = None
        if reuse and not conn.closed:
            conn.pool.release(conn)
        else:
            conn.close()
        if not self.finished.done():
            self.finished.set_result(None)


def _status_phrase(status: int) -> str:
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def error_detail(body: str) -> str:
    """The message of an error response body (OpenAI shape or plain text), one short line."""
    try:
        obj = json.loads(body)
    except ValueError:
        return body.strip()[:300]
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            return str(err.get("message") or err)[:300]
        return str(err)[:300]
    return body.strip()[:300]
