"""Kernel transmit timestamps on TCP sockets: when a request's last byte left, not when Python wrote it.

Why: the user-space send stamp is taken before the write (and, on a fresh connection, before the
connect), so a row's TTFT counted the client's own connect, write and scheduling. Linux stamps a
send in the kernel as the segment carrying its last byte goes to the device (software TX stamps,
SO_TIMESTAMPING) and queues the stamp on the socket's error queue, read with
recvmsg(MSG_ERRQUEUE). With the receive side's SO_TIMESTAMPNS (kstamp) TTFT is then kernel to
kernel.

The contract (Documentation/networking/timestamping.rst; include/uapi/linux/net_tstamp.h and
errqueue.h for the values below, which Python's socket module does not export):
- flags SOF_TIMESTAMPING_TX_SOFTWARE (1<<1) | SOFTWARE (1<<4) | OPT_ID (1<<7) | OPT_TSONLY (1<<11):
  stamp transmissions in software, report them, number them, and loop back no payload (so no
  privilege is needed: net.core.tstamp_allow_data does not apply).
- TCP stamps the last byte of every send() call. With OPT_ID the error message's
  `sock_extended_err.ee_data` is that byte's offset since the option was set: set on an idle
  socket (right after connect, snd_una == write_seq), the first write of N bytes is reported
  as N - 1. A u32 that wraps, so "covers" is compared modulo 2**32.
- each message carries SCM_TIMESTAMPING (= SO_TIMESTAMPING, 37): three struct timespec, [0] the
  software stamp on CLOCK_REALTIME; and IP_RECVERR (11, level SOL_IP) or IPV6_RECVERR (25, level
  SOL_IPV6): sock_extended_err {u32 errno=ENOMSG, u8 origin=SO_EE_ORIGIN_TIMESTAMPING (4), u8 type,
  u8 code, u8 pad, u32 info=SCM_TSTAMP_SND (0), u32 data}.
- a non-empty error queue makes poll report POLLERR, which asyncio's selector hands to the read
  callback: whoever turns stamps on must drain the queue, or the loop spins (StampedTransport does,
  on every read callback that finds no data and while a stamp is due). libuv (uvloop) instead
  stops watching a socket on POLLERR for good, so there the socket is watched through an epoll of
  our own (errpoll) and a stamp queued while the loop waits (a body larger than the send buffer)
  reaches the reader as under asyncio.

Measured on loopback (Linux 6.18, tests/unit/test_txstamp.py): the stamp is queued before send()
returns, between the user stamp taken before the write and the server's receive stamp, when the
receiver has room; a body the socket buffers cannot take unread is stamped when its last byte
leaves, later, while the loop waits (tests/integration/test_kstamp_ttft.py, 130k tokens).
Imports only errpoll from kvbench.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import sys
from typing import Any

from kvbench.client.transport import errpoll

# plain ints: the socket module's MsgFlag enum costs a conversion on every call of the hot path
SO_TIMESTAMPING = int(getattr(socket, "SO_TIMESTAMPING", 37))  # asm-generic/socket.h
SCM_TIMESTAMPING = SO_TIMESTAMPING
SOF_TIMESTAMPING_TX_SOFTWARE = 1 << 1  # linux/net_tstamp.h
SOF_TIMESTAMPING_SOFTWARE = 1 << 4
SOF_TIMESTAMPING_OPT_ID = 1 << 7
SOF_TIMESTAMPING_OPT_TSONLY = 1 << 11
FLAGS = (
    SOF_TIMESTAMPING_TX_SOFTWARE
    | SOF_TIMESTAMPING_SOFTWARE
    | SOF_TIMESTAMPING_OPT_ID
    | SOF_TIMESTAMPING_OPT_TSONLY
)
MSG_ERRQUEUE = int(getattr(socket, "MSG_ERRQUEUE", 0x2000))  # linux/socket.h
IP_RECVERR = int(getattr(socket, "IP_RECVERR", 11))  # linux/in.h
IPV6_RECVERR = int(getattr(socket, "IPV6_RECVERR", 25))  # linux/in6.h
SO_EE_ORIGIN_TIMESTAMPING = 4  # linux/errqueue.h (SO_EE_ORIGIN_TXSTATUS)
SCM_TSTAMP_SND = 0
_ENOMSG = 42
_EXT_ERR = struct.Struct("@IBBBBII")  # struct sock_extended_err
_EXT_KEY = struct.Struct("@IB3xII")  # the same, the fields read: errno, origin, info, data
_SOL_SOCKET = int(socket.SOL_SOCKET)
_RECVERR = frozenset({(int(socket.IPPROTO_IP), IP_RECVERR), (int(socket.IPPROTO_IPV6), IPV6_RECVERR)})
_TIMESPEC = struct.Struct("@qq")
_ANC = socket.CMSG_SPACE(48) + socket.CMSG_SPACE(_EXT_ERR.size + 28) if hasattr(socket, "CMSG_SPACE") else 0
_MAX_DRAIN = 64  # messages per drain: a queue that never empties is not ours to spin on


def unavailable() -> str | None:
    """Why this platform gives no kernel TX stamps; None when it may (Linux; the socket decides).

    KVBENCH_TX_STAMPS=0 turns them off alone (receive stamps stay): the bench's same-run comparison.
    """
    if os.environ.get("KVBENCH_TX_STAMPS", "1") == "0":
        return "turned off (KVBENCH_TX_STAMPS=0)"
    if not sys.platform.startswith("linux"):
        return f"no SO_TIMESTAMPING transmit timestamps on {sys.platform}"
    if not hasattr(socket.socket, "recvmsg") or not _ANC:
        return "this Python has no recvmsg/CMSG_SPACE"
    return None


def enable(sock: socket.socket) -> bool:
    """Ask for software TX stamps on a CONNECTED, idle socket (OPT_ID counts from here); False if refused."""
    if unavailable() is not None:
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING, FLAGS)
        return sock.getsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING) & FLAGS == FLAGS
    except OSError:
        return False


def parse(ancdata: list[tuple[int, int, bytes]]) -> tuple[int, int] | None:
    """(ee_data byte offset, CLOCK_REALTIME ns) of one error-queue message; None if not a TX_SND stamp."""
    real = key = None
    for level, kind, data in ancdata:
        if kind == SCM_TIMESTAMPING and level == _SOL_SOCKET and len(data) >= 16:
            sec, nsec = _TIMESPEC.unpack_from(data)  # ts[0]: the software stamp
            if sec or nsec:
                real = sec * 1_000_000_000 + nsec
        elif (level, kind) in _RECVERR and len(data) >= 16:
            errno, origin, info, data_ = _EXT_KEY.unpack_from(data)
            if errno == _ENOMSG and origin == SO_EE_ORIGIN_TIMESTAMPING and info == SCM_TSTAMP_SND:
                key = data_
    return None if real is None or key is None else (key, real)


def covers(key: int, last_byte: int) -> bool:
    """Whether a stamp for byte offset `key` is at or after `last_byte` (u32 offsets that wrap)."""
    return (key - last_byte) & 0xFFFFFFFF < 0x80000000


class TxStamps:
    """One socket's send stamps: the offset of the current request's last byte and when it left."""

    __slots__ = ("due", "queued", "real", "sock", "stamps")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.queued = 0  # bytes handed to the socket since enable()
        self.due = False  # the current request's stamp has not been read yet
        self.real: int | None = None  # its CLOCK_REALTIME stamp once read
        self.stamps = 0  # TX stamps read on this socket, covering or not

    def wrote(self, nbytes: int) -> None:
        """Bytes of the current request queued for sending; its stamp is that of its last byte."""
        if nbytes:
            self.queued += nbytes
            self.due, self.real = True, None

    def drain(self, everything: bool = False) -> None:
        """Read the error queue without blocking until the due stamp came (`everything`: until empty).

        One stamp comes per send(), so the common request (one write) costs one recvmsg and no
        EAGAIN; a stamp left behind raises POLLERR, and the reader's empty wake-up reads it.
        """
        last = (self.queued - 1) & 0xFFFFFFFF
        for _ in range(_MAX_DRAIN):
            try:
                _data, anc, _flags, _addr = self.sock.recvmsg(0, _ANC, MSG_ERRQUEUE)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # an error on the socket itself: the read path reports it
                return
            got = parse(anc)
            if got is not None:
                self.stamps += 1
                if self.due and covers(got[0], last):
                    self.due, self.real = False, got[1]
                    if not everything:
                        return

    @staticmethod
    def poller(loop: asyncio.AbstractEventLoop) -> Any:
        """Who watches the socket under `loop` (StampedTransport asks): its POLLERR must reach the reader."""
        return errpoll.for_loop(loop)

    def take(self) -> int | None:
        """The current request's stamp (CLOCK_REALTIME ns), reading the queue once more if still due."""
        if self.due:
            self.drain()
        real, self.real = self.real, None
        self.due = False
        return real


