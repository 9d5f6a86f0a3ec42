"""Load on a real Ray cluster (head + 2 nodes on this machine): 2 workers send a phase against the
mock; one row per request that agrees one to one with the mock's ground truth; in flight never
above the concurrency; a node removed mid-phase turns its in-flight requests into worker_lost rows."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from raycluster import alive_actors, kvbench_cli, ray_test_cluster, read_jsonl

from kvbench.client import ClientConfig, build_body
from kvbench.cluster import ray_available
from kvbench.cluster.session import ClusterLimits, connect
from kvbench.load.ray_backend import SILENCE_MIN_S, WORKER_LOST, PreparedRequest, RayLoadBackend, split_shares
from kvbench.mock.api.server import MockServer

pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.skipif(not ray_available(), reason="Ray is not installed: pip install 'kvbench[ray]'"),
]


@pytest.fixture(scope="module")
def cluster():
    with ray_test_cluster(client_server=True) as (c, ray):
        connect(limits=ClusterLimits(cpus_per_load_worker=0.5, start_timeout_s=60.0))
        yield c, ray


@dataclasses.dataclass
class Item:
    index: int
    prompt_id: int
    scheduled_offset_s: float = 0.0


class Phase:
    """What kvbench.run gives a remote backend: prepared requests in, rows out."""

    retries = 0

    def __init__(self, base_url: str, concurrency: int, max_tokens: int = 4) -> None:
        self.cfg = ClientConfig(base_url=base_url, model="m", max_tokens=max_tokens)
        self.concurrency = concurrency
        self.origin_ns = time.perf_counter_ns()
        self.rows: list[dict] = []
        self.started_ids: list[str] = []
        self.seq = 0

    def prepare(self, item: Item) -> PreparedRequest:
        self.seq += 1
        text = f"prompt {item.prompt_id} " + "w " * 150
        fields = {
            "phase": "cached",
            "label": "cached",
            "prompt_id": item.prompt_id,
            "prompt_tokens_requested": 150,
            "prompt_tokens": 150,
        }
        return PreparedRequest(
            f"run-cached-{self.seq}", fields, build_body(self.cfg, text), item.scheduled_offset_s
        )

    def client_spec(self) -> dict:
        return {
            "config": dataclasses.asdict(self.cfg),
            "headers": {},
            "concurrency": self.concurrency,
            "connect_timeout_s": 10.0,
        }

    def started(self, request_id: str) -> None:
        self.started_ids.append(request_id)

    def record(self, rec, extra: dict) -> None:
        self.rows.append({**rec.to_row(), **extra})


def test_split_shares_adds_up() -> None:
    assert split_shares(10, 4, 2) == [([0, 2, 4, 6, 8], 2), ([1, 3, 5, 7, 9], 2)]
    assert [c for _, c in split_shares(9, 5, 3)] == [2, 2, 1]
    assert len(split_shares(3, 8, 4)) == 3 and len(split_shares(10, 1, 4)) == 1


async def test_two_workers_one_row_per_request_agreeing_with_the_mock(cluster, tmp_path) -> None:
    gt, gt_after = tmp_path / "gt.jsonl", tmp_path / "gt-after.jsonl"
    async with (
        MockServer("ci", ground_truth=gt) as srv,
        MockServer("ci", ground_truth=gt_after) as after,
    ):
        phase = Phase(srv.base_url, concurrency=4)
        backend = RayLoadBackend(workers=2)
        try:
            items = [Item(i, i % 7) for i in range(60)]
            await backend.run_items(items, 4, False, phase, phase.origin_ns)
            # the same workers again, after the target moved (the persistence test's second server)
            phase.cfg = dataclasses.replace(phase.cfg, base_url=after.base_url)
            await backend.run_items(items[:10], 4, False, phase, phase.origin_ns)
        finally:
            await backend.aclose()
    moved = {json.loads(line)["request_id"] for line in gt_after.read_text().splitlines()}
    assert moved == {r["request_id"] for r in phase.rows[60:]} and len(moved) == 10
    truth = [json.loads(line) for line in (gt.read_text() + gt_after.read_text()).splitlines()]
    ids = [r["request_id"] for r in phase.rows]
    assert len(ids) == len(set(ids)) == 70
    assert sorted(ids) == sorted(t["request_id"] for t in truth)  # one to one with the server's log
    assert all(r["status"] == "ok" and r["ttft_ms"] > 0 for r in phase.rows)
    assert {r["worker"] for r in phase.rows} == {"load-0", "load-1"}
    assert len({r["node_id"] for r in phase.rows}) == 2 and all(r["hostname"] for r in phase.rows)
    assert max(t["in_flight_at_receive"] for t in truth) <= 4
    first = backend.phases[0]["workers"]
    assert [w["concurrency"] for w in first] == [2, 2] and [w["rows"] for w in first] == [30, 30]
    assert all(w["peak_in_flight"] <= 2 and "clock_offset_ns" in w for w in first)
    # rows are on the driver's timeline: scheduled <= sent < first token <= end, all after the origin
    for r in phase.rows:
        assert 0 < r["scheduled_ns"] <= r["sent_ns"] < r["first_token_ns"] <= r["end_ns"]


async def test_a_paced_load_keeps_its_arrival_times_across_workers(cluster, tmp_path) -> None:
    """rate load: the items keep their arrival offsets from one common start, whichever worker."""
    async with MockServer("ci", ground_truth=tmp_path / "gt.jsonl") as srv:
        phase = Phase(srv.base_url, concurrency=4)
        backend = RayLoadBackend(workers=2)
        try:
            items = [Item(i, i % 5, scheduled_offset_s=i * 0.05) for i in range(40)]
            await backend.run_items(items, 4, True, phase, phase.origin_ns)
        finally:
            await backend.aclose()
    rows = sorted(phase.rows, key=lambda r: r["scheduled_ns"])
    assert len(rows) == 40 and all(r["status"] == "ok" for r in rows)
    assert {r["worker"] for r in rows} == {"load-0", "load-1"}
    start = rows[0]["scheduled_ns"]
    # on the driver's timeline, each arrival is where the schedule put it (+- the clock offsets)
    errors = [abs(r["scheduled_ns"] - start - i * 50_000_000) for i, r in enumerate(rows)]
    assert max(errors) < 5_000_000, errors
    assert max(r["dispatch_delay_ms"] for r in rows) < 50


async def test_a_removed_node_turns_in_flight_requests_into_worker_lost_rows(cluster, tmp_path) -> None:
    c, _ = cluster
    gt = tmp_path / "gt.jsonl"
    async with MockServer("ci", ground_truth=gt) as srv:
        phase = Phase(srv.base_url, concurrency=4, max_tokens=64)
        backend = RayLoadBackend(workers=2)
        try:
            items = [Item(i, i) for i in range(80)]
            run = asyncio.create_task(backend.run_items(items, 4, False, phase, phase.origin_ns))
            while len(phase.rows) < 6:
                await asyncio.sleep(0.05)
            # the machine goes: its processes die at once (the actor first), then its raylet
            where = backend.workers[0].where
            node = next(n for n in c.worker_nodes if n.node_id == where["node_id"])
            os.kill(where["pid"], signal.SIGKILL)
            await asyncio.to_thread(c.remove_node, node, False)
            await asyncio.wait_for(run, 120)
        finally:
            await backend.aclose()
            c.add_node(num_cpus=2, object_store_memory=80 * 1024 * 1024)  # for the next test
            c.wait_for_nodes()  # and the GCS has marked the removed one dead
    lost = [r for r in phase.rows if r["error_type"] == WORKER_LOST]
    assert lost and all(r["worker"] == "load-0" and r["status"] == "error" for r in lost)
    ids = [r["request_id"] for r in phase.rows]
    assert len(ids) == len(set(ids))
    w0, w1 = backend.phases[0]["workers"]
    assert w0["state"] == "lost" and w0["error"].startswith("lost") and w0["not_issued"] > 0
    assert w1["state"] == "ready" and w1["rows"] == w1["assigned"] == 40
    assert w0["rows"] + w0["not_issued"] == w0["assigned"]
    assert backend.record()["workers_lost"] == ["load-0"]


RUN = ("run", "throughput", "--quiet", "--no-report", "--prompts", "6")
WORKERS = ("--set", "load.workers=2", "--set", "cluster.cpus_per_load_worker=0.5")


def test_kvbench_run_with_two_load_workers_agrees_with_the_mock(cluster, tmp_path) -> None:
    c, _ = cluster
    p = kvbench_cli(
        *RUN,
        *WORKERS,
        "--set",
        "prompts.lengths=[1000]",
        "--requests",
        "60",
        "--concurrency",
        "4",
        "--cluster",
        c.client_address,  # through the Ray client server, as from a laptop off the cluster
        "--output-dir",
        str(tmp_path),
        address="",
    )
    assert p.returncode == 0, p.stderr
    (run_dir,) = list(tmp_path.iterdir())
    rows = read_jsonl(run_dir / "requests.jsonl")
    # the server's log, less preflight's timed transport probe (a check, not a request of the run)
    truth = [
        t for t in read_jsonl(run_dir / "mock_ground_truth.jsonl") if "transport-probe" not in t["request_id"]
    ]
    assert sorted(r["request_id"] for r in rows) == sorted(t["request_id"] for t in truth)
    cached = [r for r in rows if r["phase"] == "cached"]
    assert len(cached) == 60 and all(r["status"] == "ok" for r in cached)
    assert {r["worker"] for r in cached} == {"load-0", "load-1"} and len({r["node_id"] for r in cached}) == 2
    assert all("worker" not in r for r in rows if r["phase"] == "probe")  # cold verification: the driver
    ids = {r["request_id"] for r in cached}
    assert max(t["in_flight_at_receive"] for t in truth if t["request_id"] in ids) <= 4
    manifest = json.loads((run_dir / "manifest.json").read_text())
    # the workers' stamps, moved by their clock offsets, agree with the server's clock (same host:
    # one CLOCK_MONOTONIC): sent before the server received, first token after the server sent it
    origin, by_id = manifest["clock_origin_ns"], {t["request_id"]: t for t in truth}
    slack = 2_000_000 + max(
        w["clock_uncertainty_ns"] for w in manifest["phases"][0]["load_backend"]["workers"]
    )
    early = [origin + r["sent_ns"] - by_id[r["request_id"]]["received_ns"] for r in cached]
    late = [by_id[r["request_id"]]["first_token_ns"] - origin - r["first_token_ns"] for r in cached]
    print(
        "worst sent-after-received", max(early) / 1e6, "ms; worst token-before-server", max(late) / 1e6, "ms"
    )
    assert max(early) < slack and max(late) < slack
    phase = manifest["phases"][0]
    assert [w["concurrency"] for w in phase["load_backend"]["workers"]] == [2, 2]
    # the phase's time is the span the workers sent in, not their start-up (actors, clocks, clients:
    # a second or more through the Ray client), so its req/s compares with a local run's
    span_s = (max(r["end_ns"] for r in cached) - min(r["sent_ns"] for r in cached)) / 1e9
    assert span_s - slack / 1e9 <= phase["duration_s"] <= span_s + 0.25, (span_s, phase["duration_s"])
    assert all(w["cpu_s"] > 0 for w in phase["load_backend"]["workers"])  # what sending cost there
    # each worker says where its stamps came from, as manifest.clock does for the driver
    for w in phase["load_backend"]["workers"]:
        assert w["clock_source"] == w["client_clock"]["clock_source"] == cached[0]["clock_source"]
    assert manifest["cluster"]["load"]["workers_lost"] == [] and alive_actors("LoadWorker") == []
    assert manifest["cluster"]["session"]["mode"] == "client"


def test_kvbench_run_survives_a_removed_node_and_says_so(cluster, tmp_path) -> None:
    c, _ = cluster
    p = kvbench_cli(
        *RUN,
        *WORKERS,
        "--set",
        "prompts.lengths=[2000]",
        "--requests",
        "400",
        "--concurrency",
        "4",
        "--max-tokens",
        "32",
        "--cluster",
        "ray",
        "--output-dir",
        str(tmp_path),
        address=c.address,
        wait=False,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            runs = list(tmp_path.iterdir())
            if (
                runs
                and (runs[0] / "requests.jsonl").exists()
                and (
                    sum('"worker"' in ln for ln in (runs[0] / "requests.jsonl").read_text().splitlines())
                    >= 10
                )
            ):
                break
            time.sleep(0.2)
        workers = {n.node_id: n for n in c.worker_nodes}
        victim = next(a for a in alive_actors("LoadWorker") if a["Address"]["NodeID"] in workers)
        os.kill(victim["Pid"], signal.SIGKILL)  # the machine goes: its processes first, then its raylet
        c.remove_node(workers[victim["Address"]["NodeID"]], allow_graceful=False)
        _out, err = p.communicate(timeout=240)
    finally:
        if p.poll() is None:
            p.kill()
        c.add_node(num_cpus=2, object_store_memory=80 * 1024 * 1024)
        c.wait_for_nodes()  # and the GCS has marked the removed one dead
    assert p.returncode == 1, err
    assert "Traceback" not in err
    (run_dir,) = list(tmp_path.iterdir())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    # a lost worker fails the run (#39): the manifest says so and names the cause
    assert manifest["status"] == "failed" and manifest["error_counts"]["worker_lost"] >= 1
    assert "worker" in manifest["error"] and "lost" in manifest["error"]
    lost = [w for w in manifest["phases"][0]["load_backend"]["workers"] if w["state"] == "lost"]
    assert len(lost) == 1 and lost[0]["lost_in_flight"] == manifest["error_counts"]["worker_lost"]
    assert manifest["cluster"]["load"]["workers_lost"] == [lost[0]["worker"]]
    rows = read_jsonl(run_dir / "requests.jsonl")
    assert len(rows) == len({r["request_id"] for r in rows})
    assert sum(r["error_type"] == "worker_lost" for r in rows) == lost[0]["lost_in_flight"]
    # what the lost worker never sent is a failed row too: requested = rows, sent + not sent = requested
    assert sum(r["error_type"] == "not_sent" for r in rows) == lost[0]["not_issued"]
    measured = [r for r in rows if r["phase"] != "probe"]
    backend = manifest["phases"][0]["load_backend"]
    assert len(measured) == 400 == backend["requests"] == backend["sent"] + backend["not_sent"]
    assert manifest["error_counts"].get("not_sent", 0) == backend["not_sent"]
    if backend["not_sent"]:
        assert "were never sent" in _out and "whatever max_error_rate says" in _out
    rep = subprocess.run(
        [sys.executable, "-m", "kvbench", "report", str(run_dir)], capture_output=True, text=True
    )
    assert rep.returncode == 0, rep.stderr
    assert (run_dir / "report.md").exists()


def test_sigint_during_a_ray_load_phase_cancels_the_workers_requests(cluster, tmp_path) -> None:
    c, _ = cluster
    p = kvbench_cli(
        *RUN,
        *WORKERS,
        *("--set", "prompts.lengths=[2000]", "--requests", "4000", "--concurrency", "4"),
        *("--cluster", "ray", "--output-dir", str(tmp_path)),
        address=c.address,
        wait=False,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            runs = list(tmp_path.iterdir())
            rows = (
                (runs[0] / "requests.jsonl").read_text()
                if runs and (runs[0] / "requests.jsonl").exists()
                else ""
            )
            if rows.count('"worker"') >= 10:
                break
            time.sleep(0.2)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    (run_dir,) = list(tmp_path.iterdir())
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "interrupted"
    rows = read_jsonl(run_dir / "requests.jsonl")
    cancelled = [r for r in rows if r["status"] == "cancelled"]
    assert cancelled and all(r["error_type"] == "cancelled" and r["worker"] for r in cancelled)
    assert len(rows) == len({r["request_id"] for r in rows})
    time.sleep(0.5)
    assert alive_actors("LoadWorker") == []


def _run_on_two_workers(cluster: Any, tmp_path: Path, requests: int, connect_s: float) -> Any:
    """A throughput run on two Ray load workers, started and not waited for."""
    c, _ = cluster
    return kvbench_cli(
        *RUN,
        *WORKERS,
        *("--set", "prompts.lengths=[2000]", "--requests", str(requests), "--concurrency", "4"),
        *("--max-tokens", "32", "--set", f"target.timeouts.connect_s={connect_s:g}"),
        *("--cluster", "ray", "--output-dir", str(tmp_path)),
        address=c.address,
        wait=False,
    )


def _stop_one_worker(p: Any, tmp_path: Path) -> tuple[dict[str, Any], Path]:
    """SIGSTOP one load worker once the run has written 10 rows: the worker and the rows file."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and p.poll() is None:
        runs = list(tmp_path.iterdir())
        path = runs[0] / "requests.jsonl" if runs else None
        if path is not None and path.exists() and path.read_text().count('"worker"') >= 10:
            victim = alive_actors("LoadWorker")[0]
            os.kill(victim["Pid"], signal.SIGSTOP)
            return victim, path
        time.sleep(0.2)
    raise AssertionError("the phase ended before a worker could be stopped")


