"""kvbench behind a real HAProxy, whose default `mode http` batches a token stream.

HAProxy (the Debian package; .ci/run installs it) runs in the foreground from the test's own
config on a free loopback port. In `mode http` it sends with MSG_MORE, so the kernel holds the
response head and the first tokens for ~200 ms: on a 31 ms server TTFT read ~190 ms, and every
first read held later tokens. kvbench must warn, name the cause and label the phase's TTFT
delivery-bound in the report; with `option http-no-delay` the same run reads the server's TTFT.
Ground truth is the mock's own log of when it wrote each first token.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvbench.mock.spawn import spawned_mock
from kvbench.report.render import write_report
from kvbench.results import load_run, read_jsonl, read_manifest
from kvbench.run.runner import RunOptions, run_scenario
from kvbench.scenario import load_scenario

HAPROXY = shutil.which("haproxy") or next((p for p in ("/usr/sbin/haproxy",) if Path(p).exists()), None)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.timing,  # read TTFT against the mock's own stamps, through a real proxy
    pytest.mark.skipif(
        HAPROXY is None, reason="haproxy is not installed (apt-get install haproxy; .ci/run does)"
    ),
]
# a 31 ms server at 10 ms a token: slower than HAProxy's hold, so the answer never comes in one burst
MOCK = ("--set", "ttft_ms=31", "--set", "decode_ms_per_token=10")
SMALL = {
    "prompts.count": 2,
    "prompts.lengths": [500],
    "load.requests": 8,
    "load.concurrency": 2,
    "output.max_tokens": 48,
    "cache.reset": "never",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def haproxy(tmp_path: Path, upstream: str, options: str = "") -> Iterator[str]:
    """HAProxy in `mode http` (its defaults, plus `options`) in front of `upstream`; yields its URL."""
    port = free_port()
    conf = tmp_path / "haproxy.cfg"
    conf.write_text(
        f"""global
    maxconn 256
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    {options}
frontend fe
    bind 127.0.0.1:{port}
    default_backend be
backend be
    server mock {upstream.removeprefix("http://")}
"""
    )
    proc = subprocess.Popen(
        [str(HAPROXY), "-db", "-f", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"haproxy exited: {proc.stderr.read().decode() if proc.stderr else ''}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("haproxy did not start listening")
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def run_behind(tmp_path: Path, options: str, transport: str = "auto"):
    """(outcome, rows, manifest, read TTFT - the mock's first-token time per row, ms)."""
    gt_path = tmp_path / "gt.jsonl"
    async with spawned_mock("fixed-delay", ground_truth=gt_path, extra_args=MOCK) as mock:
        with haproxy(tmp_path, mock.base_url, options) as url:
            scn, _ = load_scenario(
                "throughput", {**SMALL, "target.base_url": url, "target.transport": transport}
            )
            outcome = await run_scenario(
                scn, RunOptions(output_dir=tmp_path / "results", quiet=False, report=False)
            )
    write_report(outcome.run_dir, quiet=True)
    df, manifest = load_run(outcome.run_dir), read_manifest(outcome.run_dir)
    truth = {t["request_id"]: t["first_token_ns"] for t in read_jsonl(gt_path)}
    origin = manifest["clock_origin_ns"]
    late = sorted((r.first_token_ns + origin - truth[r.request_id]) / 1e6 for r in df.itertuples())
    return outcome, df, manifest, late


@pytest.mark.parametrize("transport", ["http1", "aiohttp"])
async def test_haproxy_default_batching_is_warned_and_labelled_delivery_bound(tmp_path, capsys, transport):
    outcome, df, manifest, late = await run_behind(tmp_path, "", transport)
    assert outcome.exit_code == 0 and (df.status == "ok").all()
    # the case as the tester saw it: the first tokens reached kvbench long after the mock wrote them
    assert late[len(late) // 2] > 50, late
    assert (df.first_read_tokens >= 2).mean() > 0.5
    assert (df.delivery == "batched").mean() > 0.5 and not df.burst.any()
    warning = manifest["phases"][0].get("warning_burst") or ""
    assert "first read already held later tokens" in warning and "delivery-bound" in warning
    assert "option http-no-delay" in warning
    assert "first read already held later tokens" in capsys.readouterr().err
    report = (outcome.run_dir / "report.md").read_text()
    assert "TTFT delivery-bound" in report and "TTFT is delivery-bound, not the server's" in report


async def test_haproxy_with_http_no_delay_reads_the_servers_ttft(tmp_path):
    outcome, df, manifest, late = await run_behind(tmp_path, "option http-no-delay")
    assert outcome.exit_code == 0 and (df.status == "ok").all()
    assert df.delivery.isna().all() and not any(p.get("warning_burst") for p in manifest["phases"])
    assert late[len(late) // 2] < 5, late  # typically 0.1-0.3 ms through HAProxy
    assert "delivery-bound" not in (outcome.run_dir / "report.md").read_text()


async def test_a_ttft_run_behind_haproxy_is_warned_too(tmp_path, capsys):
    """The TTFT test's short answers (16 tokens at the ci mock's pace) come whole in the first read
    behind HAProxy's hold: the same phase check (kvbench.run.context.phase_entry) warns."""
    async with spawned_mock("ci") as mock:
        with haproxy(tmp_path, mock.base_url) as url:
            scn, _ = load_scenario("ttft", {"target.base_url": url, "prompts.lengths": [2000]})
            outcome = await run_scenario(
                scn, RunOptions(output_dir=tmp_path / "results", quiet=False, report=False)
            )
    write_report(outcome.run_dir, quiet=True)
    df, manifest = load_run(outcome.run_dir), read_manifest(outcome.run_dir)
    measured = df[df.label != "probe"]
    assert outcome.exit_code == 0 and (measured.status == "ok").all()
    assert measured.delivery.notna().mean() > 0.5, measured[["first_read_tokens", "delivery"]]
    warning = manifest["phases"][0].get("warning_burst") or ""
    assert "delivery-bound" in warning and "option http-no-delay" in warning
    assert "delivery-bound" in capsys.readouterr().err
    assert "TTFT delivery-bound" in (outcome.run_dir / "report.md").read_text()
