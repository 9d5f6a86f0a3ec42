"""The Ray run's accounting without a cluster: the room check before the first phase, what a lost
worker's requests become, and the exit code of a phase that sent fewer requests than it was asked."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from kvbench.cluster.placement import NodeInfo, check_room
from kvbench.load.ray_backend import NOT_SENT, WORKER_LOST, PreparedRequest, RayLoadBackend, _Worker
from kvbench.run.runner import outcome

ONE = [NodeInfo("a-one", "10.0.0.1", "one", 2)]
TWO = [NodeInfo("a-one", "10.0.0.1", "one", 2), NodeInfo("b-two", "10.0.0.2", "two", 2)]


def room(nodes, *, workers=0, clients=0, placement="spread", cpus_noise=1.0, cpus_load=1.0, driver=None):
    return check_room(
        nodes,
        load_workers=workers,
        cpus_per_load_worker=cpus_load,
        noise_clients=clients,
        noise_placement=placement,
        cpus_per_noise_client=cpus_noise,
        driver_node_id=driver,
    )


def test_four_noise_clients_on_two_cpus_are_refused_with_the_numbers() -> None:
    """The reported case: noise.clients=4 on a 2-CPU Ray ran with half the noise and exit 0."""
    assert room(ONE, clients=4) == (
        "cluster: cannot place 4 noise clients (1 CPU each) and 0 load workers (1 CPU each): node one "
        "would need 4 CPUs and has 2 (2 CPUs on 1 alive node); lower noise.clients or load.workers, "
        "or cluster.cpus_per_noise_client / cpus_per_load_worker"
    )
    assert room(ONE, clients=4, cpus_noise=0.5) is None
    assert room(ONE, clients=2) is None
    # load workers and noise clients hold their CPUs at the same time
    assert room(ONE, workers=1, clients=2) is not None
    assert room(TWO, workers=2, clients=2, driver="a-one") is None
    assert "would need 3 CPUs and has 2" in room(TWO, workers=2, clients=3, driver="a-one")


class FakePhase:
    retries = 0

    def __init__(self) -> None:
        self.rows: list = []

    def record(self, rec, extra) -> None:
        self.rows.append(rec)


def test_a_lost_workers_unsent_requests_become_failed_rows_and_the_counts_agree() -> None:
    backend = RayLoadBackend.__new__(RayLoadBackend)  # no Ray: only the accounting is under test
    backend.ray = SimpleNamespace(kill=lambda actor, no_restart: None)
    backend._polls = {}  # no poll out for it
    w = _Worker(name="load-0", node=ONE[0])
    fields = {"phase": "cached", "label": "cached", "repetition": 0, "prompt_id": 0}
    w.specs = {f"r{i}": PreparedRequest(f"r{i}", {**fields, "prompt_id": i}, b"{}") for i in range(10)}
    w.started = {"r0", "r1", "r2", "r3"}
    w.finished = {"r0", "r1"}  # two rows already came back
    phase = FakePhase()
    backend._lose(w, phase, "node died")
    kinds = [r.error_type for r in phase.rows]
    assert kinds.count(WORKER_LOST) == 2 and kinds.count(NOT_SENT) == 6
    assert {r.request_id for r in phase.rows} | {"r0", "r1"} == set(w.specs)  # every request, once
    assert all(r.status == "error" and r.phase == "cached" for r in phase.rows)
    rec = backend._worker_record(w)
    assert rec["assigned"] == 10 and rec["not_issued"] == 6 and rec["lost_in_flight"] == 2
    assert rec["rows"] + rec["not_issued"] == rec["assigned"]


def fake_run(rows, max_error_rate):
    records = [SimpleNamespace(phase=p, ok=t is None, error_type=t) for p, t in rows]
    return SimpleNamespace(
        scn=SimpleNamespace(max_error_rate=max_error_rate),
        records=records,
        summary_lines=[],
        rd=SimpleNamespace(path=Path("/tmp/run")),
        error_counts={},
    )


def test_a_phase_that_sent_fewer_than_asked_fails_whatever_max_error_rate_says() -> None:
    rows = [("cached", None)] * 6 + [("cached", NOT_SENT)] * 4 + [("baseline", None)] * 10
    done = outcome(fake_run(rows, max_error_rate=1.0))
    assert done.exit_code == 1 and done.failure == "a phase sent fewer requests than it was asked"
    assert done.summary_lines == [
        "phase cached: 4 of 10 requests were never sent (a load worker was lost before sending them): "
        "the run fails whatever max_error_rate says"
    ]
    # a request lost with its worker fails the run too, whatever max_error_rate says (#39) ...
    done = outcome(fake_run([("cached", None)] * 6 + [("cached", WORKER_LOST)] * 4, max_error_rate=0.5))
    assert done.exit_code == 1 and done.failure == "a load worker was lost mid-phase"
    # ... while failures of another kind stay under the error-rate rule
    done = outcome(fake_run([("cached", None)] * 6 + [("cached", "timeout")] * 4, max_error_rate=0.5))
    assert done.exit_code == 0 and done.summary_lines == []