def test_a_stopped_ray_worker_is_lost_within_its_silence_bound(cluster, tmp_path) -> None:
    """SIGSTOP one of two Ray load workers mid-phase: its polls go unanswered, and past the silence
    bound (the run's connect timeout, SILENCE_MIN_S at least) it is lost the way a dead one is."""
    p = _run_on_two_workers(cluster, tmp_path, 400, connect_s=2)  # below the floor
    victim = None
    try:
        victim, _path = _stop_one_worker(p, tmp_path)
        stopped = time.monotonic()
        # the stated bound is SILENCE_MIN_S of silence; the timeout only stops a hang failing slowly
        _out, err = p.communicate(timeout=SILENCE_MIN_S + 120)
        print(f"SIGSTOP to exit: {time.monotonic() - stopped:.1f} s (bound {SILENCE_MIN_S:g} s of silence)")
    finally:
        if victim is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim["Pid"], signal.SIGKILL)
        if p.poll() is None:
            p.kill()
    assert p.returncode == 1, err
    assert "Traceback" not in err
    (run_dir,) = list(tmp_path.iterdir())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "no answer to a poll" in manifest["error"]
    backend = manifest["phases"][0]["load_backend"]
    (lost,) = [w for w in backend["workers"] if w["state"] == "lost"]
    assert lost["worker"] in manifest["error"] and "stopped or frozen" in lost["error"]
    rows = [r for r in read_jsonl(run_dir / "requests.jsonl") if r["phase"] != "probe"]
    assert len(rows) == len({r["request_id"] for r in rows}) == 400  # every request a row, once
    mine = [r for r in rows if r["worker"] == lost["worker"] and r["status"] != "ok"]
    assert mine and {r["error_type"] for r in mine} <= {"worker_lost", "not_sent"}
    assert sum(r["error_type"] == "worker_lost" for r in rows) == lost["lost_in_flight"]
    assert sum(r["error_type"] == "not_sent" for r in rows) == lost["not_issued"]


