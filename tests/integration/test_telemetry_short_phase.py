"""A phase shorter than telemetry.interval_s still has its telemetry: each source is read as the
phase starts and as it ends, besides the periodic ticks. Before, a ~1.5 s phase at the default
1 s interval could end before its first tick and wrote no telemetry rows at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbench.results import read_jsonl, read_manifest
from kvbench.run.runner import RunOptions, run_scenario
from kvbench.scenario import load_scenario
from kvbench.telemetry.sampler import TELEMETRY

pytestmark = pytest.mark.slow


SHORT = {
    "throughput": {
        "prompts.count": 2,
        "prompts.lengths": [300],
        "output.max_tokens": 4,
        "load.requests": 6,
        "load.concurrency": 2,
    },
    "replay": {"test.trace.speedup": 40},  # the phase sampler of kvbench.run.replay.phases
}


@pytest.mark.parametrize("test", sorted(SHORT))
async def test_a_phase_shorter_than_the_interval_has_telemetry_rows(tmp_path: Path, test: str) -> None:
    overrides = {
        **SHORT[test],
        "telemetry.interval_s": 30.0,  # far longer than any phase here: no periodic tick lands
        "telemetry.host": True,
    }
    scn, _ = load_scenario(test, overrides)
    outcome = await run_scenario(scn, RunOptions(output_dir=tmp_path, quiet=True, report=False))
    assert outcome.status == "complete", outcome
    phases = read_manifest(outcome.run_dir)["phases"]
    rows = read_jsonl(outcome.run_dir / TELEMETRY)
    sampled = [p for p in phases if p["duration_s"] < 30.0]
    assert sampled, phases
    for phase in sampled:
        mine = [r for r in rows if r["phase"] == phase["name"] and r["source"] == "host"]
        reads = sorted({r["t_ns"] for r in mine})
        # one read as it starts, one as it ends: a rate over the phase can be drawn from them
        assert len(mine) >= 2 and len(reads) >= 2, (phase["name"], phase["duration_s"], len(mine))
        assert reads[0] <= phase["ended_ns"] <= reads[-1]  # the closing read follows the ended mark
