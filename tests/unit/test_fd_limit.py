"""The open-files check counts what the run will hold and refuses only what cannot fit, saying the number."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from kvbench.errors import UsageError
from kvbench.run.preflight import limits
from kvbench.run.preflight.limits import CONTROL_FDS, MARGIN, PER_PROCESS, RUN_FILES, FdBudget, fd_budget
from kvbench.scenario import load_scenario

WRAPPER = """
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), int(sys.argv[1])))
from kvbench.cli import main
sys.argv = ["kvbench", *sys.argv[2:]]
main()
"""


def test_the_budget_is_the_sum_of_what_is_held() -> None:
    b = FdBudget(200, exporters=2, children=1)
    assert b.need(10) == 200 + 10 + RUN_FILES + CONTROL_FDS + 2 + PER_PROCESS + MARGIN


def test_load_workers_hold_their_connections_in_their_own_processes() -> None:
    scn, _ = load_scenario("throughput", {"load.concurrency": 400, "load.workers": 4})
    b = fd_budget(scn)
    assert (b.connections, b.worker_connections, b.children) == (0, 100, 4)
    assert b.need(10) < 400


def test_refusal_says_the_number(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "_in_use", lambda: 10)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    budget = FdBudget(hard + 1000 if hard != resource.RLIM_INFINITY else 10**12)
    if hard == resource.RLIM_INFINITY:
        pytest.skip("no hard limit to exceed")
    with pytest.raises(UsageError) as exc:
        limits.ensure_open_files(budget)
    need = budget.need(10)
    assert f"needs {need:,} file descriptors" in exc.value.message
    assert f"`ulimit -n {need}`" in exc.value.message
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[1] == hard


@pytest.mark.slow
@pytest.mark.parametrize("concurrency, fits", [(200, True), (2000, False)])
def test_ulimit_256(tmp_path: Path, concurrency: int, fits: bool) -> None:
    """`ulimit -n 256`: 200 connections run (they completed before the check existed); 2,000 cannot."""
    args = ["run", "throughput", "--concurrency", str(concurrency), "--requests", str(concurrency)]
    args += ["--lengths", "100", "--max-tokens", "2", "--no-report", "-q", "--output-dir", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, "-c", WRAPPER, "256", *args], capture_output=True, text=True, timeout=300
    )
    if fits:
        assert done.returncode == 0, done.stderr
        (run_dir,) = tmp_path.iterdir()
        assert '"status":"complete"' in (run_dir / "manifest.json").read_text().replace(" ", "")
    else:
        assert done.returncode == 2, done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert "2,000 connections" in line and "`ulimit -n 20" in line
        assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_an_oversized_prompt_is_refused_before_it_is_built(tmp_path: Path) -> None:
    """10M tokens against the embedded mock (context 131,072): refused from the figures, never built
    (building it for the body probe first peaked at 2.7 GB)."""
    script = (
        "import resource, subprocess, sys\n"
        "p = subprocess.run([sys.executable, '-m', 'kvbench', 'run', 'ttft', '--lengths', '10000000', "
        f"'--output-dir', {str(tmp_path)!r}, '-q'], capture_output=True, text=True)\n"
        "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.stderr.strip())\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    code, peak_kb, err = done.stdout.split(" ", 2)
    assert code == "2" and "exceeds the model's context 131072" in err, done.stdout + done.stderr
    assert int(peak_kb) < 512 * 1024, peak_kb  # the mock and kvbench at rest, not a 10M-token prompt
