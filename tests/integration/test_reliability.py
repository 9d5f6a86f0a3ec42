"""Interruption, durability and secrets, driving the real CLI in a child process against the embedded mock."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvbench.results import load_run, read_manifest

pytestmark = pytest.mark.slow
SENTINEL = "sk-kvbench-SENTINEL-7f3a9c"


def kvbench(*args, env=None, **kw):
    return subprocess.Popen(
        [sys.executable, "-m", "kvbench", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        **kw,
    )


def only_run_dir(base: Path) -> Path:
    dirs = [d for d in base.iterdir() if d.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


def wait_rows(run_base: Path, n: int, timeout: float = 60) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for d in run_base.iterdir() if run_base.exists() else []:
            req = d / "requests.jsonl"
            if req.exists() and len(req.read_text().splitlines()) >= n:
                return d
        time.sleep(0.1)
    raise AssertionError(f"fewer than {n} rows after {timeout}s")


LONG_RUN = [
    "run",
    "throughput",
    "--quiet",
    "--no-report",
    "--prompts",
    "20",
    "--set",
    "prompts.lengths=[3000]",
    "--requests",
    "400",
    "--concurrency",
    "4",
]  # long enough to interrupt; the 400 requests take ~10 s against the ci mock


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_keeps_every_finished_request(tmp_path, sig):
    proc = kvbench(*LONG_RUN, "--output-dir", str(tmp_path))
    run_dir = wait_rows(tmp_path, 6)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert str(run_dir) in err
    manifest = read_manifest(run_dir)
    assert manifest["status"] == "interrupted"
    df = load_run(run_dir)
    assert (df.status == "cancelled").sum() >= 1  # the in-flight ones, recorded as cancelled
    assert (df[df.status == "cancelled"].error_type == "cancelled").all()
    assert len(df) == len(set(df.request_id))
    # nothing left behind: the embedded mock child is gone
    time.sleep(0.5)
    assert not any("kvbench.mock" in p for p in _cmdlines() if str(tmp_path) in p)
    # and the report still works on it
    rep = subprocess.run(
        [sys.executable, "-m", "kvbench", "report", str(run_dir)], capture_output=True, text=True
    )
    assert rep.returncode == 0, rep.stderr
    assert "interrupted" in (run_dir / "report.md").read_text()


@pytest.mark.timing
def test_interrupt_during_noise_stops_the_senders(tmp_path):
    # its own session: the senders it starts are told apart from other kvbench runs on this machine
    proc = kvbench(*LONG_RUN, "--noisy", "--output-dir", str(tmp_path), start_new_session=True)
    run_dir = wait_rows(tmp_path, 402)  # the quiet phase is done: the noisy one is running
    time.sleep(0.5)
    assert any("kvbench.noise" in c for c in _cmdlines(session=proc.pid))
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    time.sleep(0.5)
    assert not any("kvbench.noise" in c for c in _cmdlines(session=proc.pid))
    assert not any("kvbench.mock" in c and str(tmp_path) in c for c in _cmdlines())
    assert read_manifest(run_dir)["status"] == "interrupted"
    assert (run_dir / "noise.jsonl").stat().st_size > 0


def _cmdlines(session=None):
    """Command lines of the processes on this machine (of one session only, if given)."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            with contextlib.suppress(OSError):
                if session is not None:
                    stat = Path(f"/proc/{pid}/stat").read_text()
                    if int(stat.rsplit(")", 1)[1].split()[3]) != session:
                        continue
                out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
    return out


def test_kill_9_leaves_a_readable_run(tmp_path):
    proc = kvbench(*LONG_RUN, "--output-dir", str(tmp_path))
    run_dir = wait_rows(tmp_path, 5)
    proc.kill()
    proc.communicate(timeout=30)
    # simulate the worst case: a torn last line
    with (run_dir / "requests.jsonl").open("a") as fh:
        fh.write('{"request_id": "torn", "sta')
    assert read_manifest(run_dir)["status"] == "running"  # shown as "did not finish"
    with pytest.warns(UserWarning, match="torn last line"):
        df = load_run(run_dir)
    assert len(df) >= 5 and "torn" not in set(df.request_id)
    _kill_stray_mocks(tmp_path)


def _kill_stray_mocks(tmp_path):
    # kill -9 of kvbench cannot clean up its child; the test does, so nothing outlives it
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if "kvbench.mock" in cmd and str(tmp_path) in cmd:
                os.kill(int(pid), signal.SIGKILL)


def test_api_key_never_reaches_results_or_output(tmp_path):
    proc = kvbench(
        "run",
        "ttft",
        "--lengths",
        "2000",
        "--api-key-env",
        "KVB_TEST_KEY",
        "--output-dir",
        str(tmp_path),
        "--set",
        'target.headers={"X-Tenant": "' + SENTINEL + '-hdr"}',
        env={"KVB_TEST_KEY": SENTINEL},
    )
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    run_dir = only_run_dir(tmp_path)
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert SENTINEL.encode() not in path.read_bytes(), path
    assert SENTINEL not in out + err
    manifest = read_manifest(run_dir)
    assert manifest["options"]["api_key_env"] == "KVB_TEST_KEY"
    assert set(manifest["target"]["headers"].values()) == {"<redacted>"}


def test_missing_key_variable_is_a_one_line_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "KVB_UNSET_KEY"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvbench",
            "run",
            "ttft",
            "--api-key-env",
            "KVB_UNSET_KEY",
            "--output-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "kvbench: target.api_key_env: environment variable KVB_UNSET_KEY is not set"


def test_refused_connection_exits_3_without_a_run(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvbench",
            "run",
            "ttft",
            "--base-url",
            "http://127.0.0.1:9",
            "--output-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 3, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "cannot reach http://127.0.0.1:9" in proc.stderr
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_manifest_is_json_at_every_moment(tmp_path):
    # the manifest is replaced atomically: a reader never sees half a file
    proc = kvbench(*LONG_RUN, "--output-dir", str(tmp_path))
    run_dir = wait_rows(tmp_path, 2)
    for _ in range(50):
        json.loads((run_dir / "manifest.json").read_text())
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
