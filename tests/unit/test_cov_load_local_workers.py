"""Local load workers in one process: the worker program (kvbench.load.local_worker_proc._serve)
runs as a task on this loop at the other end of a real multiprocessing Pipe, and the driver
(kvbench.load.local_workers.LocalWorkersBackend) talks to it exactly as to a spawned process, so
framing, calls, pushed reports, loss accounting and liveness are checked against the embedded
mock without the seconds a spawn costs (tests/integration/test_local_workers_runs.py spawns)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import multiprocessing
import os
import socket
import time
from collections import Counter
from typing import Any

import pytest

from kvbench.client import ClientConfig, build_body
from kvbench.errors import UsageError
from kvbench.load import local_worker_proc as proc_mod
from kvbench.load.local_worker_proc import _serve, open_pipe, read_msg, write_msg
from kvbench.load.local_workers import SILENCE_MIN_S, LocalWorkersBackend, _Proc
from kvbench.load.worker_phase import NOT_SENT, WORKER_LOST, PreparedRequest, pack_share
from kvbench.mock.api.server import MockServer

WAIT_S = 30.0  # generous: a bound against a hang, never a speed claim


@pytest.fixture(autouse=True)
def keep_the_test_heap(monkeypatch: pytest.MonkeyPatch) -> None:
    # the worker freezes its process's heap once its client is built; here that process is pytest's
    monkeypatch.setattr("kvbench.client.heap.freeze_heap", lambda: 0)


@dataclasses.dataclass
class Item:
    index: int
    prompt_id: int
    scheduled_offset_s: float = 0.0


class Phase:
    """What kvbench.run gives a remote backend: prepared requests in, rows out."""

    retries = 0

    def __init__(self, base_url: str, concurrency: int = 4, cfg: dict[str, Any] | None = None) -> None:
        self.cfg = ClientConfig(base_url=base_url, model="m", max_tokens=4)
        self.spec_cfg = cfg
        self.concurrency, self.origin_ns, self.seq = concurrency, time.perf_counter_ns(), 0
        self.rows: list[dict[str, Any]] = []
        self.started_ids: list[str] = []

    def prepare(self, item: Item) -> PreparedRequest:
        self.seq += 1
        fields = {"phase": "cached", "label": "cached", "prompt_id": item.prompt_id}
        body = build_body(self.cfg, f"prompt {item.prompt_id} " + "w " * 40)
        return PreparedRequest(f"run-cached-{self.seq}", fields, body, item.scheduled_offset_s)

    def client_spec(self) -> dict[str, Any]:
        cfg = self.spec_cfg if self.spec_cfg is not None else dataclasses.asdict(self.cfg)
        return {"config": cfg, "headers": {}, "concurrency": self.concurrency, "connect_timeout_s": 10.0}

    def started(self, request_id: str) -> None:
        self.started_ids.append(request_id)

    def record(self, rec: Any, extra: dict[str, Any]) -> None:
        self.rows.append({**rec.to_row(), **extra})


async def attach(backend: LocalWorkersBackend, name: str) -> tuple[_Proc, asyncio.Task[None]]:
    """A worker served by a task on this loop, wired in as _ensure_workers wires a process."""
    mine, theirs = multiprocessing.Pipe(duplex=True)
    serving = asyncio.create_task(_serve(theirs, name))
    w = _Proc(name=name)
    reader, w.writer = await open_pipe(mine)
    w.pump = asyncio.create_task(backend._pump(w, reader))
    where = await backend._call(w, "where", timeout=WAIT_S)
    w.pid, w.hostname, w.cpus, w.state = where["pid"], where["hostname"], where["cpus"], "ready"
    backend.workers.append(w)
    return w, serving


async def detach(backend: LocalWorkersBackend, tasks: list[asyncio.Task[None]]) -> None:
    await backend.aclose()
    await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), WAIT_S)


# --- framing -----------------------------------------------------------------------------------------


async def test_frames_cross_the_pipe_whole_and_in_order_at_any_size() -> None:
    a, b = multiprocessing.Pipe(duplex=True)
    (_ra, wa), (rb, _wb) = await open_pipe(a), await open_pipe(b)
    msgs = [("beat",), ("report", {"rows": [{"text": "y" * 3_000_000}]}), ("reply", 7, True, [1, 2])]

    async def send() -> None:
        for m in msgs:
            write_msg(wa, m)
        await wa.drain()

    async def receive() -> list[tuple[Any, ...]]:
        return [await read_msg(rb) for _ in msgs]

    _, got = await asyncio.gather(send(), receive())
    assert got == msgs
    wa.write((100).to_bytes(8, "little") + b"short")  # a frame cut by the writer's death
    wa.close()
    with pytest.raises(asyncio.IncompleteReadError):
        await read_msg(rb)


# --- the worker program, spoken to frame by frame --------------------------------------------------


class Driver:
    """The driver's end of one worker's pipe, as raw frames."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.ids = reader, writer, 0
        self.reports: list[dict[str, Any]] = []
        self.beats = 0

    async def call(self, method: str, **kwargs: Any) -> tuple[bool, Any]:
        self.ids += 1
        write_msg(self.writer, ("call", self.ids, method, kwargs))
        await self.writer.drain()
        while True:
            msg = await asyncio.wait_for(read_msg(self.reader), WAIT_S)
            if msg[0] == "reply" and msg[1] == self.ids:
                return msg[2], msg[3]
            self.keep(msg)

    def keep(self, msg: tuple[Any, ...]) -> None:
        if msg[0] == "report":
            self.reports.append(msg[1])
        elif msg[0] == "beat":
            self.beats += 1

    async def until_done(self) -> None:
        while not (self.reports and self.reports[-1]["done"]):
            self.keep(await asyncio.wait_for(read_msg(self.reader), WAIT_S))


