"""Adding an engine is one module: this file defines a fake engine adapter, registers it at import,
and a real kvbench run against the embedded mock uses it for reset, verification, counters,
request body and tier eviction (#12 item 2, "done when")."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from kvbench.engines.adapters import EngineAdapter, engine_help, register
from kvbench.results import read_jsonl, read_manifest
from kvbench.run.runner import RunOptions, run_scenario
from kvbench.scenario import load_scenario

pytestmark = pytest.mark.slow


@register
class FakeAdapter(EngineAdapter):
    """A made-up engine that happens to speak the mock's endpoints under its own rules."""

    name = "fake"
    description = "a fake engine registered by a test"
    reset_method = "POST"
    reset_path = "/reset_prefix_cache?include_persistent=true"
    hit_counters = ("vllm:prefix_cache_hits_total",)
    query_counters = ("vllm:prefix_cache_queries_total",)
    metric_prefixes = ("vllm:",)
    extra_body: ClassVar[dict[str, Any]] = {"fake_engine_hint": "cold"}
    fast_tier_reset_path: ClassVar[str | None] = "/reset_prefix_cache?tiers=G1,G2"
    resets: ClassVar[list[str]] = []

    async def reset(self, http: Any, attempts: int = 5) -> tuple[bool, str]:
        FakeAdapter.resets.append(http.base_url)
        return await super().reset(http, attempts)

    async def evict_fast_tiers(self, http: Any) -> dict[str, Any]:
        FakeAdapter.resets.append("evict")
        return await super().evict_fast_tiers(http)


async def test_a_run_uses_an_adapter_registered_in_one_module(tmp_path):
    assert "fake" in engine_help()  # the CLI help and the scenario's names come from the registry
    overrides = {
        "target.engine": "fake",
        "prompts.lengths": [2000],
        "cache.eviction": "tier_reset",
        "target.mock_profile": "laptop",
        "target.mock_overrides": {"time_scale": 0.02},
    }
    scn, _ = load_scenario("ttft", overrides)
    outcome = await run_scenario(scn, RunOptions(output_dir=tmp_path, quiet=True, report=False))
    manifest = read_manifest(outcome.run_dir)
    assert outcome.exit_code == 0 and manifest["target"]["engine"] == "fake"
    assert manifest["cold_start"]["method"] == "salt+reset" and manifest["cold_start"]["verified"] is True
    assert manifest["cold_start"]["probe_hit_delta"] == 0  # read through the fake's hit counter
    assert "evict" in FakeAdapter.resets and len(FakeAdapter.resets) >= 3  # probe + cold step + eviction
    assert manifest["ttft_steps"][0]["eviction"] == "tier_reset"
    metrics = read_jsonl(outcome.run_dir / "metrics.jsonl")
    assert {m["name"] for m in metrics} >= {"vllm:prefix_cache_hits_total"}
    truth = read_jsonl(outcome.run_dir / "mock_ground_truth.jsonl")
    assert truth  # the mock served the run
