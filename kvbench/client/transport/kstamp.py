"""Kernel receive timestamps on TCP sockets: when bytes arrived, not when Python got to them.

Why: a stamp taken in user space (`time.perf_counter_ns()` in a read callback) waits for the
event loop; under load every stamp waits in line, and a benchmark's TTFT would grow with the
benchmark's own load. Linux stamps every received segment in the kernel (software RX
timestamps) and hands the stamp over as ancillary data of `recvmsg` (SO_TIMESTAMPNS), however
late the read.

What the stamp is (measured on loopback, Linux 6.18; see tests/unit/test_kstamp.py):
- loopback takes it in netif_rx while the *sender's* write() is still in the kernel: ~2 us
  after the sender called send(), ~2 us before send() returned (median of 200). It is wire
  time, not read time: with the client's loop held busy for 50 ms, the first token's stamp
  was 7-25 us before the server's "just written" stamp, the loop's own stamp ~30 ms after
  (tests/integration/test_kstamp_ttft.py).
- TCP merges segments that queue up unread into one buffer (tcp_try_coalesce) and the merged
  buffer carries the NEWEST segment's stamp; recvmsg reports the stamp of the last buffer it
  copied from. So a read's stamp is exact when the read carries one segment, and otherwise is
  the arrival of the newest segment in it: an upper bound for every byte of the read, never
  later than the read itself. A partial read does not help: the merge happened on arrival.
  For TTFT this means: a first token read late, after the next tokens came, is stamped with
  the newest one's arrival; the error is then bounded by the tokens' spread, not by the lag
  (the client counts them for the manifest: clock.first_token_reads_with_later_tokens;
  `make bench` shows how often it happens: "first read held later tokens").
- The clock is CLOCK_REALTIME. `ClockMap` maps it onto the run's monotonic clock
  (perf_counter_ns) through an offset sampled tightly (the pair with the smallest bracket of
  many), re-sampled every second so a step of the wall clock costs at most one second of
  stamps, and recorded at start and end (the drift).

Other platforms, or a socket that refuses the option: `enable` returns False, `unavailable()`
says why, and the caller keeps its user-space stamps. `StampedTransport` is the smallest
asyncio transport that reads with recvmsg (asyncio's and uvloop's own read with recv and drop
ancillary data); it hands each read to `protocol.data_received_stamped(data, t_user, t_kernel)`.
Given a send-stamp reader (`tx`, transport/txstamp.TxStamps: duck-typed, `wrote`/`drain`), it
counts what each write queued and drains the socket's error queue once the write is out, and on
a read callback that found no data (a queued TX stamp raises POLLERR, which wakes the reader);
the socket is then watched by `tx.poller(loop)`: the loop, or under uvloop an epoll of our own.
Nothing here imports kvbench.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ipaddress
import os
import socket
import struct
import sys
import time
from typing import Any, Protocol

# Linux values (asm-generic/socket.h); Python exposes SO_TIMESTAMPNS only from 3.12 on some builds.
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
SCM_TIMESTAMPNS = SO_TIMESTAMPNS
_ANC = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0  # one struct timespec
_TIMESPEC = struct.Struct("@qq")
_BUF_SIZE = 256 * 1024  # what uvloop reads at a time
_RESAMPLE_NS = 1_000_000_000


def unavailable() -> str | None:
    """Why this platform gives no kernel receive timestamps; None when it does (Linux).

    KVBENCH_KERNEL_STAMPS=0 turns them off (user-space stamps, the loop's own transport): the
    bench's same-run comparison with the transport as it was.
    """
    if os.environ.get("KVBENCH_KERNEL_STAMPS", "1") == "0":
        return "turned off (KVBENCH_KERNEL_STAMPS=0)"
    if not sys.platform.startswith("linux"):
        return f"no SO_TIMESTAMPNS receive timestamps on {sys.platform}"
    if not hasattr(socket.socket, "recvmsg_into") or not _ANC:
        return "this Python has no recvmsg/CMSG_SPACE"
    return None


def enable(sock: socket.socket) -> bool:
    """Ask the kernel to stamp what `sock` receives; False where it will not."""
    if unavailable() is not None:
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        return bool(sock.getsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS))
    except OSError:
        return False


def stamp_of(ancdata: list[tuple[int, int, bytes]]) -> int | None:
    """The SO_TIMESTAMPNS stamp (CLOCK_REALTIME ns) in recvmsg's ancillary data, if any."""
    for level, kind, data in ancdata:
        if kind == SCM_TIMESTAMPNS and level == socket.SOL_SOCKET and len(data) >= 16:
            sec, nsec = _TIMESPEC.unpack_from(data)
            if sec or nsec:
                return sec * 1_000_000_000 + nsec
    return None


def read(sock: socket.socket, bufsize: int = 65536) -> tuple[bytes, int | None]:
    """One recvmsg: (bytes, kernel receive stamp in CLOCK_REALTIME ns or None). b'' is EOF."""
    data, anc, _flags, _addr = sock.recvmsg(bufsize, _ANC)
    return data, stamp_of(anc)


# --- clocks ----------------------------------------------------------------------------------------------


def sample_offset(tries: int = 64) -> tuple[int, int]:
    """(CLOCK_REALTIME - perf_counter_ns, bracket ns): the tightest of `tries` bracketed reads."""
    mono, real = time.perf_counter_ns, time.time_ns
    best_w, best_off = 1 << 62, 0
    for _ in range(tries):
        a = mono()
        r = real()
        b = mono()
        if b - a < best_w:
            best_w, best_off = b - a, r - (a + b) // 2
    return best_off, best_w


class ClockMap:
    """Kernel (CLOCK_REALTIME) stamps -> the run's perf_counter_ns, with a recorded offset and drift."""

    __slots__ = (
        "buf",
        "end",
        "hi",
        "lo",
        "offset",
        "rejected",
        "sampled_at",
        "stamped",
        "start",
        "view",
        "warm",
        "window_ns",
    )

    def __init__(self) -> None:
        # the read buffer of every transport on this map: one loop reads one socket at a time, and
        # the bytes are copied out before the callback returns (256 KiB per connection would not be)
        self.buf = bytearray(_BUF_SIZE)
        self.view = memoryview(self.buf)
        # Linux turns RX stamping on a moment after the first socket asks (a deferred static key):
        # ask now, with a socket held for the map's life, so the first request's reads are stamped too
        self.warm: socket.socket | None = None
        with contextlib.suppress(OSError):
            self.warm = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.warm.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.offset, self.window_ns = sample_offset()
        self.sampled_at = time.perf_counter_ns()
        self.start = self.offset
        self.lo = self.hi = self.offset
        self.end: int | None = None
        self.stamped = 0  # reads whose time came from the kernel
        # stamps later than the loop's own: a segment that came in while the callback ran (recvmsg
        # took it too; the loop's earlier stamp bounds the read's first bytes better) or a clock step
        self.rejected = 0

    def to_mono(self, real_ns: int, t_user: int) -> int | None:
        """The kernel stamp on the monotonic clock; None when the loop's stamp is the earlier one."""
        if t_user - self.sampled_at > _RESAMPLE_NS:
            self.resample(t_user)
        t = real_ns - self.offset
        if t > t_user + self.window_ns:
            self.rejected += 1
            return None
        self.stamped += 1
        return t

    def resample(self, now: int | None = None) -> None:
        self.offset, w = sample_offset(16)
        self.window_ns = max(self.window_ns, w)
        self.sampled_at = time.perf_counter_ns() if now is None else now
        self.lo, self.hi = min(self.lo, self.offset), max(self.hi, self.offset)

    def finish(self) -> dict[str, Any]:
        """Sample the offset once more and describe the mapping (for the run's manifest)."""
        off, w = sample_offset()
        self.end = off
        self.close()
        self.lo, self.hi = min(self.lo, off), max(self.hi, off)
        return {
            "offset_start_ns": self.start,
            "offset_end_ns": off,
            "drift_ns": off - self.start,
            "offset_span_ns": self.hi - self.lo,
            "calibration_window_ns": max(self.window_ns, w),
            "kernel_stamped_reads": self.stamped,
            "rejected_stamps": self.rejected,
        }

    def close(self) -> None:
        """Let go of the socket that keeps RX stamping turned on (the map still maps)."""
        if self.warm is not None:
            self.warm.close()
            self.warm = None


# --- an asyncio transport that reads with recvmsg ----------------------------------------------------------


class StampedProtocol(Protocol):
    def connection_made(self, transport: Any) -> None: ...

    def data_received_stamped(self, data: bytes, t_user: int, t_kernel: int | None) -> None: ...

    def eof_received(self) -> bool | None: ...

    def connection_lost(self, exc: Exception | None) -> None: ...


class StampedTransport(asyncio.Transport):
    """A connected non-blocking TCP socket driven by loop.add_reader + recvmsg_into.

    Each read is stamped in user space first thing in the callback and handed on with its
    kernel stamp mapped to the monotonic clock (None when the read carried none). Writes go
    straight to the socket; what does not fit waits for add_writer, in order.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        protocol: StampedProtocol,
        clock: ClockMap,
        tx: Any = None,
    ) -> None:
        super().__init__()
        self.tx = tx  # txstamp.TxStamps where the socket takes TX stamps, else None
        self._loop = loop
        # with TX stamps the socket's POLLERR must reach the reader: tx.poller says who watches it
        self._poll = loop if tx is None else tx.poller(loop)
        self._sock = sock
        self._fd = sock.fileno()
        self._protocol = protocol
        self._clock = clock
        self._wbuf: collections.deque[memoryview] = collections.deque()
        self._closing = False
        self._close_when_flushed = False
        self._lost = False
        protocol.connection_made(self)
        self._poll.add_reader(self._fd, self._read_ready)

    def _read_ready(self) -> None:
        t_user = time.perf_counter_ns()  # before anything else
        try:
            n, anc, _flags, _addr = self._sock.recvmsg_into((self._clock.buf,), _ANC)
        except (BlockingIOError, InterruptedError):
            if self.tx is not None:  # woken by POLLERR: a queued TX stamp, which wakes us until read
                self.tx.drain(everything=True)
            return
        except OSError as exc:
            self._fatal(exc)
            return
        if not n:
            self._poll.remove_reader(self._fd)
            if not self._protocol.eof_received():
                self.abort()
            return
        t_kernel = None
        if anc:
            real = stamp_of(anc)
            if real is not None:
                t_kernel = self._clock.to_mono(real, t_user)
        self._protocol.data_received_stamped(bytes(self._clock.view[:n]), t_user, t_kernel)

    # -- writing ---------------------------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._wbuf or self._closing or self._close_when_flushed or not data:
            self.writelines((data,))
            return
        if self.tx is not None:
            self.tx.wrote(len(data))
        try:
            sent = self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self._fatal(exc)
            return
        if sent < len(data):
            self._wbuf.append(memoryview(data).cast("B")[sent:])
            self._poll.add_writer(self._fd, self._write_ready)
        elif self.tx is not None:  # all of it handed to the kernel: on loopback its stamp is queued now
            self.tx.drain()

    def writelines(self, list_of_data: Any) -> None:
        if self._closing or self._close_when_flushed:
            return
        parts = [memoryview(p).cast("B") for p in list_of_data if len(p)]
        if self.tx is not None:
            self.tx.wrote(sum(map(len, parts)))
        if self._wbuf:
            self._wbuf.extend(parts)
            return
        try:
            sent = self._sock.sendmsg(parts) if len(parts) > 1 else self._sock.send(parts[0]) if parts else 0
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self._fatal(exc)
            return
        for p in parts:
            if sent >= len(p):
                sent -= len(p)
                continue
            self._wbuf.append(p[sent:])
            sent = 0
        if self._wbuf:
            self._poll.add_writer(self._fd, self._write_ready)
        elif self.tx is not None:
            self.tx.drain()

    def _write_ready(self) -> None:
        while self._wbuf:
            head = self._wbuf[0]
            try:
                sent = self._sock.send(head)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._fatal(exc)
                return
            if sent < len(head):
                self._wbuf[0] = head[sent:]
                return
            self._wbuf.popleft()
        self._poll.remove_writer(self._fd)
        if self.tx is not None:
            self.tx.drain()
        if self._close_when_flushed:
            self._shutdown(None)

    def get_write_buffer_size(self) -> int:
        return sum(len(p) for p in self._wbuf)

    def can_write_eof(self) -> bool:
        return False

    # -- closing ---------------------------------------------------------------------------------------

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "socket":
            return self._sock
        if name == "peername":
            try:
                return self._sock.getpeername()
            except OSError:
                return default
        return default

    def is_closing(self) -> bool:
        return self._closing or self._close_when_flushed

    def close(self) -> None:
        """Close once what was written has been sent (asyncio's close); abort() drops it."""
        if not self._wbuf:
            self._shutdown(None)
        elif not self._close_when_flushed:
            self._close_when_flushed = True
            self._poll.remove_reader(self._fd)

    def abort(self) -> None:
        self._shutdown(None)

    def _fatal(self, exc: Exception) -> None:
        self._shutdown(exc)

    def _shutdown(self, exc: Exception | None) -> None:
        if self._closing:
            return
        self._closing = True
        self._wbuf.clear()
        self._poll.remove_reader(self._fd)
        self._poll.remove_writer(self._fd)
        self._loop.call_soon(self._lose, exc)

    def _lose(self, exc: Exception | None) -> None:
        if self._lost:
            return
        self._lost = True
        try:
            self._protocol.connection_lost(exc)
        finally:
            self._sock.close()


async def open_stamped(
    loop: asyncio.AbstractEventLoop,
    factory: Any,
    host: str,
    port: int,
    clock: ClockMap | None,
    tx_attach: Any = None,
) -> tuple[asyncio.BaseTransport, Any]:
    """Like loop.create_connection, but reading with kernel stamps where the socket takes them.

    Falls back to the loop's own transport (user-space stamps) when `clock` is None or the
    socket refuses SO_TIMESTAMPNS. `tx_attach(sock)`, called once connected (TX stamp ids count
    from an idle socket), gives the transport its send-stamp reader or None.
    """
    try:  # an IP literal needs no resolver (getaddrinfo runs in a thread pool: 256 connects would queue)
        ip = ipaddress.ip_address(host)
        family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
        infos: list[tuple[Any, Any, Any, Any, Any]] = [(family, socket.SOCK_STREAM, 0, "", (host, port))]
    except ValueError:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    last: OSError | None = None
    for family, kind, proto, _name, addr in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.sock_connect(sock, addr)
        except OSError as exc:
            sock.close()
            last = exc
            continue
        except BaseException:
            sock.close()
            raise
        if clock is not None and enable(sock):
            protocol = factory()
            tx = tx_attach(sock) if tx_attach is not None else None
            return StampedTransport(loop, sock, protocol, clock, tx), protocol
        return await loop.create_connection(factory, sock=sock)
    raise last or OSError(f"cannot resolve {host}:{port}")