async def open_worker(name: str = "load-t") -> tuple[Driver, asyncio.Task[None]]:
    mine, theirs = multiprocessing.Pipe(duplex=True)
    serving = asyncio.create_task(_serve(theirs, name))
    return Driver(*await open_pipe(mine)), serving


async def test_a_worker_answers_each_call_and_a_failing_one_in_one_line() -> None:
    drv, serving = await open_worker()
    ok, where = await drv.call("where")
    assert ok and where["pid"] == os.getpid() and where["hostname"] == socket.gethostname()
    assert where["cpus"] == sorted(os.sched_getaffinity(0))
    ok, err = await drv.call("no_such_method")
    assert not ok and err.startswith("AttributeError: ") and "\n" not in err
    ok, err = await drv.call("stage", share=[])  # a call missing an argument: said, not raised
    assert not ok and err.startswith("TypeError: ") and "bodies" in err
    ok, staged = await drv.call("stage", share=[], bodies=[])
    assert ok and staged == 0
    ok, _ = await drv.call("close")
    assert ok
    await asyncio.wait_for(serving, WAIT_S)  # close ends the program
    assert await drv.reader.read() == b""


async def test_a_staged_share_is_sent_and_every_request_pushed_back_as_a_row() -> None:
    async with MockServer("ci", profile_overrides={"time_scale": 0.01}) as srv:
        phase = Phase(srv.base_url, concurrency=3)
        drv, serving = await open_worker()
        spec = phase.client_spec()
        assert (await drv.call("open", client_spec=spec, origin_ns=phase.origin_ns))[0]
        prepared = [phase.prepare(Item(i, i % 3)) for i in range(12)]
        bodies: dict[bytes, int] = {}
        share = pack_share(prepared, bodies)
        assert await drv.call("stage", share=share, bodies=list(bodies)) == (True, 12)
        start_ns = time.perf_counter_ns() + 1_000_000
        begin = {"concurrency": 3, "paced": False, "start_ns": start_ns, "retries": 0}
        assert await drv.call("begin", **begin) == (True, 12)
        ok, err = await drv.call("begin", **begin)  # a second phase while one runs is refused
        assert not ok and "still running a phase" in err
        await drv.until_done()
        rows = [r for rep in drv.reports for r in rep["rows"]]
        started = [rid for rep in drv.reports for rid in rep["started"]]
        want = [p.request_id for p in prepared]
        assert sorted(r["request_id"] for r in rows) == sorted(want) == sorted(started)
        assert all(r["status"] == "ok" and r["sent_ns"] >= start_ns - phase.origin_ns for r in rows)
        last = drv.reports[-1]
        assert 1 <= last["peak_in_flight"] <= 3 and last["in_flight"] == 0 and last["error"] is None
        assert (await drv.call("close"))[0]
        await asyncio.wait_for(serving, WAIT_S)


async def test_a_worker_whose_driver_is_gone_exits_and_beats_while_it_waits(monkeypatch) -> None:
    monkeypatch.setattr(proc_mod, "HEARTBEAT_S", 0.01)
    drv, serving = await open_worker()
    while drv.beats < 2:  # its loop beats with nothing asked of it
        drv.keep(await asyncio.wait_for(read_msg(drv.reader), WAIT_S))
    drv.writer.close()  # the driver died: end of file on the worker's side
    await asyncio.wait_for(serving, WAIT_S)
    assert serving.exception() is None


# --- the driver against in-process workers -----------------------------------------------------------


