"""Load from K local worker processes: `load.workers: K` without a cluster.

The same contract as the Ray load backend (kvbench.load.ray_backend: `remote = True`, `ready`,
`run` with a RemotePhase, `phases`, `record`, `aclose`) and the same worker code (the Ray actor's
LoadWorker, run by kvbench.load.local_worker_proc in a process started with multiprocessing's
spawn context), without Ray: one event loop, one connection pool and one set of kernel stamps
per process, so the client's work is spread over K cores where the machine has them. Per phase:

    split     kvbench.load.worker_phase.split_shares: items round-robin, the concurrency (or the
              in-flight cap of a paced load) split so the shares add up to the scenario's
    stage     each worker gets its share and only the bodies it sends, then a common start a
              few ms ahead (the shipping is not phase time)
    stream    each worker pushes its rows and started ids through its pipe as they happen; the
              driver's loop reads the pipe as soon as it is readable and writes each row to
              requests.jsonl then, with the worker's name and pid as extra columns
    lost      a worker process that dies closes its pipe: the rows it had pushed are read first
              (none is lost), then its started-not-finished requests become `worker_lost` rows and
              its never-started ones `not_sent` rows (WorkerBook.lose, as on Ray), and the run
              fails (kvbench.run.runner: a phase that sent fewer than asked)
    liveness  each worker sends a heartbeat every HEARTBEAT_S from its own loop, whatever its
              requests are doing; one silent for `silence_s` (the run's connect timeout, at least
              SILENCE_MIN_S: a stopped or frozen process) is killed and lost the same way

Clock: every process on one machine reads the same CLOCK_MONOTONIC (time.perf_counter_ns on
Linux), so a worker gets the run's origin unchanged and no offset is measured: its `*_ns` stamps
are on the driver's timeline exactly. `pin`: worker i is pinned to the i-th core of this
process's affinity set (round-robin), else the workers share the driver's cores.
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kvbench.errors import UsageError
from kvbench.load.local_worker_proc import HEARTBEAT_S
from kvbench.load.worker_phase import (
    SILENCE_MIN_S,
    RemotePhase,
    WorkerBook,
    open_phase,
    pack_share,
    silence_bound,
)

START_LEAD_NS = 20_000_000  # the common start, this far after the shares are staged (one small call each)
CALL_TIMEOUT_S = 60.0  # a call a live worker did not answer (staging a large share included)
START_TIMEOUT_S = 60.0  # a spawned process importing kvbench and building its client


@dataclass
class _Proc(WorkerBook):
    process: Any = None
    writer: asyncio.StreamWriter | None = None
    pump: asyncio.Task[None] | None = None  # reads its pipe: replies, and reports (rows written)
    pid: int | None = None
    hostname: str = ""
    cpus: list[int] = field(default_factory=list)
    calls: dict[int, asyncio.Future[Any]] = field(default_factory=dict)
    heard: float = 0.0  # time.monotonic() of its last message (a heartbeat, a report, a reply)

    def extra(self) -> dict[str, Any]:
        return {"worker": self.name, "worker_pid": self.pid, "hostname": self.hostname}


class LocalWorkersBackend:
    """The `processes` load backend: K worker processes on this machine, kept for the whole run."""

    name = "processes"
    remote = True  # the phase passes a RemotePhase, not a coroutine (kvbench.run.throughput)

    def __init__(self, workers: int = 2, pin: bool = False, silence_s: float = SILENCE_MIN_S) -> None:
        if workers < 1:
            raise UsageError("load.workers: at least one load worker")
        if pin and not hasattr(os, "sched_setaffinity"):
            raise UsageError("load.pin: pinning workers to cores needs Linux (os.sched_setaffinity)")
        self.workers_wanted = workers
        self.pin = pin
        self.silence_s = silence_bound(silence_s)
        self.workers: list[_Proc] = []
        self.phases: list[dict[str, Any]] = []  # what each phase's manifest entry records
        self._spec: dict[str, Any] | None = None
        self._ids = itertools.count()
        self._phase: RemotePhase | None = None  # the phase whose rows are coming in
        self._changed = asyncio.Event()
        self._last_end_ns: int | None = None
        self._failure: Exception | None = None  # what stopped the driver taking a worker's rows in

    # --- processes ----------------------------------------------------------------------------------

    async def _ensure_workers(self) -> None:
        if self.workers:
            return
        ctx = multiprocessing.get_context("spawn")
        cores = _cores()
        from kvbench.load.local_worker_proc import open_pipe, worker_main

        for i in range(self.workers_wanted):
            w = _Proc(name=f"load-{i}")
            mine, theirs = ctx.Pipe(duplex=True)
            cpu = cores[i % len(cores)] if self.pin else None
            w.process = ctx.Process(target=worker_main, args=(theirs, w.name, cpu), daemon=True)
            w.process.start()
            theirs.close()  # only the child holds its end: its death reads as end of file here
            reader, w.writer = await open_pipe(mine)
            w.pump = asyncio.create_task(self._pump(w, reader))
            self.workers.append(w)
        for w in self.workers:
            try:
                where = await self._call(w, "where", timeout=START_TIMEOUT_S)
            except Exception as exc:
                w.state, w.error = "failed", f"did not start: {exc}"
                continue
            w.pid, w.hostname, w.cpus, w.state = where["pid"], where["hostname"], where["cpus"], "ready"
        if not any(w.state == "ready" for w in self.workers):
            first = next((w.error for w in self.workers if w.error), "no worker started")
            await self.aclose()
            raise UsageError(f"load.workers: no local load worker process started: {first}")

    async def _pump(self, w: _Proc, reader: asyncio.StreamReader) -> None:
        """Every message from the worker, handled as it arrives (a report's rows written then)."""
        from kvbench.load.local_worker_proc import read_msg

        try:
            while True:
                self._handle(w, await read_msg(reader))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except Exception as exc:  # writing a row failed (a full disk): the phase fails with it, as local
            self._failure = exc
        finally:
            self._gone(w)

    def _handle(self, w: _Proc, msg: tuple[Any, ...]) -> None:
        w.heard = time.monotonic()
        if msg[0] == "beat":
            return
        if msg[0] == "reply":
            _, cid, ok, value = msg
            fut = w.calls.pop(cid, None)
            if fut is not None and not fut.done():
                fut.set_result(value) if ok else fut.set_exception(RuntimeError(value))
            return
        if self._phase is not None:  # "report"
            end = w.take(msg[1], self._phase, final_when_done=True)
            if end is not None:
                self._last_end_ns = max(self._last_end_ns or 0, end)
            self._changed.set()

    def _gone(self, w: _Proc) -> None:
        """The process died (or closed its pipe): pending calls fail, its requests are accounted."""
        for fut in w.calls.values():
            if not fut.done():
                fut.set_exception(ConnectionError(f"{w.name} (pid {w.pid}) exited"))
        w.calls.clear()
        if w.state == "ready":
            code = w.process.exitcode if w.process is not None else None
            why = f"its process (pid {w.pid}) exited" + (f" with code {code}" if code is not None else "")
            if self._phase is not None:
                w.lose(self._phase, f"{w.name} (pid {w.pid}) on {w.hostname}", why)
            else:
                w.state, w.error = "lost", f"lost: {why}"
        self._changed.set()

    async def _call(self, w: _Proc, method: str, timeout: float = CALL_TIMEOUT_S, **kwargs: Any) -> Any:
        cid = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        from kvbench.load.local_worker_proc import write_msg

        if w.writer is None or w.writer.is_closing() or w.pump is None or w.pump.done():
            raise ConnectionError(f"{w.name} (pid {w.pid}) is gone")
        w.calls[cid] = fut
        try:
            write_msg(w.writer, ("call", cid, method, kwargs))
            await w.writer.drain()
            return await asyncio.wait_for(fut, timeout)
        finally:
            w.calls.pop(cid, None)

    async def _each(self, ws: list[_Proc], method: str, **kwargs: Any) -> list[Any]:
        """The same call on every worker at once; a failure comes back as the exception."""
        return await asyncio.gather(*(self._call(w, method, **kwargs) for w in ws), return_exceptions=True)

    # --- one phase ----------------------------------------------------------------------------------

    async def ready(self, phase: RemotePhase, origin_ns: int) -> None:
        """Processes up and their clients built for this phase's target, before its clock starts."""
        await self._ensure_workers()
        spec = phase.client_spec()
        if spec == self._spec:
            return
        live = [w for w in self.workers if w.state == "ready"]
        for w, res in zip(
            live, await self._each(live, "open", client_spec=spec, origin_ns=origin_ns), strict=True
        ):
            if isinstance(res, BaseException):
                w.state, w.error = "failed", f"could not build its client: {res}"
        self._spec = spec
        if not any(w.state == "ready" for w in self.workers):
            raise UsageError(
                f"load.workers: no local load worker could build its client: {self.workers[0].error}"
            )

    async def run(self, load: Any, items: Sequence[Any], issue: Any) -> None:
        """The LoadBackend entry point: `issue` is the phase (a RemotePhase)."""
        await self.run_items(items, int(load.max_in_flight), bool(load.paced), issue, issue.origin_ns)

    async def run_items(
        self, items: Sequence[Any], concurrency: int, paced: bool, phase: RemotePhase, origin_ns: int
    ) -> None:
        await self.ready(phase, origin_ns)
        ready, shares, record = open_phase(
            self.workers, len(items), concurrency, self.phases, self.name, pinned=self.pin
        )
        self._last_end_ns, self._phase = None, phase
        active = ready[: len(shares)]
        for w in active:
            w.heard = max(w.heard, time.monotonic())
        try:
            for w, (idx, conc) in zip(active, shares, strict=True):
                prepared = [phase.prepare(items[i]) for i in idx]
                w.new_phase(prepared, conc)
                bodies: dict[bytes, int] = {}
                share = pack_share(prepared, bodies)
                await self._started(w, phase, self._call(w, "stage", share=share, bodies=list(bodies)))
            start_ns = time.perf_counter_ns() + START_LEAD_NS  # one clock for all: no offset
            record["started_ns"] = start_ns - origin_ns
            begin = {"paced": paced, "start_ns": start_ns, "retries": phase.retries}
            await asyncio.gather(
                *(
                    self._started(w, phase, self._call(w, "begin", concurrency=w.concurrency, **begin))
                    for w in active
                )
            )
            await self._stream(active)
        except asyncio.CancelledError:
            await self._cancel(active, phase)
            raise
        finally:
            self._phase = None
            record["ended_ns"] = self._last_end_ns
            record["workers"] = [self._worker_record(w) for w in self.workers]
            record["not_sent"] = sum(w.unsent for w in self.workers)
            record["sent"] = len(items) - record["not_sent"]

    async def _started(self, w: _Proc, phase: RemotePhase, call: Any) -> None:
        """A staging or start call; a worker that fails it is lost (its share then not_sent)."""
        try:
            await call
        except Exception as exc:
            if w.state == "ready":
                self._kill(w)
                w.lose(phase, f"{w.name} (pid {w.pid}) on {w.hostname}", str(exc))

    async def _stream(self, active: list[_Proc]) -> None:
        """Until every worker is done or lost: the rows are written by _readable as they arrive."""
        while any(w.state == "ready" and not w.done for w in active):
            self._changed.clear()
            # asyncio.wait, not wait_for: on Python 3.11 wait_for swallows a cancel (Ctrl-C) that
            # arrives in the loop turn its inner wait completes (CPython gh-86296), and the phase ran on
            waiter = asyncio.ensure_future(self._changed.wait())
            try:
                await asyncio.wait({waiter}, timeout=HEARTBEAT_S)
            finally:
                waiter.cancel()
            if self._failure is not None:
                raise self._failure
            self._lose_silent(active)

    def _lose_silent(self, active: list[_Proc]) -> None:
        """A worker that sent nothing, not even a heartbeat, for silence_s is stopped or frozen: lost."""
        now = time.monotonic()
        for w in active:
            if w.state == "ready" and not w.done and now - w.heard > self.silence_s and self._phase:
                self._kill(w)  # SIGKILL ends a stopped process too; its pipe then closes
                silent = f"silent for {now - w.heard:.0f} s"
                why = f"{silent} (no heartbeat within {self.silence_s:g} s: stopped or frozen)"
                w.lose(self._phase, f"{w.name} (pid {w.pid}) on {w.hostname}", why)

    async def _cancel(self, active: list[_Proc], phase: RemotePhase) -> None:
        live = [w for w in active if w.state == "ready"]
        for w, res in zip(live, await self._each(live, "cancel", timeout=15.0), strict=True):
            if isinstance(res, BaseException):
                if w.state == "ready":
                    self._kill(w)
                    w.lose(phase, f"{w.name} (pid {w.pid})", str(res))
            else:
                w.take(res, phase, final_when_done=True)

    def _worker_record(self, w: _Proc) -> dict[str, Any]:
        return {
            **w.book_record(),
            "pid": w.pid,
            "hostname": w.hostname,
            "cpus": w.cpus,
            "clock_offset_ns": 0,  # one machine, one CLOCK_MONOTONIC
        }

    # --- end of run ---------------------------------------------------------------------------------

    def _kill(self, w: _Proc) -> None:
        if w.process is not None and w.process.is_alive():
            w.process.kill()

    async def aclose(self) -> None:
        """Close each worker's client and end its process (killed if it does not exit in time)."""
        live = [w for w in self.workers if w.state == "ready"]
        for w in live:
            w.state = "closed"  # its pipe's end of file is now expected, not a loss
        await self._each(live, "close", timeout=10.0)
        for w in self.workers:
            if w.process is not None:
                await asyncio.to_thread(w.process.join, 5.0)
                self._kill(w)
                await asyncio.to_thread(w.process.join, 5.0)
            if w.writer is not None:
                w.writer.close()
            if w.pump is not None:
                await asyncio.wait([w.pump], timeout=5.0)

    def record(self) -> dict[str, Any]:
        """The run's view of the backend: each worker process's last state."""
        return {
            "backend": self.name,
            "workers_requested": self.workers_wanted,
            "pinned": self.pin,
            "workers": [self._worker_record(w) for w in self.workers],
            "workers_lost": [w.name for w in self.workers if w.state == "lost"],
        }


def _cores() -> list[int]:
    """The cores this process may run on (Linux); elsewhere every core, and `pin` is not offered."""
    getter = getattr(os, "sched_getaffinity", None)
    return sorted(getter(0)) if getter is not None else list(range(os.cpu_count() or 1))


__all__ = ["SILENCE_MIN_S", "LocalWorkersBackend"]
