"""A load worker that runs ON a cluster node: a Ray actor around kvbench's own timed client.

The driver's Ray load backend makes K of these, pinned to nodes, and gives each its share of a
phase's requests, fully prepared (request id, record fields, body bytes): the worker only sends
them, with the same client, transport and timing rules as a local run, at most `concurrency` at
a time (closed loop) or at their arrival times under that cap (paced). It keeps the local retry
rule (same delays, one row per request: the final attempt, or the cancelled one).

Times: the worker's client runs on this node's monotonic clock, shifted by the origin the driver
gives it (the run's origin moved to this clock through the measured offset), so the rows'
`*_ns` stamps are already on the driver's timeline, within the offset's uncertainty; durations
(TTFT, gaps, e2e) are differences on one clock and need no correction.

The driver polls: `poll()` hands over the rows finished since the last poll and the ids started
since then, which is how the driver knows what was in flight if this worker's node disappears.
`cancel()` (an interrupted run) cancels every request; the client marks each `cancelled`, and
those rows come back like the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
import time
from typing import Any

RETRY_BASE_S = 0.2  # the local rule (kvbench.run.context.Run.issue): min(0.2 * 2**attempt, 5 s)
RETRY_MAX_S = 5.0


class LoadWorker:
    """One load worker (an actor on its node): sends its share of a phase, reports rows by poll."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.client: Any = None
        self.session: Any = None
        self.origin_ns = 0
        self.task: asyncio.Task[None] | None = None
        self.rows: list[dict[str, Any]] = []  # finished since the last poll (RequestRecord fields)
        self.started: list[str] = []  # request ids started since the last poll
        self.in_flight = 0
        self.peak_in_flight = 0
        self.error: str | None = None
        self.cpu0 = 0.0  # this process's CPU seconds when the phase started (what sending it costs)
        # called when a row or a started id is added: a worker that pushes its rows (a local worker
        # process, kvbench.load.local_workers) sends them then; a polled one (Ray) leaves it None
        self.notify: Any = None

    def where(self) -> dict[str, Any]:
        import ray

        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "hostname": socket.gethostname(),
            "ip": ray.util.get_node_ip_address(),
            "pid": os.getpid(),
        }

    def clock(self) -> int:
        return time.perf_counter_ns()

    async def open(self, client_spec: dict[str, Any], origin_ns: int) -> None:
        """Build the timed client (the driver's config, headers and transport) on this node."""
        from kvbench.client import ClientConfig, StreamingClient, make_session
        from kvbench.client.heap import freeze_heap

        self.origin_ns = origin_ns
        if self.client is not None:  # the target moved: the old client's connections go
            closer = getattr(self.client, "aclose", None)
            if closer is not None:
                await closer()
        if self.session is None:
            self.session = make_session(
                int(client_spec["concurrency"]), float(client_spec["connect_timeout_s"])
            )
        cfg = ClientConfig(**client_spec["config"])
        self.client = StreamingClient(cfg, self.session, origin_ns, client_spec.get("headers") or None)
        freeze_heap()  # Ray's own heap out of the collector's walk (kvbench.client.heap)

    async def start(
        self,
        share: list[dict[str, Any]],
        bodies: list[bytes],
        *,
        concurrency: int,
        paced: bool,
        start_ns: int,
        retries: int,
    ) -> int:
        """Begin sending `share` at `start_ns` (this node's clock); returns at once (len(share))."""
        if self.task is not None and not self.task.done():
            raise RuntimeError(f"{self.name} is still running a phase")
        self.peak_in_flight = 0
        self.error = None
        self.cpu0 = time.process_time()
        self.task = asyncio.create_task(self._run(share, bodies, concurrency, paced, start_ns, retries))
        return len(share)

    async def _run(
        self,
        share: list[dict[str, Any]],
        bodies: list[bytes],
        concurrency: int,
        paced: bool,
        start_ns: int,
        retries: int,
    ) -> None:
        await asyncio.sleep(max(0.0, (start_ns - time.perf_counter_ns()) / 1e9))
        try:
            if paced:
                sem = asyncio.Semaphore(concurrency)

                async def arrive(spec: dict[str, Any], due: int) -> None:
                    async with sem:
                        await self._one(spec, bodies[spec["body"]], due, retries)

                async with asyncio.TaskGroup() as tg:
                    for spec in share:
                        due = start_ns + int(spec["offset_s"] * 1e9)
                        await asyncio.sleep(max(0.0, (due - time.perf_counter_ns()) / 1e9))
                        tg.create_task(arrive(spec, due))
            else:
                queue = iter(share)

                async def loop() -> None:
                    for spec in queue:
                        await self._one(spec, bodies[spec["body"]], time.perf_counter_ns(), retries)

                async with asyncio.TaskGroup() as tg:
                    for _ in range(min(concurrency, len(share))):
                        tg.create_task(loop())
        except Exception as exc:  # a bug, not a failed request (those are rows): say it to the driver
            self.error = f"{type(exc).__name__}: {exc}"

    async def _one(self, spec: dict[str, Any], body: bytes, scheduled_ns: int, retries: int) -> None:
        from kvbench.client import RequestRecord

        attempt = 0
        self.started.append(spec["request_id"])
        if self.notify is not None:
            self.notify()
        while True:
            attempt += 1
            rec = RequestRecord(
                request_id=spec["request_id"],
                **spec["fields"],
                scheduled_ns=scheduled_ns - self.origin_ns,
                attempt=attempt,
            )
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            final = True
            try:
                await self.client.send(rec, body)
                final = rec.ok or attempt > retries
            finally:
                self.in_flight -= 1
                if final or rec.status == "cancelled":
                    self.rows.append(_fields_of(rec))
                    if self.notify is not None:
                        self.notify()
            if final:
                return
            await asyncio.sleep(min(RETRY_BASE_S * 2**attempt, RETRY_MAX_S))

    async def poll(self) -> dict[str, Any]:
        """Rows finished and ids started since the last poll; `done` once the phase is over here."""
        return self.report()

    def report(self) -> dict[str, Any]:
        """poll()'s answer, taken at once (kvbench.load.worker_phase.WorkerBook.take reads it)."""
        rows, self.rows = self.rows, []
        started, self.started = self.started, []
        done = self.task is None or self.task.done()
        out = {
            "rows": rows,
            "started": started,
            "done": done,
            "in_flight": self.in_flight,
            "peak_in_flight": self.peak_in_flight,
            "error": self.error,
            "cpu_s": time.process_time() - self.cpu0,  # the whole process: Ray's threads too
        }
        if done and self.client is not None:  # where this worker's stamps came from (kernel | user)
            out["clock"] = self.client.clock_manifest()["clock"]
        return out

    async def cancel(self) -> dict[str, Any]:
        """An interrupted run: cancel every request (each becomes a `cancelled` row), then poll."""
        if self.task is not None and not self.task.done():
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.task), 10.0)
        return await self.poll()

    async def close(self) -> None:
        if self.task is not None and not self.task.done():
            await self.cancel()
        closer = getattr(self.client, "aclose", None)
        if closer is not None:
            await closer()
        if self.session is not None:
            await self.session.close()
            self.session = None


_FIELDS: tuple[str, ...] = ()


def _fields_of(rec: Any) -> dict[str, Any]:
    """A row's fields, shallow (every field is a scalar or a list of ints): dataclasses.asdict
    deep-copies and cost ~30 us a row, a worker's largest cost after the request itself."""
    global _FIELDS
    if not _FIELDS:
        _FIELDS = tuple(f.name for f in dataclasses.fields(rec))
    return {name: getattr(rec, name) for name in _FIELDS}
