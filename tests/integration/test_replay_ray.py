"""A replay sent from two Ray load workers (a real Ray test cluster on this machine): the same trace
rows as a local replay, each sent once, token-exact, with its replay row beside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from raycluster import kvbench_cli, ray_test_cluster, read_jsonl

from kvbench.cluster import ray_available
from kvbench.traces import open_trace

pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.skipif(not ray_available(), reason="Ray is not installed: pip install 'kvbench[ray]'"),
]

SMALL = Path(__file__).resolve().parents[2] / "tests" / "data" / "replay" / "mooncake-small.jsonl"


def test_replay_on_two_ray_load_workers(tmp_path) -> None:
    with ray_test_cluster() as (c, _):
        p = kvbench_cli(
            *("run", "replay", "--quiet", "--no-report", "--trace", str(SMALL)),
            *("--set", "test.workers=2", "--set", "cluster.cpus_per_load_worker=0.5"),
            *("--set", "test.trace.speedup=10", "--cluster", "ray", "--output-dir", str(tmp_path)),
            address=c.address,
        )
    assert p.returncode == 0, p.stderr
    (run_dir,) = list(tmp_path.iterdir())
    trace = list(open_trace(SMALL))
    reqs = {r["request_id"]: r for r in read_jsonl(run_dir / "requests.jsonl") if r["phase"] == "replay"}
    rows = sorted(read_jsonl(run_dir / "replay.jsonl"), key=lambda r: r["index"])
    assert [r["trace_line"] for r in rows] == [t.line for t in trace]  # every row once
    assert set(reqs) == {r["request_id"] for r in rows}
    sent = [reqs[r["request_id"]] for r in rows]
    assert all(s["status"] == "ok" for s in sent) and {s["worker"] for s in sent} == {"load-0", "load-1"}
    assert [s["prompt_tokens_server"] for s in sent] == [t.input_length for t in trace]
    assert [s["output_tokens"] for s in sent] == [t.output_length for t in trace]
    assert sum(s["cached_tokens"] for s in sent) > 0
    summary = json.loads((run_dir / "replay.json").read_text())
    assert summary["load_backend"] == "ray" and summary["lateness"]["n"] == len(trace)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    (phase,) = [ph for ph in manifest["phases"] if ph["name"] == "replay"]
    assert phase["load_backend"]["backend"] == "ray"