async def test_two_workers_split_a_phase_and_each_request_is_one_row() -> None:
    backend = LocalWorkersBackend(workers=2)
    async with MockServer("ci", profile_overrides={"time_scale": 0.01}) as srv:
        ws = [await attach(backend, f"load-{i}") for i in range(2)]
        phase = Phase(srv.base_url, concurrency=5)
        try:
            await backend.run_items([Item(i, i % 4) for i in range(31)], 5, False, phase, phase.origin_ns)
        finally:
            await detach(backend, [t for _, t in ws])
    ids = Counter(r["request_id"] for r in phase.rows)
    assert len(ids) == 31 and set(ids.values()) == {1} and all(r["status"] == "ok" for r in phase.rows)
    assert Counter(r["worker"] for r in phase.rows) == {"load-0": 16, "load-1": 15}  # round-robin
    assert all(r["worker_pid"] == os.getpid() for r in phase.rows)
    (rec,) = backend.phases
    assert (rec["requests"], rec["sent"], rec["not_sent"]) == (31, 31, 0)
    assert sorted(w["concurrency"] for w in rec["workers"]) == [2, 3]  # 5 split, adding up
    assert all(w["peak_in_flight"] <= w["concurrency"] for w in rec["workers"])
    assert rec["started_ns"] <= min(r["sent_ns"] for r in phase.rows)
    assert rec["ended_ns"] == max(r["end_ns"] for r in phase.rows)
    assert sorted(phase.started_ids) == sorted(ids)
    assert backend.record()["workers_lost"] == [] and all(w.state == "closed" for w in backend.workers)


async def test_a_worker_lost_mid_phase_leaves_every_request_accounted_once() -> None:
    backend = LocalWorkersBackend(workers=2)
    # each request waits a while for its first token: the victim is surely mid-phase when it goes
    async with MockServer("ci", faults={"stall_first_token_s": 0.3}) as srv:
        (victim, victim_task), (_, other_task) = [await attach(backend, f"load-{i}") for i in range(2)]
        phase = Phase(srv.base_url, concurrency=2)
        run = asyncio.create_task(
            backend.run_items([Item(i, i) for i in range(8)], 2, False, phase, phase.origin_ns)
        )
        deadline = time.monotonic() + WAIT_S
        while not victim.started and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        victim_task.cancel()  # its program ends at once: the pipe closes as a process's would
        try:
            await asyncio.wait_for(run, WAIT_S)
        finally:
            await detach(backend, [other_task])
    ids = Counter(r["request_id"] for r in phase.rows)
    assert len(ids) == 8 and set(ids.values()) == {1}  # every request a row, exactly once
    mine = [r for r in phase.rows if r["worker"] == victim.name]
    assert {r["error_type"] for r in mine if r["status"] != "ok"} <= {WORKER_LOST, NOT_SENT, "cancelled"}
    assert all(r["status"] == "ok" for r in phase.rows if r["worker"] != victim.name)
    (rec,) = backend.phases
    book = next(w for w in rec["workers"] if w["worker"] == victim.name)
    assert book["state"] == "lost" and book["not_issued"] == rec["not_sent"]
    assert rec["sent"] == 8 - rec["not_sent"]
    assert backend.record()["workers_lost"] == [victim.name]
    assert all(
        f"pid {os.getpid()}" in r["error_message"] for r in mine if r["error_type"] in (WORKER_LOST, NOT_SENT)
    )


async def test_an_interrupted_phase_brings_back_a_row_for_every_request_started() -> None:
    backend = LocalWorkersBackend(workers=2)
    async with MockServer("ci", faults={"stall_first_token_s": 1.5}) as srv:
        ws = [await attach(backend, f"load-{i}") for i in range(2)]
        phase = Phase(srv.base_url, concurrency=2)
        run = asyncio.create_task(
            backend.run_items([Item(i, i) for i in range(10)], 2, False, phase, phase.origin_ns)
        )
        deadline = time.monotonic() + WAIT_S
        while len(phase.started_ids) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        # both workers have their one request stalled: no report comes for a while, so the cancel
        # cannot meet one in the same loop turn (test_a_cancel_that_meets_a_report_..., below)
        await asyncio.sleep(0.05)
        run.cancel()  # Ctrl-C: the driver cancels what its workers have in flight
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(run, WAIT_S)
        await detach(backend, [t for _, t in ws])
    ids = Counter(r["request_id"] for r in phase.rows)
    assert set(ids.values()) == {1} and set(phase.started_ids) <= set(ids)
    # stalled in its first token, a request is cancelled (one that got through first is ok)
    statuses = {r["status"] for r in phase.rows}
    assert "cancelled" in statuses and statuses <= {"cancelled", "ok"}
    (rec,) = backend.phases
    assert rec["not_sent"] == 0 and all(w["state"] == "closed" for w in backend.record()["workers"])


