"""kvbench.client.transport.errpoll: a socket whose TX stamp raised POLLERR stays watched under uvloop."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import pytest

from kvbench.client.transport import errpoll, txstamp

linux_only = pytest.mark.skipif(txstamp.unavailable() is not None, reason=str(txstamp.unavailable()))


def _pair() -> tuple[socket.socket, socket.socket]:
    with socket.socket() as lst:
        lst.bind(("127.0.0.1", 0))
        lst.listen()
        client = socket.create_connection(lst.getsockname())
        server, _ = lst.accept()
    client.setblocking(False)
    return client, server


def _errqueue_len(sock: socket.socket) -> int:
    n = 0
    while True:
        try:
            sock.recvmsg(0, 512, txstamp.MSG_ERRQUEUE)
        except BlockingIOError:
            return n
        n += 1


async def _watch(watch: Any, client: socket.socket, server: socket.socket) -> tuple[list[str], list[bytes]]:
    """A stamp left unread on the queue (POLLERR), then data: what the reader saw of each."""
    seen: list[str] = []
    got: list[bytes] = []

    def reader() -> None:
        try:
            got.append(client.recv(100))
        except BlockingIOError:
            seen.append(f"woken with {_errqueue_len(client)} queued")

    assert txstamp.enable(client)
    watch.add_reader(client.fileno(), reader)
    client.send(b"request")  # its stamp is queued before send() returns, and left there
    for _ in range(100):
        await asyncio.sleep(0.002)
        if seen:
            break
    server.send(b"reply")
    for _ in range(100):
        await asyncio.sleep(0.002)
        if got:
            break
    watch.remove_reader(client.fileno())
    return seen, got


def _run(factory: Callable[[], asyncio.AbstractEventLoop] | None, fn: Callable[[Any], Any]) -> Any:
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(fn(None))


@linux_only
def test_under_uvloop_a_queued_stamp_ends_the_loops_own_watch_and_not_the_pollers():
    """The root cause, and the fix: libuv stops polling a socket on POLLERR; errpoll keeps it."""
    uvloop = pytest.importorskip("uvloop")

    async def own(_: Any) -> tuple[list[str], list[bytes]]:
        client, server = _pair()
        with client, server:
            return await _watch(asyncio.get_running_loop(), client, server)

    async def through_poller(_: Any) -> tuple[list[str], list[bytes], bool]:
        client, server = _pair()
        with client, server:
            poller = errpoll.for_loop(asyncio.get_running_loop())
            assert isinstance(poller, errpoll.ErrPoller)
            seen, got = await _watch(poller, client, server)
            return seen, got, poller.ep is None  # the last socket left: the loop lets go of it

    seen, got = _run(uvloop.new_event_loop, own)
    # if this fails, libuv no longer gives up on POLLERR and errpoll may be unneeded under uvloop
    assert seen == ["woken with 1 queued"] and got == [], "uvloop kept watching a socket in POLLERR"
    seen, got, let_go = _run(uvloop.new_event_loop, through_poller)
    assert seen == ["woken with 1 queued"] and got == [b"reply"] and let_go
    seen, got = _run(None, own)  # asyncio's selector hands POLLERR to the reader, and keeps watching
    assert seen == ["woken with 1 queued"] and got == [b"reply"]


def test_asyncio_loops_watch_themselves_and_others_share_one_poller():
    async def pick(_: Any) -> tuple[Any, Any, asyncio.AbstractEventLoop]:
        loop = asyncio.get_running_loop()
        return errpoll.for_loop(loop), errpoll.for_loop(loop), loop

    first, again, loop = _run(None, pick)
    assert first is loop and again is loop and not errpoll.needed(loop)
    uvloop = pytest.importorskip("uvloop")
    first, again, loop = _run(uvloop.new_event_loop, pick)
    assert isinstance(first, errpoll.ErrPoller) and again is first and first.loop is loop


async def test_readers_and_writers_run_and_a_failing_callback_spares_the_rest():
    loop = asyncio.get_running_loop()
    reported: list[BaseException] = []
    loop.set_exception_handler(lambda _loop, ctx: reported.append(ctx["exception"]))
    poller = errpoll.ErrPoller(loop)  # under asyncio too: the poller itself does not care
    calls: list[str] = []
    a, a_peer = _pair()
    b, b_peer = _pair()
    with a, a_peer, b, b_peer:

        def failing() -> None:
            calls.append("a read")
            raise RuntimeError("boom")

        def write_once() -> None:
            calls.append("a write")
            poller.remove_writer(a.fileno())

        def read_b() -> None:
            calls.append("b read")
            b.recv(10)

        poller.add_reader(a.fileno(), failing)
        poller.add_writer(a.fileno(), write_once)  # writable at once
        poller.add_reader(b.fileno(), read_b)
        a_peer.send(b"x")
        b_peer.send(b"y")
        for _ in range(100):
            await asyncio.sleep(0.002)
            if {"a read", "a write", "b read"} <= set(calls):
                break
        assert {"a read", "a write", "b read"} <= set(calls)
        assert reported and isinstance(reported[0], RuntimeError)
        assert poller.remove_writer(a.fileno()) is False  # removed already, by its own callback
        assert poller.remove_reader(a.fileno()) and poller.remove_reader(b.fileno())
        assert poller.ep is None and not poller.cbs
