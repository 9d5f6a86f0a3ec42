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

from kvbench.mock.server import MockServer
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