def test_a_ray_worker_stopped_below_its_bound_holds_back_no_rows(cluster, tmp_path) -> None:
    """SIGSTOP one of two Ray load workers for longer than one poll's wait used to be (5 s), well
    below its silence bound (30 s: the connect timeout), then SIGCONT: each worker is polled on its
    own, so the live one's rows keep coming meanwhile, and the stopped one's late answer, which
    holds rows it had already handed over, is kept: every request one ok row, nobody lost, exit 0."""
    p = _run_on_two_workers(cluster, tmp_path, 300, connect_s=30)
    victim = None
    try:
        victim, path = _stop_one_worker(p, tmp_path)
        seen = []  # rows written while it is stopped (polled together, one batch per 5 s poll wait)
        stop_until = time.monotonic() + 7.0
        while time.monotonic() < stop_until:
            seen.append(path.read_text().count('"worker"'))
            time.sleep(0.2)
        os.kill(victim["Pid"], signal.SIGCONT)
        _out, err = p.communicate(timeout=120)
        print(f"rows written while one worker was stopped 7 s: {seen[-1] - seen[0]}")
    finally:
        if victim is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim["Pid"], signal.SIGCONT)
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    assert seen[-1] > seen[0]  # the live worker's rows arrived while the other was stopped
    (run_dir,) = list(tmp_path.iterdir())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] != "failed" and manifest["cluster"]["load"]["workers_lost"] == []
    rows = [r for r in read_jsonl(run_dir / "requests.jsonl") if r["phase"] != "probe"]
    assert len(rows) == len({r["request_id"] for r in rows}) == 300  # every request a row, once
    assert all(r["status"] == "ok" for r in rows)