def attach(sock: socket.socket) -> TxStamps | None:
    """A send-stamp reader for a connected socket (kstamp.open_stamped's hook); None where refused."""
    return TxStamps(sock) if enable(sock) else None


def to_mono(clock: Any, real_ns: int, now: int) -> int | None:
    """A TX stamp on the run's monotonic clock through kstamp.ClockMap `clock`; None if after `now`."""
    if now - clock.sampled_at > 1_000_000_000:  # re-sampled as ClockMap.to_mono does
        clock.resample(now)
    t = real_ns - clock.offset
    return None if t > now + clock.window_ns else t


def settle(conn: Any, sink: Any, origin: int, now_abs: int) -> None:
    """Make the kernel's stamp of the request's last byte the row's start, where it came in time.

    `conn` is http1's connection (`.tx`, `.pool.clock`), `sink` its exchange's ResponseStream (`.rec`).
    Called at the first response bytes: the stamp is queued before the server can have read the
    last byte, so one still missing then never comes, and the row keeps the loop's stamp
    (`send_clock_source: user`). A stamp before the loop's own (a clock step) is not trusted.
    """
    real = conn.tx.take()
    rec = getattr(sink, "rec", None)
    if rec is None or rec.sent_ns is None or real is None:
        return
    t = to_mono(conn.pool.clock, real, now_abs)
    if t is None or t - origin < rec.sent_ns:
        return
    rec.sent_user_ns, rec.sent_ns = rec.sent_ns, t - origin
    rec.send_clock_source = "kernel_tx"
