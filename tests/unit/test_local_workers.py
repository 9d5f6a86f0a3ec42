"""How a phase is split between load workers and how their reports are merged on the driver
(kvbench.load.worker_phase, shared by the Ray and the local-process backends), and which backend
`load.workers: K` gets without a cluster."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import pytest

from kvbench.client import RequestRecord
from kvbench.load.backends import load_backend
from kvbench.load.local_workers import LocalWorkersBackend
from kvbench.load.worker_phase import (
    NOT_SENT,
    WORKER_LOST,
    PreparedRequest,
    WorkerBook,
    pack_share,
    split_shares,
)


@pytest.mark.parametrize(
    ("count", "concurrency", "workers"), [(256, 256, 2), (2000, 256, 3), (5, 256, 4), (10, 3, 8), (1, 1, 2)]
)
def test_split_deals_every_item_once_and_keeps_the_concurrency(count, concurrency, workers) -> None:
    shares = split_shares(count, concurrency, workers)
    dealt = Counter(i for idx, _ in shares for i in idx)
    assert sorted(dealt) == list(range(count)) and set(dealt.values()) == {1}
    conc = [c for _, c in shares]
    assert sum(conc) == concurrency and min(conc) >= 1 and max(conc) - min(conc) <= 1
    assert len(shares) == min(workers, concurrency, count)
    sizes = [len(idx) for idx, _ in shares]
    assert max(sizes) - min(sizes) <= 1  # round-robin: no worker gets two more than another


def test_pack_share_ships_each_body_once() -> None:
    prepared = [PreparedRequest(f"r{i}", {}, b"same" if i % 2 else f"own{i}".encode()) for i in range(6)]
    bodies: dict[bytes, int] = {}
    share = pack_share(prepared, bodies)
    body_list = list(bodies)
    assert [body_list[s["body"]] for s in share] == [p.body for p in prepared]
    assert len(body_list) == 4  # three own bodies, one shared


class Phase:
    """The driver side a backend writes to: started ids, rows (each with the worker's columns)."""

    retries = 0

    def __init__(self) -> None:
        self.started_ids: list[str] = []
        self.rows: list[tuple[RequestRecord, dict[str, Any]]] = []

    def started(self, request_id: str) -> None:
        self.started_ids.append(request_id)

    def record(self, rec: RequestRecord, extra: dict[str, Any]) -> None:
        self.rows.append((rec, extra))


def _fields(i: int) -> dict[str, Any]:
    return {"phase": "cached", "label": "cached", "prompt_id": i, "prompt_tokens_requested": 10}


def _row(rid: str, i: int, end_ns: int) -> dict[str, Any]:
    rec = RequestRecord(request_id=rid, **_fields(i))
    rec.status, rec.sent_ns, rec.end_ns = "ok", end_ns - 5, end_ns
    return dataclasses.asdict(rec)


def _book(n: int) -> WorkerBook:
    book = WorkerBook(name="load-1", state="ready")
    book.new_phase([PreparedRequest(f"r{i}", _fields(i), b"x") for i in range(n)], 3)
    return book


def test_reports_merge_into_one_row_per_request_as_they_come() -> None:
    phase, book = Phase(), _book(4)
    end = book.take({"rows": [], "started": ["r0", "r1"], "done": False}, phase, final_when_done=True)
    assert end is None and phase.started_ids == ["r0", "r1"] and not phase.rows
    end = book.take({"rows": [_row("r1", 1, 900)], "started": ["r2"], "done": False}, phase)
    assert end == 900 and [r.request_id for r, _ in phase.rows] == ["r1"] and not book.done
    last = {"rows": [_row("r0", 0, 950), _row("r2", 2, 700)], "started": [], "done": True, "cpu_s": 0.5}
    assert book.take(last, phase, final_when_done=True) == 950
    assert book.done and book.cpu_s == 0.5  # a pushed stream's done report is its last
    assert [r.request_id for r, _ in phase.rows] == ["r1", "r0", "r2"]
    assert all(extra == {"worker": "load-1"} for _, extra in phase.rows)
    assert book.finished == {"r0", "r1", "r2"} and book.started == {"r0", "r1", "r2"}


def test_a_polled_worker_is_done_only_at_an_empty_poll() -> None:
    phase, book = Phase(), _book(1)
    book.take({"rows": [_row("r0", 0, 10)], "started": ["r0"], "done": True}, phase)
    assert not book.done  # rows in the same poll: one more poll says nothing is left
    book.take({"rows": [], "started": [], "done": True}, phase)
    assert book.done


def test_a_lost_worker_accounts_for_every_request_it_was_given() -> None:
    phase, book = Phase(), _book(6)
    book.take({"rows": [_row("r0", 0, 10)], "started": ["r0", "r1", "r2"], "done": False}, phase)
    book.lose(phase, "load-1 (pid 7)", "its process exited with code -9")
    kinds = {r.request_id: r.error_type for r, _ in phase.rows}
    assert kinds == {
        "r0": None,
        "r1": WORKER_LOST,
        "r2": WORKER_LOST,
        "r3": NOT_SENT,
        "r4": NOT_SENT,
        "r5": NOT_SENT,
    }
    assert (book.state, book.lost_rows, book.unsent) == ("lost", 2, 3)
    assert all("pid 7" in (r.error_message or "") for r, _ in phase.rows if not r.ok)
    record = book.book_record()
    assert (record["assigned"], record["rows"], record["lost_in_flight"], record["not_issued"]) == (
        6,
        3,
        2,
        3,
    )


def test_workers_without_a_cluster_are_local_processes() -> None:
    backend = load_backend("ray", workers=3)  # what a run asks for `load.workers: 3`; no Ray session here
    assert isinstance(backend, LocalWorkersBackend) and backend.workers_wanted == 3 and backend.remote
    assert isinstance(load_backend("processes", workers=2, placement="spread"), LocalWorkersBackend)


def test_pin_without_workers_is_one_line_and_exit_2(run_cli) -> None:
    code, out, err = run_cli("run", "throughput", "--set", "load.pin=true", "--output-dir", "/nonexistent")
    assert code == 2
    (line,) = err.strip().splitlines()
    assert line.endswith("load.pin: pins local load workers to cores; set load.workers to 1 or more")
    assert "Traceback" not in err + out


def test_pin_is_refused_for_ray_load_workers(run_cli, tmp_path) -> None:
    # the scenario's cluster is Ray, whose actors Ray places: pinning them is not kvbench's to do
    sets = ["--set", "load.workers=2", "--set", "load.pin=true", "--set", "cluster.backend=ray"]
    code, _, err = run_cli("run", "throughput", *sets, "--output-dir", str(tmp_path))
    assert code == 2
    assert "load.pin" in err and len(err.strip().splitlines()) == 1


def test_pin_is_not_a_key_of_a_sequential_load(run_cli, tmp_path) -> None:
    code, _, err = run_cli("run", "ttft", "--set", "load.pin=true", "--output-dir", str(tmp_path))
    assert code == 2 and "load.pin" in err
