"""The program of one local load worker process (kvbench.load.local_workers starts K of them).

It runs kvbench.load.ray_worker.LoadWorker, the Ray actor's own code, in its own event loop
(uvloop where installed, as the CLI does), with its own connections and kernel stamps, and
talks to the driver over one pipe:

    framing            length-prefixed pickles over the Pipe's socket pair, read and written as
                       asyncio streams on both ends (a blocking pipe write would stall a loop)
    driver -> worker   ("call", id, method, kwargs): open, stage, begin, cancel, close, clock, where
    worker -> driver   ("reply", id, ok, value) and ("report", LoadWorker.report()): rows and
                       started ids PUSHED as they happen (coalesced per loop turn), so a row is in
                       the pipe the moment its request ends and a worker killed afterwards cannot
                       take it with it; the report sent when its phase task ends says done

Ctrl-C goes to the whole process group: the worker ignores it and the driver cancels its
requests (each comes back a `cancelled` row). A driver that dies closes the pipe: the worker
sees end of file and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import signal
import socket
from typing import Any

from kvbench.load.ray_worker import LoadWorker

HEARTBEAT_S = 0.5  # ("beat",) this often from the worker's own loop: its liveness (load.local_workers)


class LocalLoadWorker(LoadWorker):
    """LoadWorker on this machine: no Ray node to name; the share staged before the common start."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._share: list[dict[str, Any]] = []
        self._bodies: list[bytes] = []

    def where(self) -> dict[str, Any]:
        getter = getattr(os, "sched_getaffinity", None)  # Linux: which cores it may run on
        cpus = sorted(getter(0)) if getter is not None else []
        return {"hostname": socket.gethostname(), "pid": os.getpid(), "cpus": cpus}

    async def stage(self, share: list[dict[str, Any]], bodies: list[bytes]) -> int:
        """The phase's share and bodies, shipped before the start time is set (shipping takes time)."""
        self._share, self._bodies = share, bodies
        return len(share)

    async def begin(self, *, concurrency: int, paced: bool, start_ns: int, retries: int) -> int:
        share, bodies, self._share, self._bodies = self._share, self._bodies, [], []
        return await self.start(
            share, bodies, concurrency=concurrency, paced=paced, start_ns=start_ns, retries=retries
        )


def worker_main(conn: Any, name: str, cpu: int | None) -> None:
    """The process's entry point (multiprocessing, spawn): serve the driver until close or EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    try:
        import uvloop

        factory: Any = uvloop.new_event_loop
    except ModuleNotFoundError:
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(_serve(conn, name))


async def open_pipe(conn: Any) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """One end of a multiprocessing Pipe (a socket pair) as asyncio streams: writes never block the
    loop (a large share, a burst of rows), reads wake it the moment a frame is in."""
    sock = socket.socket(fileno=os.dup(conn.fileno()))
    conn.close()
    return await asyncio.open_connection(sock=sock, limit=1 << 20)


def write_msg(writer: asyncio.StreamWriter, msg: tuple[Any, ...]) -> None:
    """One frame: its length, then the pickled message (the processes run the same code)."""
    data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
    writer.write(len(data).to_bytes(8, "little") + data)


async def read_msg(reader: asyncio.StreamReader) -> tuple[Any, ...]:
    size = int.from_bytes(await reader.readexactly(8), "little")
    return pickle.loads(await reader.readexactly(size))  # our own child, running this same code


async def _serve(conn: Any, name: str) -> None:
    loop = asyncio.get_running_loop()
    worker = LocalLoadWorker(name)
    reader, writer = await open_pipe(conn)
    tasks: set[asyncio.Task[None]] = set()
    closing = False
    pending = False

    def send(msg: tuple[Any, ...]) -> None:
        if not writer.is_closing():  # else the driver is gone: nobody to tell
            write_msg(writer, msg)

    def flush() -> None:
        nonlocal pending
        pending = False
        send(("report", worker.report()))

    def notify() -> None:
        nonlocal pending
        if not pending:
            pending = True
            loop.call_soon(flush)

    async def handle(cid: int, method: str, kwargs: dict[str, Any]) -> None:
        nonlocal closing
        try:
            value = getattr(worker, method)(**kwargs)
            if asyncio.iscoroutine(value):
                value = await value
        except Exception as exc:  # said to the driver in one line; the driver decides
            send(("reply", cid, False, f"{type(exc).__name__}: {exc}"))
            return
        if method == "begin" and worker.task is not None:
            worker.task.add_done_callback(lambda _t: flush())  # the last report: done, with the rest
        send(("reply", cid, True, value))
        if method == "close":
            closing = True
            reader.feed_eof()

    async def beat() -> None:  # liveness: the driver loses a worker silent for its silence bound
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            send(("beat",))

    worker.notify = notify
    heart = loop.create_task(beat())
    try:
        while not closing:
            try:
                _kind, cid, method, kwargs = await read_msg(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            task = loop.create_task(handle(cid, method, kwargs))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    finally:
        heart.cancel()
        with contextlib.suppress(Exception):
            await worker.close()
        with contextlib.suppress(Exception):
            await writer.drain()
            writer.close()
