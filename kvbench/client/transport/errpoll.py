"""An epoll of kvbench's own for sockets with TX stamps, under event loops that give up on POLLERR.

Why: while a socket's error queue holds a TX stamp (txstamp), poll reports POLLERR on it. asyncio's
selector loop hands that to the read callback, which drains the queue. libuv, under uvloop, treats
POLLERR on a polled fd as fatal: `uv__poll_io` (src/unix/poll.c) stops the watcher and reports
UV_EBADF, and uvloop then runs the reader and the writer once and closes the poll
(uvloop/handles/poll.pyx: `__on_uvpoll_event` -> `_fatal_error`). From then on nothing watches
the socket: a write waiting for room never resumes, a response is never read. A stamp is queued when
the stamped byte leaves, and a body larger than the send buffer leaves while the loop waits: `make
run` hung on its first 30k-token prompt. (SO_SELECT_ERR_QUEUE does not help: libuv spares only
POLLERR with POLLPRI, and uvloop never asks for POLLPRI.)

So under any loop but asyncio's own, a socket with TX stamps is watched by this epoll, and the
loop watches only the epoll's fd, which is never in error: readable while a socket in it is ready.
Level-triggered as the loop's own, and POLLERR/POLLHUP go to the reader and the writer as asyncio's
selector hands them. One poller per loop, for as long as it watches a socket. Nothing here imports
kvbench.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import weakref
from collections.abc import Callable
from typing import Any

# Linux's values (sys/epoll.h), so this imports where select has no epoll (TX stamps are Linux-only)
_IN = getattr(select, "EPOLLIN", 0x001)
_OUT = getattr(select, "EPOLLOUT", 0x004)
_ERR = getattr(select, "EPOLLERR", 0x008) | getattr(select, "EPOLLHUP", 0x010)
_READ = _IN | _ERR
_WRITE = _OUT | _ERR
# by id(loop), held by whoever watches through one: a leaked poller cannot keep a closed loop alive
_POLLERS: weakref.WeakValueDictionary[int, ErrPoller] = weakref.WeakValueDictionary()


def needed(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether `loop` must not watch a socket with TX stamps itself (anything but asyncio's loops)."""
    return not type(loop).__module__.startswith("asyncio")


def for_loop(loop: asyncio.AbstractEventLoop) -> Any:
    """What watches a socket with TX stamps under `loop`: the loop itself, or the loop's ErrPoller.

    Either has add_reader/remove_reader/add_writer/remove_writer(fd[, callback]).
    """
    if not needed(loop):
        return loop
    poller = _POLLERS.get(id(loop))
    if poller is None or poller.loop is not loop:
        poller = _POLLERS[id(loop)] = ErrPoller(loop)
    return poller


class ErrPoller:
    """Sockets' readers and writers behind one epoll; the loop watches the epoll's fd alone."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.ep: select.epoll | None = None
        self.cbs: dict[int, list[Callable[[], object] | None]] = {}  # fd -> [reader, writer]

    def add_reader(self, fd: int, callback: Callable[[], object]) -> None:
        self._set(fd, 0, callback)

    def add_writer(self, fd: int, callback: Callable[[], object]) -> None:
        self._set(fd, 1, callback)

    def remove_reader(self, fd: int) -> bool:
        return self._set(fd, 0, None)

    def remove_writer(self, fd: int) -> bool:
        return self._set(fd, 1, None)

    def _set(self, fd: int, slot: int, callback: Callable[[], object] | None) -> bool:
        cbs = self.cbs.get(fd)
        if cbs is None:
            if callback is None:
                return False
            cbs = self.cbs[fd] = [None, None]
            was: int | None = None
        else:
            was = (_IN if cbs[0] is not None else 0) | (_OUT if cbs[1] is not None else 0)
        had = cbs[slot] is not None
        cbs[slot] = callback  # in place: a dispatch round holding this list sees the change
        mask = (_IN if cbs[0] is not None else 0) | (_OUT if cbs[1] is not None else 0)
        if mask != was:
            self._apply(fd, was, mask)
        return had

    def _apply(self, fd: int, was: int | None, mask: int) -> None:
        if self.ep is None:
            self.ep = select.epoll()
            self.loop.add_reader(self.ep.fileno(), self._ready)
        if not mask:
            del self.cbs[fd]
            with contextlib.suppress(OSError):  # closed already: the kernel dropped it
                self.ep.unregister(fd)
            if not self.cbs:
                self.close()
        elif was is None:
            try:
                self.ep.register(fd, mask)
            except FileExistsError:  # a closed socket's number, reused before it was removed here
                self.ep.modify(fd, mask)
        else:
            try:
                self.ep.modify(fd, mask)
            except FileNotFoundError:  # the socket this number was closed unregistered: a new one
                self.ep.register(fd, mask)

    def _ready(self) -> None:
        ep = self.ep
        if ep is None:
            return
        try:
            events = ep.poll(0, len(self.cbs) or 1)
        except InterruptedError:
            return
        cbs_of = self.cbs
        for fd, ev in events:
            cbs = cbs_of.get(fd)
            if cbs is None:
                continue
            # each callback on its own, as the loop runs them: one that raises is reported, the rest run
            if ev & _READ and cbs[0] is not None:
                try:
                    cbs[0]()
                except Exception as exc:
                    self._report(fd, exc)
            if ev & _WRITE and cbs[1] is not None:  # read again: the reader may have removed it
                try:
                    cbs[1]()
                except Exception as exc:
                    self._report(fd, exc)

    def _report(self, fd: int, exc: Exception) -> None:
        self.loop.call_exception_handler(
            {"message": f"exception in a callback for fd {fd}", "exception": exc}
        )

    def close(self) -> None:
        """Stop watching (no socket left): the loop lets go of the epoll's fd."""
        if _POLLERS.get(id(self.loop)) is self:
            del _POLLERS[id(self.loop)]
        ep, self.ep = self.ep, None
        if ep is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed already
                self.loop.remove_reader(ep.fileno())
            ep.close()
        self.cbs.clear()
