"""The Ray load driver's polling without a cluster: each worker is polled on its own, so a stopped
worker (its poll unanswered, the way a SIGSTOPped actor leaves it) neither holds back the other
worker's rows nor loses the rows in its own late answer, and is lost past the silence bound."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from kvbench.load import ray_backend
from kvbench.load.ray_backend import NOT_SENT, WORKER_LOST, PreparedRequest, RayLoadBackend, _Worker

FIELDS = {"phase": "cached", "label": "cached", "repetition": 0}


class FakeActor:
    """A load worker actor: `poll.remote()` gives a ref whose `.future()` the driver awaits.

    Each poll call is answered in order, as Ray delivers an actor's calls: a running one answers at
    once; a stopped one answers nothing until resumed, then each call queued meanwhile in turn,
    the first taking every row finished so far (an answer the driver gave up on loses them)."""

    def __init__(self, rows_per_poll: list[list[str]], *, stopped: bool = False) -> None:
        self.batches = list(rows_per_poll)  # request ids that finish before each answer
        self.stopped = stopped
        self.queued: list[concurrent.futures.Future[dict[str, Any]]] = []
        self.calls = 0
        self.poll = SimpleNamespace(remote=self._remote)

    def _remote(self) -> Any:
        self.calls += 1
        fut: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
        self.queued.append(fut)
        if not self.stopped:
            self._answer_queued()
        return SimpleNamespace(future=lambda: fut)

    def resume(self) -> None:
        self.stopped = False
        self._answer_queued()

    def _answer_queued(self) -> None:
        while self.queued:
            fut = self.queued.pop(0)
            ids = self.batches.pop(0) if self.batches else []
            report = {
                "rows": [{"request_id": rid, **FIELDS, "end_ns": 1} for rid in ids],
                "started": ids,
                "done": not self.batches,
            }
            if not fut.cancelled():  # the report is taken either way: its rows are gone from the worker
                fut.set_result(report)


class FakePhase:
    retries = 0

    def __init__(self) -> None:
        self.rows: list[Any] = []
        self.on_record: Callable[[Any], None] = lambda rec: None

    def started(self, rid: str) -> None:
        pass

    def record(self, rec: Any, extra: dict[str, Any]) -> None:
        self.rows.append((extra["worker"], rec))
        self.on_record(rec)


def _backend(monkeypatch: pytest.MonkeyPatch) -> RayLoadBackend:
    monkeypatch.setattr(
        ray_backend, "require_ray", lambda what: SimpleNamespace(kill=lambda a, no_restart: None)
    )
    return RayLoadBackend(workers=2)


def _worker(name: str, actor: FakeActor, ids: list[str]) -> _Worker:
    w = _Worker(name=name)
    w.actor, w.state = actor, "ready"
    w.new_phase([PreparedRequest(rid, {**FIELDS, "prompt_id": i}, b"{}") for i, rid in enumerate(ids)], 1)
    return w


def test_a_stopped_worker_holds_back_no_rows_and_its_late_answer_is_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend = _backend(monkeypatch)
    live_ids = [f"a{i}" for i in range(4)]
    live = _worker("load-0", FakeActor([[rid] for rid in live_ids]), live_ids)
    frozen = FakeActor([["b0", "b1"]], stopped=True)
    stopped = _worker("load-1", frozen, ["b0", "b1"])
    phase = FakePhase()
    # the stopped worker resumes (SIGCONT) only once every row of the other one is in: polled
    # together, the other's rows would wait on the stopped one's poll
    phase.on_record = lambda rec: frozen.resume() if rec.request_id == live_ids[-1] else None
    asyncio.run(backend._stream([live, stopped], phase))
    order = [rec.request_id for _, rec in phase.rows]
    assert order[:4] == live_ids and sorted(order[4:]) == ["b0", "b1"]  # every row, once, live first
    assert all(rec.status == "ok" for _, rec in phase.rows)
    assert frozen.calls == 2  # its one poll waited for, not given up on and sent again (then: done)
    assert live.state == stopped.state == "ready" and live.done and stopped.done
    assert backend._polls == {}


def test_a_worker_stopped_for_good_is_lost_past_the_silence_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = _backend(monkeypatch)
    backend.silence_s = 0.3  # below the run's floor (SILENCE_MIN_S), so the test need not wait 10 s
    live = _worker("load-0", FakeActor([["a0"], ["a1"], ["a2"]]), ["a0", "a1", "a2"])
    frozen = FakeActor([["b0"]], stopped=True)
    stopped = _worker("load-1", frozen, ["b0", "b1", "b2"])
    stopped.started = {"b0"}  # in flight when it stopped
    phase = FakePhase()
    asyncio.run(backend._stream([live, stopped], phase))
    assert stopped.state == "lost" and "no answer to a poll within 0.3 s: stopped or frozen" in (
        stopped.error or ""
    )
    kinds = {rec.request_id: rec.error_type for _, rec in phase.rows}
    assert kinds == {"a0": None, "a1": None, "a2": None, "b0": WORKER_LOST, "b1": NOT_SENT, "b2": NOT_SENT}
    assert frozen.calls == 1 and frozen.queued[0].cancelled()  # its poll dropped with it
    assert backend._polls == {}
