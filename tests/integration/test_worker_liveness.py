"""A load worker that stops (SIGSTOP) mid-run is declared lost once silent for its bound (the run's
connect timeout, 10 s at least): the run ends, exit 1, every request a row, the manifest `failed`
with the cause. Before, the other worker finished its half and the run hung until killed."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from kvbench.load.local_workers import SILENCE_MIN_S
from kvbench.load.worker_phase import NOT_SENT, WORKER_LOST
from kvbench.results import read_jsonl, read_manifest

pytestmark = pytest.mark.slow


def test_a_stopped_worker_is_lost_and_the_run_ends(tmp_path: Path) -> None:
    sets = {
        "prompts.count": 4,
        "prompts.lengths": [300],
        "output.max_tokens": 8,
        "load.workers": 2,
        "load.requests": 200,
        "load.concurrency": 4,
        "target.timeouts.connect_s": 2,  # below the floor: the bound is SILENCE_MIN_S
        "target.mock_overrides": {"time_scale": 0.5},
    }
    args = [
        sys.executable,
        "-m",
        "kvbench",
        "run",
        "throughput",
        "--output-dir",
        str(tmp_path),
        "--no-report",
    ]
    args.append("--quiet")
    for k, v in sets.items():
        args += ["--set", f"{k}={json.dumps(v)}"]
    proc = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    victim = None
    try:
        deadline = time.monotonic() + 120
        while victim is None and time.monotonic() < deadline and proc.poll() is None:
            found = list(tmp_path.glob("*/requests.jsonl"))
            rows = (
                [json.loads(ln) for ln in found[0].read_text().splitlines() if ln.endswith("}")]
                if found
                else []
            )
            sent = [r for r in rows if r.get("worker_pid")]
            if len(sent) >= 30:
                victim = sent[0]["worker_pid"]
                os.kill(victim, signal.SIGSTOP)
            time.sleep(0.02)
        assert victim is not None, "the phase ended before a worker could be stopped"
        # the stated bound is SILENCE_MIN_S of silence; the timeout here only stops a hang failing slowly
        _out, err = proc.communicate(timeout=SILENCE_MIN_S + 90)
    finally:
        if victim is not None:
            with_suppressed_kill(victim)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    path = found[0]
    rows = [r for r in read_jsonl(path) if r["label"] != "probe"]
    ids = Counter(r["request_id"] for r in rows)
    assert len(ids) == 200 and set(ids.values()) == {1}  # every request a row, exactly once
    lost = Counter(r["error_type"] for r in rows if r["worker_pid"] == victim and r["status"] != "ok")
    assert lost and set(lost) <= {NOT_SENT, WORKER_LOST}
    manifest = read_manifest(path.parent)
    assert manifest["status"] == "failed" and "no heartbeat" in manifest["error"]
    lb = next(p["load_backend"] for p in manifest["phases"] if p.get("load_backend"))
    worker = next(w for w in lb["workers"] if w["pid"] == victim)
    assert worker["state"] == "lost" and "no heartbeat" in json.dumps(worker)
    assert "sent fewer requests than it was asked" in err


def with_suppressed_kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
