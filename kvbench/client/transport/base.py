"""The timed-transport interface: how one timed request reaches the server and its response comes back.

Shaped after httpx's AsyncBaseTransport (one `send`, one `aclose`), but push, not pull: a
transport stamps every piece of the response the moment it leaves the socket and hands it to a
`ResponseSink` at once, because a benchmark's timestamps must not wait for a reader task.

A transport does framing only (HTTP/1.1 chunked, Content-Length, close; interim 1xx). What the
response MEANS (status, headers, SSE events, errors) is decided by the sink, and every failure
the transport sees is raised as one of the exceptions below, so the client maps failures to
record error types in one place, for every transport. Cancellation: a transport aborts the
connection and lets CancelledError propagate.

Implementations: `http1.Http1Transport` (kvbench's own keep-alive HTTP/1.1, the default for
http://), `aiohttp.AiohttpTransport` (https://, or chosen with `target.transport: aiohttp`).
HEAD_LIMITS is what every path (both timed transports and the untimed session) accepts in a
response head, so no path refuses a response another accepted.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

# A head line (status line, or `name: value`) of at most MAX_HEAD_LINE bytes and at most
# MAX_HEAD_FIELDS header lines: aiohttp's own defaults (8,190 bytes, 128) refused heads real
# gateways send (a 64 KiB cookie or trace header) that kvbench's HTTP/1.1 transport took.
MAX_HEAD_LINE = 128 * 1024
MAX_HEAD_FIELDS = 256
HEAD_LIMITS = {
    "max_line_size": MAX_HEAD_LINE,
    "max_field_size": MAX_HEAD_LINE,
    "max_headers": MAX_HEAD_FIELDS,
}


class TransportError(Exception):
    """Base of what a transport raises; the message is one line, safe to show."""


class ConnectFailed(TransportError):
    """No connection: refused, unresolvable, timed out. Nothing was sent."""


class ConnectionLost(TransportError):
    """The server closed the connection before the response was complete.

    `unanswered`: not one byte of response came, so the server cannot have processed the request
    (a transport may resend it once on a fresh connection: the keep-alive race).
    """

    def __init__(self, message: str, unanswered: bool = False) -> None:
        super().__init__(message)
        self.unanswered = unanswered


class BadResponse(TransportError):
    """The server's bytes are not an HTTP/1.x response."""


class ResponseSink(Protocol):
    """Where a response goes. `t` is nanoseconds since the run's clock origin, stamped on arrival.

    head(): the final status line and headers (names lower-case); True = the sink has decided
    (the record failed: a redirect, a compressed body), stop reading and drop the connection.
    feed(): body bytes as they arrived; True = stop reading (the record is final).
    end(): the body ended normally (framing complete or, for unframed bodies, the close).
    done: the record finished cleanly mid-body (SSE `[DONE]`); the rest of the body may be drained
    for keep-alive, but nobody waits for it.
    stamp(): said before a feed() whose `t` may come from elsewhere than the loop's read callback
    (http1's kernel receive stamps): `t_user` is the loop's stamp of the same read, `kernel` whether
    `t` is the kernel's. A transport that stamps in the loop need not call it.
    """

    done: bool

    def head(self, t: int, status: int, reason: str, headers: Mapping[str, str]) -> bool: ...

    def feed(self, t: int, chunk: bytes) -> bool: ...

    def stamp(self, t_user: int, kernel: bool) -> None: ...

    def end(self, t: int) -> None: ...


@dataclass(frozen=True, slots=True)
class TimedRequest:
    """The fixed part of every timed request to one endpoint (built once per target, not per request)."""

    url: str  # full URL of the completions endpoint, without credentials
    host_header: str
    address: tuple[str, int]  # (host, port) to connect to
    path: str  # request target: path and query
    headers: tuple[tuple[str, str], ...]  # every header but Host, Content-Length, X-Request-Id


class TimedTransport(ABC):
    """Sends timed requests; one instance per (run, transport kind), shared by all workers."""

    name: str = ""

    @abstractmethod
    async def send(
        self, req: TimedRequest, request_id: str, body: bytes, sink: ResponseSink, origin_ns: int
    ) -> None:
        """POST `body`; stream the response into `sink` until it says stop or the body ends.

        Returns normally when the record is final; raises a TransportError for transport
        failures and re-raises CancelledError after dropping the connection. A timeout is the
        caller's (it cancels this coroutine's scope); the transport must drop the connection then.
        """

    @abstractmethod
    async def aclose(self) -> None:
        """Close every connection."""
