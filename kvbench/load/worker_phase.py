"""The driver's side of a phase sent by load workers, whatever runs them (Ray actors or local processes).

Shared by kvbench.load.ray_backend and kvbench.load.local_workers: the request as the phase
prepared it (PreparedRequest), what a backend needs from the phase (RemotePhase), how the items
and the concurrency are split between K workers (split_shares), and one worker's book for the
phase (WorkerBook): which ids it started and finished, the rows it reported (each written the
moment it arrives, through the phase's `record`), and what becomes of its requests when it is
lost: the ones it had started become `worker_lost` rows, the ones it never sent `not_sent` rows,
so a phase's rows are always the requests it was asked for (and kvbench.run.runner fails a run
with a `not_sent` row whatever max_error_rate says).

A worker's report (LoadWorker.report in kvbench.load.ray_worker) is the same dict on both paths:
rows finished and ids started since the last report, done, peak in flight, CPU seconds, clock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

WORKER_LOST = "worker_lost"
NOT_SENT = "not_sent"  # a lost worker's request that it never reported starting
# a worker's loop held this long by a GC pass, a large share or a busy host is not frozen (20 beats)
SILENCE_MIN_S = 10.0


def silence_bound(connect_timeout_s: float | None) -> float:
    """How long a load worker may stay silent (no heartbeat, no answer to a poll) before the driver
    declares it lost, on either backend: the run's own connect timeout, since a live worker says
    something at least that often, and never under SILENCE_MIN_S."""
    return max(float(connect_timeout_s or 0.0), SILENCE_MIN_S)


@dataclass(frozen=True)
class PreparedRequest:
    """One request as the phase prepared it: the worker only sends it."""

    request_id: str
    fields: dict[str, Any]  # RequestRecord fields: phase, label, repetition, prompt_id, ... noise_active
    body: bytes
    offset_s: float = 0.0  # paced load: arrival time from phase start


class RemotePhase(Protocol):
    """What a remote backend needs from a phase (kvbench.run builds it around Run.issue's parts)."""

    retries: int

    def prepare(self, item: Any) -> PreparedRequest: ...

    def client_spec(self) -> dict[str, Any]: ...

    def started(self, request_id: str) -> None: ...

    def record(self, rec: Any, extra: dict[str, Any]) -> None: ...


def split_shares(count: int, concurrency: int, workers: int) -> list[tuple[list[int], int]]:
    """Item indexes and concurrency of each worker: round-robin items, concurrency as even as it
    goes, never more workers than the concurrency (each needs one) or the items."""
    k = max(1, min(workers, concurrency, count or 1))
    return [
        (list(range(w, count, k)), concurrency // k + (1 if w < concurrency % k else 0)) for w in range(k)
    ]


def open_phase(
    workers: list[Any], items: int, concurrency: int, phases: list[dict[str, Any]], backend: str, **extra: Any
) -> tuple[list[Any], list[tuple[list[int], int]], dict[str, Any]]:
    """What a load backend does as a phase opens, the same on Ray and on local processes: the ready
    workers and their shares (split_shares), every worker's book emptied, and the phase's manifest
    record (`extra` beside the usual fields) appended to `phases`; returns (ready, shares, record)."""
    ready = [w for w in workers if w.state == "ready"]
    shares = split_shares(items, concurrency, len(ready))
    for w in workers:
        w.new_phase([], 0)
    record: dict[str, Any] = {"backend": backend, "workers": [], "requests": items, **extra}
    phases.append(record)
    return ready, shares, record


def pack_share(prepared: list[PreparedRequest], bodies: dict[bytes, int]) -> list[dict[str, Any]]:
    """A worker's share as it travels: each body by its index in `bodies` (filled here), sent once."""
    return [
        {
            "request_id": p.request_id,
            "fields": p.fields,
            "body": bodies.setdefault(p.body, len(bodies)),
            "offset_s": p.offset_s,
        }
        for p in prepared
    ]


@dataclass
class WorkerBook:
    """One load worker as the driver keeps it: its state for the run, its requests for this phase."""

    name: str
    state: str = "placed"  # placed | ready | lost | failed
    error: str | None = None
    specs: dict[str, PreparedRequest] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)
    finished: set[str] = field(default_factory=set)
    concurrency: int = 0
    peak_in_flight: int = 0
    done: bool = False
    last_answer: float = 0.0
    lost_rows: int = 0  # in-flight requests turned into worker_lost rows
    unsent: int = 0  # requests it never sent, turned into not_sent rows when it was lost
    cpu_s: float | None = None  # CPU seconds its process spent on this phase (as of its last report)
    clock_info: dict[str, Any] | None = None  # its client's clock source and kernel-stamp calibration

    def new_phase(self, prepared: list[PreparedRequest], concurrency: int) -> None:
        self.specs = {p.request_id: p for p in prepared}
        self.started, self.finished, self.done, self.concurrency = set(), set(), False, concurrency
        self.peak_in_flight, self.last_answer, self.lost_rows, self.unsent = 0, time.monotonic(), 0, 0
        self.cpu_s = None

    def extra(self) -> dict[str, Any]:
        """The columns its rows carry beside the request's own."""
        return {"worker": self.name}

    def take(self, res: dict[str, Any], phase: RemotePhase, *, final_when_done: bool = False) -> int | None:
        """A report in: started ids counted, each row written as it comes; returns its latest end_ns.
        `final_when_done`: the report that says done is the last (a pushed stream); a polled worker
        is done at the first poll that says so and brings nothing."""
        from kvbench.client import RequestRecord

        self.last_answer = time.monotonic()
        for rid in res["started"]:
            self.started.add(rid)
            phase.started(rid)
        extra = self.extra()
        last_end: int | None = None
        for row in res["rows"]:
            self.finished.add(row["request_id"])
            if row.get("end_ns") is not None:
                last_end = max(last_end or 0, int(row["end_ns"]))
            phase.record(RequestRecord(**row), extra)
        if res.get("cpu_s") is not None:
            self.cpu_s = float(res["cpu_s"])
        if res.get("clock") is not None:
            self.clock_info = dict(res["clock"])
        self.peak_in_flight = max(self.peak_in_flight, int(res.get("peak_in_flight") or 0))
        if res.get("error"):
            self.error = str(res["error"])
        self.done = bool(res["done"]) and (final_when_done or (not res["rows"] and not res["started"]))
        return last_end

    def lose(self, phase: RemotePhase, where: str, why: str) -> None:
        """The worker is gone: its in-flight requests become worker_lost rows, its unsent not_sent rows."""
        from kvbench.client import RequestRecord

        self.state, self.error = "lost", f"lost: {why}"
        extra = self.extra()
        for rid in sorted(self.started - self.finished):
            rec = RequestRecord(request_id=rid, **self.specs[rid].fields)
            rec.fail(WORKER_LOST, f"load worker {where} was lost with this request in flight: {why}")
            phase.record(rec, extra)
            self.finished.add(rid)
            self.lost_rows += 1
        for rid in sorted(set(self.specs) - self.started - self.finished):  # never handed to its client
            rec = RequestRecord(request_id=rid, **self.specs[rid].fields)
            rec.fail(NOT_SENT, f"never sent: load worker {where} was lost before sending it: {why}")
            phase.record(rec, extra)
            self.unsent += 1

    def book_record(self) -> dict[str, Any]:
        """What the phase's manifest entry says of this worker (a backend adds where it ran)."""
        return {
            "worker": self.name,
            "state": self.state,
            "concurrency": self.concurrency,
            "peak_in_flight": self.peak_in_flight,
            "assigned": len(self.specs),
            "rows": len(self.finished),
            "lost_in_flight": self.lost_rows,
            "not_issued": self.unsent,  # each also a not_sent row
            "error": self.error,
            "cpu_s": self.cpu_s,
            "clock_source": (self.clock_info or {}).get("clock_source"),
            "client_clock": self.clock_info,  # the shape of manifest.clock, for this worker
        }
