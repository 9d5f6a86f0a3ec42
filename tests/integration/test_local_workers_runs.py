"""`load.workers: 2` without a cluster: two local worker processes send a throughput phase against
the embedded mock. Every request is one row, from one of two worker pids, and agrees with the
mock's ground truth; a worker killed mid-phase leaves its rows on disk, its unsent requests as
`not_sent` rows, and the run exits 1."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from kvbench.client import ClientConfig, build_body
from kvbench.load.local_workers import LocalWorkersBackend
from kvbench.load.worker_phase import NOT_SENT, WORKER_LOST, PreparedRequest
from kvbench.mock.api.server import MockServer
from kvbench.results import read_jsonl, read_manifest
from kvbench.run.runner import RunOptions, run_scenario
from kvbench.scenario import load_scenario

pytestmark = pytest.mark.slow

SMALL = {
    "prompts.count": 4,
    "prompts.lengths": [300],
    "output.max_tokens": 8,
    "load.workers": 2,
}


def _measured(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["label"] != "probe"]


async def test_two_local_workers_write_every_request_once(tmp_path: Path) -> None:
    scn, _ = load_scenario("throughput", {**SMALL, "load.requests": 90, "load.concurrency": 6})
    outcome = await run_scenario(scn, RunOptions(output_dir=tmp_path, quiet=True, report=False))
    assert outcome.status == "complete" and outcome.exit_code == 0
    rows = _measured(read_jsonl(outcome.run_dir / "requests.jsonl"))
    ids = Counter(r["request_id"] for r in rows)
    assert len(ids) == 90 and set(ids.values()) == {1}
    pids = Counter(r["worker_pid"] for r in rows)
    assert len(pids) == 2 and os.getpid() not in pids and sorted(pids.values()) == [45, 45]
    assert all(r["status"] == "ok" for r in rows)
    # the mock saw exactly these requests (its ground truth, by id), none twice
    truth = Counter(t["request_id"] for t in read_jsonl(outcome.run_dir / "mock_ground_truth.jsonl"))
    assert all(truth[rid] == 1 for rid in ids)
    manifest = read_manifest(outcome.run_dir)
    (phase,) = [p for p in manifest["phases"] if p.get("load_backend")]
    lb = phase["load_backend"]
    assert lb["backend"] == "processes" and lb["requests"] == lb["sent"] == 90 and lb["not_sent"] == 0
    assert sum(w["rows"] for w in lb["workers"]) == 90
    assert {w["pid"] for w in lb["workers"]} == set(pids)
    # the concurrency split between them, and never exceeded by either
    assert sorted(w["concurrency"] for w in lb["workers"]) == [3, 3]
    assert all(w["peak_in_flight"] <= 3 for w in lb["workers"])
    # one clock for every process: a row's stamps lie inside the phase's span on the driver's timeline
    for r in rows:
        assert lb["started_ns"] <= r["sent_ns"] <= r["end_ns"] <= lb["ended_ns"]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning two workers needs two cores")
async def test_load_pin_in_a_scenario_puts_each_worker_on_a_core_of_its_own(tmp_path: Path) -> None:
    sets = {**SMALL, "load.requests": 20, "load.concurrency": 4, "load.pin": True}
    scn, _ = load_scenario("throughput", sets)
    outcome = await run_scenario(scn, RunOptions(output_dir=tmp_path, quiet=True, report=False))
    assert outcome.exit_code == 0
    (phase,) = [p for p in read_manifest(outcome.run_dir)["phases"] if p.get("load_backend")]
    lb = phase["load_backend"]
    cores = sorted(os.sched_getaffinity(0))
    assert lb["pinned"] is True
    assert [w["cpus"] for w in lb["workers"]] == [[cores[0]], [cores[1]]]


def _cli(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "kvbench", *args]
    return subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _rows_file(out: Path, deadline: float) -> Path:
    while time.monotonic() < deadline:
        found = list(out.glob("*/requests.jsonl"))
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError("no requests.jsonl appeared")


def test_a_killed_worker_leaves_its_rows_and_fails_the_run(tmp_path: Path) -> None:
    sets = {
        **SMALL,
        "load.requests": 200,
        "load.concurrency": 4,
        "target.mock_overrides": {"time_scale": 0.5},  # ~4 s of phase: time to kill mid-way
    }
    args = ["run", "throughput", "--output-dir", str(tmp_path), "--no-report", "--quiet"]
    for k, v in sets.items():
        args += ["--set", f"{k}={json.dumps(v)}"]
    proc = _cli(args, tmp_path)
    deadline = time.monotonic() + 120
    path = _rows_file(tmp_path, deadline)
    victim = None
    while victim is None and time.monotonic() < deadline and proc.poll() is None:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]
        sent = [r for r in rows if r.get("worker_pid")]
        if len(sent) >= 30:
            victim = sent[0]["worker_pid"]
            os.kill(victim, signal.SIGKILL)
            before = {r["request_id"]: r for r in sent if r["worker_pid"] == victim}
        time.sleep(0.02)
    assert victim is not None, "the phase ended before a worker could be killed"
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    run_dir = path.parent
    rows = _measured(read_jsonl(path))
    ids = Counter(r["request_id"] for r in rows)
    assert len(ids) == 200 and set(ids.values()) == {1}  # every request a row, exactly once
    final = {r["request_id"]: r for r in rows}
    assert all(final[rid] == row for rid, row in before.items())  # what it had sent is intact
    kinds = Counter(r["error_type"] for r in rows if r["worker_pid"] == victim and r["status"] != "ok")
    assert kinds[NOT_SENT] > 0 and set(kinds) <= {NOT_SENT, WORKER_LOST}
    assert all(r["status"] == "ok" for r in rows if r["worker_pid"] != victim)  # the other finished
    lb = next(p["load_backend"] for p in read_manifest(run_dir)["phases"] if p.get("load_backend"))
    lost = next(w for w in lb["workers"] if w["pid"] == victim)
    assert lost["state"] == "lost" and lost["not_issued"] == kinds[NOT_SENT] == lb["not_sent"]
    assert lost["lost_in_flight"] == kinds[WORKER_LOST]
    assert lb["sent"] == 200 - lb["not_sent"] < lb["requests"] == 200
    assert "sent fewer requests than it was asked" in err


@dataclasses.dataclass
class Item:
    index: int
    prompt_id: int
    scheduled_offset_s: float = 0.0


class Phase:
    """What kvbench.run gives a remote backend: prepared requests in, rows out."""

    retries = 0

    def __init__(self, base_url: str, concurrency: int) -> None:
        self.cfg = ClientConfig(base_url=base_url, model="m", max_tokens=4)
        self.concurrency, self.origin_ns, self.seq = concurrency, time.perf_counter_ns(), 0
        self.rows: list[dict] = []

    def prepare(self, item: Item) -> PreparedRequest:
        self.seq += 1
        fields = {"phase": "cached", "label": "cached", "prompt_id": item.prompt_id}
        body = build_body(self.cfg, f"prompt {item.prompt_id} " + "w " * 100)
        return PreparedRequest(f"run-cached-{self.seq}", fields, body, item.scheduled_offset_s)

    def client_spec(self) -> dict:
        cfg = dataclasses.asdict(self.cfg)
        return {"config": cfg, "headers": {}, "concurrency": self.concurrency, "connect_timeout_s": 10.0}

    def started(self, request_id: str) -> None:
        pass

    def record(self, rec, extra: dict) -> None:
        self.rows.append({**rec.to_row(), **extra})


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning two workers needs two cores")
async def test_pinned_workers_are_kept_across_phases_and_follow_the_target(tmp_path: Path) -> None:
    gt, gt_after = tmp_path / "gt.jsonl", tmp_path / "gt-after.jsonl"
    async with (
        MockServer("ci", ground_truth=gt) as srv,
        MockServer("ci", ground_truth=gt_after) as after,
    ):
        phase = Phase(srv.base_url, concurrency=4)
        backend = LocalWorkersBackend(workers=2, pin=True)
        try:
            await backend.run_items([Item(i, i % 5) for i in range(40)], 4, False, phase, phase.origin_ns)
            pids = {w.pid for w in backend.workers}
            phase.cfg = dataclasses.replace(phase.cfg, base_url=after.base_url)  # the target moved
            paced = [Item(i, i % 5, scheduled_offset_s=i * 0.02) for i in range(10)]
            await backend.run_items(paced, 4, True, phase, phase.origin_ns)
            assert {w.pid for w in backend.workers} == pids  # the same processes: no spawn per phase
        finally:
            await backend.aclose()
    assert all(not w.process.is_alive() for w in backend.workers)
    moved = {json.loads(line)["request_id"] for line in gt_after.read_text().splitlines()}
    assert moved == {r["request_id"] for r in phase.rows[40:]} and len(moved) == 10
    assert len({r["request_id"] for r in phase.rows}) == 50 and all(r["status"] == "ok" for r in phase.rows)
    cores = sorted(os.sched_getaffinity(0))
    assert [w["cpus"] for w in backend.record()["workers"]] == [[cores[0]], [cores[1]]]
    # a paced phase keeps each arrival where the schedule put it, whichever worker sent it
    rows = sorted(phase.rows[40:], key=lambda r: r["scheduled_ns"])
    start = rows[0]["scheduled_ns"]
    assert max(abs(r["scheduled_ns"] - start - i * 20_000_000) for i, r in enumerate(rows)) < 5_000_000
