"""The client's own limits: open files are checked (and the soft limit raised toward the hard one)
before anything starts; a connection this machine could not open is `client_limit`, not the server's."""

import errno
import json
import os
import subprocess
import sys

import pytest

from kvbench.run.preflight.limits import CLIENT_LIMIT, is_client_limit

pytestmark = pytest.mark.slow

# run kvbench with RLIMIT_NOFILE set to (soft, hard) first, as `ulimit -n` would; "nocheck" disables the
# up-front check, standing in for descriptors that something else took after it passed
WRAPPER = """
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), int(sys.argv[2])))
if sys.argv[3] == "nocheck":
    import kvbench.run.runner as runner
    runner.ensure_open_files = lambda connections: (0, 0)
from kvbench.cli import main
sys.argv = ["kvbench", *sys.argv[4:]]
main()
"""

LOAD = ["--requests", "200", "--lengths", "100", "--max-tokens", "2", "--no-report", "-q"]


def kvbench_limited(soft: int, hard: int, mode: str, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", WRAPPER, str(soft), str(hard), mode, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_a_hard_limit_below_the_connections_is_one_line_naming_ulimit(tmp_path):
    done = kvbench_limited(
        100, 100, "check", "run", "throughput", "--concurrency", "200", *LOAD, "--output-dir", str(tmp_path)
    )
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("kvbench: open files: this run opens up to 200 connections and needs ")
    assert "this process may open 100 (hard limit 100); raise it with `ulimit -n " in line
    assert not any(tmp_path.iterdir())  # nothing started, no run directory


def test_a_low_soft_limit_is_raised_toward_the_hard_one(tmp_path):
    """150 connections under a soft limit of 100: without the raise most would fail with EMFILE."""
    done = kvbench_limited(
        100, 4096, "check", "run", "throughput", "--concurrency", "150", *LOAD, "--output-dir", str(tmp_path)
    )
    assert done.returncode == 0, done.stderr
    (run_dir,) = tmp_path.iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["error_counts"] == {}


def test_descriptors_running_out_mid_run_are_the_clients_failures_not_the_servers(tmp_path):
    done = kvbench_limited(
        100, 100, "nocheck", "run", "throughput", "--concurrency", "200", *LOAD, "--output-dir", str(tmp_path)
    )
    assert done.returncode == 1
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) <= 2, done.stderr
    (run_dir,) = tmp_path.iterdir()
    rows = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    failed = [r for r in rows if r["status"] == "error"]
    assert failed, "expected EMFILE at 200 connections under 100 open files"
    assert {r["error_type"] for r in failed} == {CLIENT_LIMIT}
    assert all("Too many open files" in r["error_message"] for r in failed)


def test_which_connect_failures_are_the_clients():
    def message(code: int) -> str:  # as the transports write a failed connect
        return f"cannot connect to http://127.0.0.1:8000: {OSError(code, os.strerror(code))}"

    for code in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.EADDRNOTAVAIL):
        assert is_client_limit("connect_error", message(code))
    assert not is_client_limit("connect_error", message(errno.ECONNREFUSED))
    assert not is_client_limit("connect_error", "connect timed out after 10 s")
    assert not is_client_limit("http_500", message(errno.EMFILE))


def test_a_ray_cluster_too_small_for_the_noise_is_exit_2_before_the_first_phase(tmp_path):
    """It ran with half the noise and exit 0 (two clients 'did not start ... no answer in time')."""
    pytest.importorskip("ray")
    clients = str(2 * (os.cpu_count() or 1) + 1)  # a local Ray has this machine's CPUs: one each is too many
    args = ["run", "throughput", "--noisy", "--cluster", "ray", "--set", f"noise.clients={clients}"]
    done = subprocess.run(
        [sys.executable, "-m", "kvbench", *args, "--output-dir", str(tmp_path), "-q", "--no-report"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    ours = [line for line in done.stderr.splitlines() if line.startswith("kvbench:")]
    assert len(ours) == 1 and ours[0].startswith(f"kvbench: cluster: cannot place {clients} noise clients")
    assert "CPUs and has" in ours[0] and "alive node" in ours[0]
    assert not any(tmp_path.iterdir())