# Python 3.11's asyncio.wait_for swallowed such a cancel (CPython gh-86296): the phase ran to its end
async def test_a_cancel_that_meets_a_report_in_the_same_loop_turn_still_stops_the_phase() -> None:
    backend = LocalWorkersBackend(workers=1)
    w = _Proc(name="load-0", state="ready")
    streaming = asyncio.create_task(backend._stream([w]))
    await asyncio.sleep(0)  # now waiting for a report
    backend._changed.set()  # a report came in (as _handle does) ...
    streaming.cancel()  # ... in the same loop turn as the interrupt
    for _ in range(5):
        await asyncio.sleep(0)
    stopped = streaming.done()
    streaming.cancel()  # the second Ctrl-C
    with contextlib.suppress(asyncio.CancelledError):
        await streaming
    assert stopped


async def test_no_worker_that_can_build_its_client_is_one_line_naming_the_field() -> None:
    backend = LocalWorkersBackend(workers=1)
    w, task = await attach(backend, "load-0")
    phase = Phase("http://127.0.0.1:9", cfg={"base_url": "http://127.0.0.1:9"})  # no model: refused
    try:
        with pytest.raises(UsageError, match=r"^load\.workers: no local load worker could build its client"):
            await backend.ready(phase, phase.origin_ns)
        assert w.state == "failed" and "TypeError" in (w.error or "")
    finally:
        await detach(backend, [task])


async def test_a_call_to_a_gone_worker_fails_at_once_and_a_failed_reply_is_raised() -> None:
    backend = LocalWorkersBackend(workers=1)
    w, task = await attach(backend, "load-0")
    with pytest.raises(RuntimeError, match=r"^AttributeError: "):
        await backend._call(w, "nope", timeout=WAIT_S)
    task.cancel()
    await asyncio.wait_for(asyncio.gather(w.pump, return_exceptions=True), WAIT_S)  # type: ignore[arg-type]
    assert w.state == "lost" and w.error == f"lost: its process (pid {w.pid}) exited"
    with pytest.raises(ConnectionError, match="is gone"):
        await backend._call(w, "where")
    await detach(backend, [task])


# --- the driver's bookkeeping, without any worker ---------------------------------------------------


def test_a_silent_worker_is_lost_with_how_long_it_was_silent() -> None:
    backend = LocalWorkersBackend(workers=1, silence_s=20)
    phase = Phase("http://unused")
    w = _Proc(name="load-0", state="ready", pid=4242, hostname="h")
    w.new_phase([phase.prepare(Item(i, i)) for i in range(3)], 1)
    w.started.add("run-cached-1")
    w.heard = time.monotonic() - 45
    fresh = _Proc(name="load-1", state="ready", heard=time.monotonic())
    backend._phase = phase  # type: ignore[assignment]
    backend._lose_silent([w, fresh])
    assert w.state == "lost" and fresh.state == "ready"
    assert w.error is not None and "silent for 45 s (no heartbeat within 20 s" in w.error
    kinds = {r["request_id"]: r["error_type"] for r in phase.rows}
    assert kinds == {"run-cached-1": WORKER_LOST, "run-cached-2": NOT_SENT, "run-cached-3": NOT_SENT}
    assert all("load-0 (pid 4242) on h" in r["error_message"] for r in phase.rows)
    book = w.book_record()  # the lost in-flight one is accounted as finished, the unsent as not issued
    assert (book["assigned"], book["rows"], book["lost_in_flight"], book["not_issued"]) == (3, 1, 1, 2)


def test_the_silence_bound_has_a_floor_and_bad_settings_name_their_field(monkeypatch) -> None:
    assert LocalWorkersBackend(silence_s=1.0).silence_s == SILENCE_MIN_S
    assert LocalWorkersBackend(silence_s=SILENCE_MIN_S * 3).silence_s == SILENCE_MIN_S * 3
    with pytest.raises(UsageError, match=r"^load\.workers: "):
        LocalWorkersBackend(workers=0)
    monkeypatch.delattr(os, "sched_setaffinity")
    with pytest.raises(UsageError, match=r"^load\.pin: .*Linux"):
        LocalWorkersBackend(workers=2, pin=True)


async def test_replies_settle_their_own_call_and_strays_are_ignored() -> None:
    backend = LocalWorkersBackend(workers=1)
    w = _Proc(name="load-0", state="ready")
    loop = asyncio.get_running_loop()
    good, bad = loop.create_future(), loop.create_future()
    w.calls = {1: good, 2: bad}
    backend._handle(w, ("reply", 1, True, {"n": 3}))
    backend._handle(w, ("reply", 2, False, "ValueError: no"))
    backend._handle(w, ("reply", 99, True, None))  # a reply to a call that timed out
    backend._handle(w, ("report", {"rows": [], "started": [], "done": True}))  # no phase open: dropped
    assert good.result() == {"n": 3} and w.calls == {}
    with pytest.raises(RuntimeError, match="ValueError: no"):
        bad.result()
    assert w.heard > 0
