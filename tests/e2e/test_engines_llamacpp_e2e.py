"""llama.cpp's llama-server on CPU, end to end through `kvbench run` (tiny random-weight model).

G1 (slot KV), G2 (RAM prompt cache, --cache-ram) and the disk tier (slot save/restore).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from engine_e2e import Run, check_all_ok, check_counters, check_ttft, kvbench_run, say

from kvbench.engines.install import Installed
from kvbench.engines.serve import EngineProcess, running_engine

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

HIT_COUNTER = "llamacpp:prompt_tokens_cached_total"


@pytest.fixture(scope="module")
def llama_g1(llamacpp_installed: Installed) -> Iterator[EngineProcess]:
    """One slot, RAM prompt cache off: erasing the slot is then a complete reset."""
    with running_engine("llamacpp", slots=1, ctx=10240, cache_ram_mib=0, progress=say) as eng:
        yield eng


def test_ttft_cold_vs_warm(llama_g1: EngineProcess, run_dir: Path) -> None:
    run = Run(kvbench_run("ttft-llamacpp", llama_g1.base_url, run_dir))
    assert run.manifest["target"]["engine"] == "llamacpp"
    check_ttft(run, min_speedup=5.0)
    check_counters(run, "ttft", HIT_COUNTER)


def test_ttft_from_the_ram_prompt_cache(llamacpp_installed: Installed, run_dir: Path) -> None:
    """G2: a filler takes the only slot, the prompt comes back from llama.cpp's RAM prompt cache."""
    with running_engine("llamacpp", slots=1, ctx=10240, cache_ram_mib=1024, progress=say) as eng:
        run = Run(kvbench_run("ttft-llamacpp-ram", eng.base_url, run_dir, "--lengths", "2048,8192"))
    check_ttft(run, warm_label="evicted-warm", min_speedup=3.0)
    for filler in run.rows(label="filler"):
        assert filler["cached_tokens"] < 0.25 * filler["prompt_tokens_server"]  # fillers are computed
    check_counters(run, "ttft", HIT_COUNTER)


def test_ttft_from_disk_slot_save_restore(llama_g1: EngineProcess, run_dir: Path) -> None:
    """Disk tier through `kvbench run`: cold, save slot 0 to disk, erase, restore, then warm.

    The restore is a separate call: it is NOT inside the warm TTFT, so the check adds it.
    """
    run = Run(kvbench_run("ttft-llamacpp-disk", llama_g1.base_url, run_dir))
    check_ttft(run, warm_label="evicted-warm", min_speedup=3.0)
    steps = run.manifest["ttft_steps"]
    assert llama_g1.slot_save_dir is not None
    for step in steps:
        assert step["eviction"] == "slot_file"
        assert step["n_restored"] >= 0.9 * step["tokens"]
        assert step["restore_client_ms"] > 0
        (llama_g1.slot_save_dir / step["slot_file"]).unlink(missing_ok=True)
    longest = max(steps, key=lambda s: s["tokens"])
    from_disk_s = longest["warm_ttft_s"] + longest["restore_client_ms"] / 1000
    say(
        f"disk tier at {longest['tokens']} tokens: cold {longest['cold_ttft_s'] * 1000:.1f} ms, restore "
        f"{longest['restore_client_ms']:.1f} ms + warm {longest['warm_ttft_s'] * 1000:.1f} ms"
    )
    assert longest["cold_ttft_s"] >= 3 * from_disk_s


def test_throughput_over_slots(llamacpp_installed: Installed, run_dir: Path) -> None:
    with running_engine("llamacpp", slots=4, ctx=4096, cache_ram_mib=1024, progress=say) as eng:
        run = Run(kvbench_run("throughput-llamacpp", eng.base_url, run_dir))
    check_all_ok(run)
    rows = run.rows(phase="cached")
    assert len(rows) == 32
    reused = [r for r in rows if (r["cached_tokens"] or 0) >= 0.9 * r["prompt_tokens_server"]]
    assert len(reused) >= 8, f"only {len(reused)} of 32 requests reused a cached prompt"
    check_counters(run, "cached", HIT_COUNTER)


def test_metric_names_are_real(llama_g1: EngineProcess) -> None:
    import urllib.request

    from kvbench.engines.adapters import get_adapter

    text = urllib.request.urlopen(llama_g1.base_url + "/metrics", timeout=10).read().decode()
    adapter = get_adapter("llamacpp")
    for name in (*adapter.hit_counters, *adapter.source_counters):
        assert f"\n{name} " in text or text.startswith(name), f"{name} not in llama-server's /metrics"
