"""`kvbench fit --base-url`: the fit measures a server itself and finds its sequence limit.

The server is kvbench's mock in a child process (as kvbench.mock.spawn starts it) with 4 slots
(`gpu.max_num_seqs=4`, at ibm-g4's real-time pace so a queue lasts long enough to be sampled). The
limit is found from the mock's own gauges, and again without them by the step model; the API key
named by --api-key-env reaches no file and no console line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

SLOTS = 4
SECRET = "sk-fit-test-0123456789abcdef"


def _kvbench(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvbench", *args], cwd=cwd, capture_output=True, text=True, timeout=600,
        env=env,
    )  # fmt: skip


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """A mock with SLOTS sequences at once, on a free port; gone when the module's tests end."""
    argv = [sys.executable, "-m", "kvbench.mock", "serve", "--profile", "ibm-g4", "--port", "0",
            "--announce", "--exit-on-stdin-eof", "--set", f"gpu.max_num_seqs={SLOTS}"]  # fmt: skip
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert proc.stdout is not None
        yield json.loads(proc.stdout.readline())["base_url"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def fitted(
    server: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    tmp = tmp_path_factory.mktemp("fit-base-url")
    env = dict(os.environ, KVB_FIT_TEST_KEY=SECRET)
    proc = _kvbench("fit", "--base-url", server, "--budget-s", "240", "--concurrencies", "1,2,4,8",
                    "--runs-dir", "runs", "-o", "twin.yaml", "--api-key-env", "KVB_FIT_TEST_KEY",
                    cwd=tmp, env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return tmp, proc


@pytest.mark.slow
def test_fit_base_url_measures_and_finds_the_limit_from_the_gauges(fitted) -> None:
    tmp, proc = fitted
    runs = sorted(p.name.rsplit("-", 2)[1] for p in (tmp / "runs").iterdir())
    assert runs == ["throughput"] * 4 + ["ttft"]
    for c in (1, 2, 4, 8):
        assert f"fit: throughput at {c} connection(s) done" in proc.stdout
    twin = yaml.safe_load((tmp / "twin.yaml").read_text())
    term = twin["fit"]["terms"]["max_num_seqs"]
    assert (term["value"], term["origin"], term["binding"]) == (SLOTS, "gauges", True)
    assert twin["gpu"]["max_num_seqs"] == SLOTS
    assert "vllm:num_requests_running" in term["detail"]
    observed = twin["fit"]["observed_throughput"]
    assert sorted(o["concurrency"] for o in observed) == [1, 2, 4, 8]
    assert all(o["predicted_requests_per_s"] > 0 and o["predicted_ttft_p50_s"] > 0 for o in observed)


@pytest.mark.slow
def test_the_api_key_reaches_no_file_and_no_console(fitted) -> None:
    tmp, proc = fitted
    assert SECRET not in proc.stdout + proc.stderr
    for path in tmp.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path
    scenario = next((tmp / "runs").glob("*ttft*/scenario.yaml")).read_text()
    assert "KVB_FIT_TEST_KEY" in scenario  # the name travels, so a rerun finds the key again


@pytest.mark.slow
@pytest.mark.timing
def test_without_gauges_the_step_model_finds_the_limit(fitted, tmp_path: Path) -> None:
    tmp, _ = fitted
    shutil.copytree(tmp / "runs", tmp_path / "runs")
    for metrics in (tmp_path / "runs").glob("*throughput*/metrics.jsonl"):
        metrics.unlink()
    proc = _kvbench(
        "fit", *sorted(str(p) for p in (tmp_path / "runs").iterdir()), "-o", "twin.yaml", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    term = yaml.safe_load((tmp_path / "twin.yaml").read_text())["fit"]["terms"]["max_num_seqs"]
    assert term["origin"] == "model" and term["binding"], term
    # wall-clock runs on a shared machine: 4 against its neighbours (the unit tests check it exactly)
    assert SLOTS - 1 <= term["value"] <= SLOTS + 1, term


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--concurrencies", "1,x"], "--concurrencies '1,x'"),
        (["--concurrencies", "0,2"], "--concurrencies '0,2'"),
        (["--lengths", "4000"], "--lengths"),
        (["--budget-s", "0"], "--budget-s 0"),
        (["--api-key-env", "KVB_FIT_NOT_SET_ANYWHERE"], "--api-key-env KVB_FIT_NOT_SET_ANYWHERE: not set"),
        (["--api-key-env", "sk-a key"], "--api-key-env 'sk-a key'"),
    ],
)
def test_bad_values_are_one_line_errors(tmp_path: Path, args: list[str], names: str) -> None:
    proc = _kvbench("fit", "--base-url", "http://127.0.0.1:9", *args, cwd=tmp_path)
    assert proc.returncode == 2 and names in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "results").exists()  # refused before any run


def test_api_key_env_without_a_base_url_is_refused(tmp_path: Path) -> None:
    proc = _kvbench("fit", "some-run", "--api-key-env", "KVB_FIT_TEST_KEY", cwd=tmp_path)
    assert proc.returncode == 2 and "--api-key-env: only with --base-url" in proc.stderr, proc.stderr


def test_a_base_url_that_is_no_http_url_is_refused(tmp_path: Path) -> None:
    proc = _kvbench("fit", "--base-url", "ftp://user:pw@host", cwd=tmp_path)
    assert proc.returncode == 2 and "--base-url" in proc.stderr and "pw" not in proc.stderr, proc.stderr
