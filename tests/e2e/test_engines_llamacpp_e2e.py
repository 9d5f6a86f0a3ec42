"""llama.cpp's llama-server on CPU, end to end through `kvbench run` (tiny random-weight model).

G1 (slot KV), G2 (RAM prompt cache, --cache-ram) and the disk tier (slot save/restore).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


async def _timed_completion(session: Any, base_url: str, prompt: str) -> dict[str, Any]:
    body = {"prompt": prompt, "max_tokens": 4, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    t0 = time.perf_counter_ns()
    first: int | None = None
    usage: dict[str, Any] = {}
    async with session.post(f"{base_url}/v1/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        async for raw in resp.content:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            if first is None and chunk.get("choices") and chunk["choices"][0].get("text"):
                first = time.perf_counter_ns()
            usage = chunk.get("usage") or usage
    assert first is not None and usage
    return {"ttft_ms": (first - t0) / 1e6, "prompt_tokens": usage["prompt_tokens"],
            "cached_tokens": usage["prompt_tokens_details"]["cached_tokens"]}  # fmt: skip


async def test_ttft_from_disk_slot_save_restore(llama_g1: EngineProcess) -> None:
    """Disk tier: cold, save the slot to disk, erase it, restore it, then warm.

    The restore is a separate call: it is NOT inside the warm TTFT, so the check adds it.
    """
    import aiohttp
    import numpy as np

    from kvbench.engines.tiers import disk_round_trip, slot_action
    from kvbench.prompts import make_salt, word_stream

    prompt = make_salt(np.random.default_rng()) + " " + " ".join(word_stream(0, 77, 8186))  # 8k tokens
    # llama-server closes the connection after a streamed response although it says keep-alive
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
        await slot_action(session, llama_g1.base_url, 0, "erase")
        cold = await _timed_completion(session, llama_g1.base_url, prompt)
        trip = await disk_round_trip(session, llama_g1.base_url, 0, "kvbench-e2e-disk.bin")
        warm = await _timed_completion(session, llama_g1.base_url, prompt)
    assert llama_g1.slot_save_dir is not None
    (llama_g1.slot_save_dir / "kvbench-e2e-disk.bin").unlink(missing_ok=True)
    from_disk_ms = warm["ttft_ms"] + trip["restore_client_ms"]
    say(
        f"disk tier at {cold['prompt_tokens']} tokens: cold {cold['ttft_ms']:.1f} ms, restore "
        f"{trip['restore_client_ms']:.1f} ms ({trip['bytes_read'] / 2**20:.1f} MiB) "
        f"+ warm {warm['ttft_ms']:.1f} ms"
    )
    assert cold["cached_tokens"] == 0
    assert trip["n_restored"] >= 0.9 * cold["prompt_tokens"]
    assert warm["cached_tokens"] >= 0.9 * warm["prompt_tokens"]
    assert cold["ttft_ms"] >= 3 * from_disk_ms


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

    from kvbench.cache import ADAPTERS

    text = urllib.request.urlopen(llama_g1.base_url + "/metrics", timeout=10).read().decode()
    adapter = ADAPTERS["llamacpp"]
    for name in (*adapter.hit_counters, *adapter.source_counters):
        assert f"\n{name} " in text or text.startswith(name), f"{name} not in llama-server's /metrics"
