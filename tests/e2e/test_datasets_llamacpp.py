"""A vLLM-bench dataset against llama.cpp on CPU: `kvbench run throughput --dataset` with the
prefix_repetition fixture sends every prompt token-exact as llama.cpp counts it (its BOS included),
from a verified cold start, and llama.cpp never reports more reuse than the dataset allows (the
run's shared salt aside)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from engine_e2e import Run, check_all_ok, kvbench_run, say

from kvbench.datasets import open_dataset
from kvbench.engines.install import Installed
from kvbench.engines.serve import EngineProcess, running_engine
from kvbench.load.prompts import SALT_WORDS

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "datasets" / "prefix_repetition.json"


@pytest.fixture(scope="module")
def llamacpp_server(llamacpp_installed: Installed) -> Iterator[EngineProcess]:
    with running_engine("llamacpp", slots=1, ctx=4096, cache_ram_mib=512, progress=say) as eng:
        yield eng


def test_prefix_repetition_dataset_on_llamacpp(llamacpp_server: EngineProcess, run_dir: Path) -> None:
    ds = open_dataset(FIXTURE)
    args = ("--dataset", str(FIXTURE), "--concurrency", "1", "--requests", str(2 * len(ds.requests)))
    run = Run(kvbench_run("throughput-llamacpp", llamacpp_server.base_url, run_dir, *args))
    check_all_ok(run)
    assert run.manifest["cold_start"]["verified"] is True
    sent = run.rows(phase="cached")
    rows = [json.loads(line) for line in (run.path / "dataset.jsonl").read_text().splitlines()]
    assert len(sent) == len(rows) == 2 * len(ds.requests)
    assert [r["prompt_id"] for r in sent] == [r["prompt_id"] for r in rows]  # one at a time, in order
    # token-exact: llama.cpp counts each realised prompt (salt and BOS included) as the dataset's length
    asked = [ds.requests[r["prompt_id"]] for r in rows]
    assert [r["prompt_tokens_server"] for r in sent] == [q.input_tokens for q in asked]
    assert [r["output_tokens"] for r in sent] == [q.output_tokens for q in asked]
    reported = [r["cached_tokens"] or 0 for r in sent]
    assert reported[0] == 0  # the run's salt: nothing cached before it counts
    # a prefix reused is a prefix sent before: at most the dataset's expectation (plus a word two
    # different blocks may start with by chance). llama.cpp matches by token, not by block, so a
    # prompt whose first block is new still reuses the run's salt every prompt starts with (BOS and
    # SALT_WORDS words: 7 tokens on kvbench-tiny), which a whole-block expectation counts as 0
    shared = 1 + SALT_WORDS
    pairs = [(c, r["expected_cached_tokens"]) for c, r in zip(reported, rows, strict=True)]
    assert all(c <= max(e, shared) + 2 for c, e in pairs), pairs
    assert sum(reported) > 0  # the shared prefixes were reused
