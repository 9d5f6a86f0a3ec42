"""The mock records its own lateness and prompt CPU per request (engine.Trace, #30).

At a pace where the model gives a 20k-token cold prompt almost no time (time_scale 1e-6: ~µs of
modelled prefill), the mock's own tokenizing and hashing cannot be absorbed by any wait: the first
token is late by about the CPU it spent, whatever the machine (a slower one is later still). The
replayed prompt, validated once and looked up from the memo, costs less CPU than its first time.
"""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp

from kvbench.mock.api.server import MockServer
from kvbench.report.mock_lateness import phase_lateness


async def test_lateness_and_cpu_are_recorded(tmp_path: Path) -> None:
    gt = tmp_path / "gt.jsonl"
    prompt = " ".join(f"w{i % 97}" for i in range(20_000))
    body = {"model": "m", "prompt": prompt, "max_tokens": 2, "temperature": 0}
    async with (
        MockServer("ci", ground_truth=gt, profile_overrides={"time_scale": 1e-6}) as srv,
        aiohttp.ClientSession() as s,
    ):
        for _ in range(2):
            async with s.post(srv.base_url + "/v1/completions", json=body) as r:
                assert r.status == 200
    cold, warm = (json.loads(line) for line in gt.read_text().splitlines())
    assert cold["cached_tokens"] == 0 and warm["cached_tokens"] > 0
    assert cold["mock_cpu_ms"] > warm["mock_cpu_ms"] > 0
    modelled_ms = (cold["first_token_ns"] - cold["received_ns"]) / 1e6 - cold["mock_late_ms"]
    assert cold["mock_late_ms"] > cold["mock_cpu_ms"] * 0.5 > 0
    assert modelled_ms >= 0
    (p,) = phase_lateness([{"request_id": cold["request_id"], "phase": "x"}], [cold])
    assert p.exceeded  # the report would warn: this TTFT is the machine, not the model


async def test_a_run_records_the_mocks_lateness_in_its_manifest(tmp_path: Path) -> None:
    """A run at a pace no machine can keep (the model's prefill ~µs) flags its measured phases in
    the manifest and says so in its summary lines; the cold-start probes are listed, never flagged."""
    from kvbench.results import read_manifest
    from kvbench.run.context import RunOptions
    from kvbench.run.runner import run_scenario
    from kvbench.scenario import load_scenario

    overrides = {"prompts.lengths": [8000], "output.max_tokens": 2}
    scn, _ = load_scenario("ttft", {**overrides, "target.mock_overrides": {"time_scale": 1e-6}})
    out = await run_scenario(scn, RunOptions(output_dir=tmp_path, quiet=True, report=False))
    assert out.exit_code == 0
    lateness = read_manifest(out.run_dir)["mock_lateness"]
    assert lateness["threshold_share"] == 0.10
    by_phase = {p["phase"]: p for p in lateness["phases"]}
    assert "probe" in by_phase and not by_phase["probe"]["exceeded"]
    measured = [p for name, p in by_phase.items() if name != "probe"]
    assert measured and all(p["exceeded"] and p["share"] > 0.10 for p in measured)
    assert set(lateness["exceeded_phases"]) == {p["phase"] for p in measured}
    assert any("mock's own lateness" in line for line in out.summary_lines)
