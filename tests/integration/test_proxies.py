"""kvbench behind a real nginx, the way vLLM is deployed: in front of the kvbench mock, run end to end.

nginx (the Debian package; .ci/run installs it) runs from a prefix directory of the test's
own, on free loopback ports, never as a system service. Covered: an unbuffered keep-alive
proxy (TTFT matches the mock's own log), nginx's default buffering (the delivery warning: a burst),
gzip, basic auth with the credentials in the URL (they appear nowhere), an http->https
redirect, nginx's HTML error pages (their title in the row and in /v1/models' hint), and a body
limit (client_max_body_size) that the timed probe turns into exit 3.
"""

from __future__ import annotations

import base64
import contextlib
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvbench.client import ClientConfig, RequestRecord, StreamingClient, make_session
from kvbench.errors import TargetUnreachable
from kvbench.mock.spawn import spawned_mock
from kvbench.results import load_run, read_jsonl, read_manifest
from kvbench.run.runner import RunOptions, run_scenario
from kvbench.scenario import load_scenario

NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if Path(p).exists()), None)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(NGINX is None, reason="nginx is not installed (apt-get install nginx; .ci/run does)"),
]

SMALL = {
    "prompts.count": 3,
    "prompts.lengths": [2000],
    "load.requests": 6,
    "load.concurrency": 2,
    "cache.reset": "never",
}
USER, PASSWORD = "kvuser", "s3cret-pass-9f2"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def nginx(tmp_path: Path, servers: str) -> Iterator[Path]:
    """Run nginx in the foreground from its own prefix with `servers` inside `http {}`; yields the prefix."""
    prefix = tmp_path / "nginx"
    (prefix / "logs").mkdir(parents=True)
    temp = " ".join(
        f"{kind}_temp_path {prefix / kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    conf = prefix / "nginx.conf"
    conf.write_text(
        f"""daemon off;
master_process off;
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/logs/error.log warn;
events {{ worker_connections 256; }}
http {{
    log_format conns '$connection $connection_requests $status $request_uri';
    access_log {prefix}/logs/access.log conns;
    {temp}
    {servers}
}}
"""
    )
    proc = subprocess.Popen(
        [str(NGINX), "-p", str(prefix), "-c", str(conf), "-e", str(prefix / "logs/error.log")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        ports = [int(p) for p in re.findall(r"listen 127\.0\.0\.1:(\d+)", servers)]
        deadline = time.monotonic() + 10
        for port in ports:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"nginx exited: {proc.stderr.read().decode() if proc.stderr else ''}")
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("nginx did not start listening")
                time.sleep(0.02)
        yield prefix
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def proxy(port: int, upstream: str, extra: str = "") -> str:
    host_port = upstream.removeprefix("http://")
    return f"""
    upstream mock {{ server {host_port}; keepalive 8; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://mock;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            {extra}
        }}
    }}"""


async def run(tmp_path: Path, base_url: str, quiet: bool = True, **overrides):
    scn, _ = load_scenario("throughput", {**SMALL, "target.base_url": base_url, **overrides})
    outcome = await run_scenario(scn, RunOptions(output_dir=tmp_path / "results", quiet=quiet, report=False))
    return outcome, load_run(outcome.run_dir), read_manifest(outcome.run_dir)


async def test_unbuffered_keepalive_proxy_ttft_matches_the_mock(tmp_path):
    port = free_port()
    gt_path = tmp_path / "gt.jsonl"
    async with spawned_mock("ci", ground_truth=gt_path) as mock:
        with nginx(tmp_path, proxy(port, mock.base_url, "proxy_buffering off;")) as prefix:
            outcome, df, manifest = await run(tmp_path, f"http://127.0.0.1:{port}")
    assert outcome.exit_code == 0 and (df.status == "ok").all()
    assert not df.burst.any() and df.delivery.isna().all()
    assert not any(p.get("warning_burst") for p in manifest["phases"])
    truth = {t["request_id"]: t for t in read_jsonl(gt_path)}
    origin = manifest["clock_origin_ns"]
    lags = sorted(r.first_token_ns + origin - truth[r.request_id]["first_token_ns"] for r in df.itertuples())
    assert lags[0] >= 0 and lags[len(lags) // 2] < 1e6, lags  # typically 0.05-0.2 ms through nginx
    # within 2 ms; one scheduling hiccup allowed on a loaded CI machine (seen: 3 ms at load 5 on 2 cores)
    assert lags[-2] < 2e6, lags
    # keep-alive through the proxy: kvbench reused its connections to nginx
    reqs = [line.split() for line in (prefix / "logs/access.log").read_text().splitlines()]
    assert max(int(r[1]) for r in reqs if "/v1/completions" in r[3]) > 1


async def test_buffering_proxy_gets_the_burst_warning(tmp_path, capsys):
    port = free_port()
    # nginx's defaults (HTTP/1.0 upstream, buffering on); the mock's X-Accel-Buffering: no is ignored,
    # as a gateway in front of nginx may drop it. nginx sends the headers at once and the buffered body
    # when the stream ends, so a burst (last token within 1 ms of the headers) needs the whole stream
    # well inside 1 ms: the ci profile's 16 tokens take ~0.9 ms, which a busy CI machine stretched past
    # it (2 bursts of 6 beside a CPU hog); at a tenth of that pace they take ~0.1 ms
    async with spawned_mock("ci", extra_args=["--set", "time_scale=0.001"]) as mock:
        conf = f"""
        server {{
            listen 127.0.0.1:{port};
            location / {{ proxy_pass {mock.base_url}; proxy_ignore_headers X-Accel-Buffering; }}
        }}"""
        with nginx(tmp_path, conf):
            outcome, df, manifest = await run(tmp_path, f"http://127.0.0.1:{port}", quiet=False)
    assert outcome.exit_code == 0
    measured = df[df.status == "ok"]
    assert measured.burst.mean() > 0.5
    warned = [p for p in manifest["phases"] if "warning_burst" in p]
    assert warned and "delivery-bound, not the server's" in warned[0]["warning_burst"]
    assert (measured.delivery == "burst").mean() > 0.5
    err = capsys.readouterr().err
    assert "tokens arrived in one burst" in err and "proxy_buffering off" in err


async def test_a_ttft_run_behind_a_buffering_proxy_is_warned(tmp_path, capsys):
    """The TTFT test through nginx's default buffering, at the ci mock's own pace: the head comes at
    once and the whole 16-token answer in one later read; the shared phase check warns (ttft as
    throughput), in the console, the manifest and the report."""
    port = free_port()
    async with spawned_mock("ci") as mock:
        conf = f"""
        server {{
            listen 127.0.0.1:{port};
            location / {{ proxy_pass {mock.base_url}; proxy_ignore_headers X-Accel-Buffering; }}
        }}"""
        with nginx(tmp_path, conf):
            scn, _ = load_scenario("ttft", {"target.base_url": f"http://127.0.0.1:{port}"})
            outcome = await run_scenario(
                scn, RunOptions(output_dir=tmp_path / "results", quiet=False, report=False)
            )
    assert outcome.exit_code == 0
    from kvbench.report.render import write_report

    write_report(outcome.run_dir, quiet=True)
    df, manifest = load_run(outcome.run_dir), read_manifest(outcome.run_dir)
    measured = df[(df.status == "ok") & (df.label != "probe")]
    assert measured.delivery.notna().mean() > 0.5, measured[["first_read_tokens", "delivery"]]
    warned = [p for p in manifest["phases"] if p.get("warning_burst")]
    assert warned and "delivery-bound, not the server's" in warned[0]["warning_burst"]
    assert "proxy_buffering off" in capsys.readouterr().err
    assert "TTFT delivery-bound" in (outcome.run_dir / "report.md").read_text()


async def test_gzip_proxy_untimed_decoded_timed_identity(tmp_path):
    port = free_port()
    gzip = "gzip on; gzip_types application/json text/event-stream text/plain; gzip_min_length 1; "
    gzip += "gzip_proxied any;"
    async with spawned_mock("ci") as mock:
        with nginx(tmp_path, proxy(port, mock.base_url, "proxy_buffering off; " + gzip)):
            outcome, df, manifest = await run(tmp_path, f"http://127.0.0.1:{port}")
    assert outcome.exit_code == 0 and (df.status == "ok").all()
    assert manifest["prompts"]["count_source"] == "server"  # /tokenize answered gzip, decoded
    assert (df.prompt_tokens_server == 2000).all()


def auth_server(port: int, upstream: str, htpasswd: Path) -> str:
    htpasswd.write_text(f"{USER}:{{PLAIN}}{PASSWORD}\n")
    return proxy(port, upstream, f'proxy_buffering off; auth_basic "kv"; auth_basic_user_file {htpasswd};')


async def test_basic_auth_credentials_in_the_url_work_and_appear_nowhere(tmp_path, capsys):
    port = free_port()
    async with spawned_mock("ci") as mock:
        with nginx(tmp_path, auth_server(port, mock.base_url, tmp_path / "htpasswd")) as prefix:
            outcome, df, manifest = await run(
                tmp_path, f"http://{USER}:{PASSWORD}@127.0.0.1:{port}", quiet=False
            )
            with pytest.raises(TargetUnreachable, match="refused the credentials"):
                await run(tmp_path / "nocreds", f"http://127.0.0.1:{port}")
    assert outcome.exit_code == 0 and (df.status == "ok").all()
    from kvbench.report.render import write_report

    write_report(outcome.run_dir, quiet=False)  # the report reads the manifest: no credentials there either
    statuses = [line.split()[2] for line in (prefix / "logs/access.log").read_text().splitlines()]
    assert statuses.count("200") >= 6  # every timed request was let in
    assert manifest["target"]["base_url"] == f"http://<redacted>@127.0.0.1:{port}"
    out = capsys.readouterr()
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    files = [p for p in outcome.run_dir.rglob("*") if p.is_file()]
    assert any(p.name == "report.md" for p in files)
    for secret in (PASSWORD, token):
        assert secret not in out.out and secret not in out.err
        for path in files:
            assert secret.encode() not in path.read_bytes(), path


async def test_http_to_https_redirect_is_named_and_stops_the_run(tmp_path):
    port, tls_port = free_port(), free_port()
    server = f"""
    server {{
        listen 127.0.0.1:{port};
        location / {{ return 308 https://127.0.0.1:{tls_port}$request_uri; }}
    }}"""
    with nginx(tmp_path, server):
        with pytest.raises(
            TargetUnreachable, match=rf"redirected to https://127.0.0.1:{tls_port}/v1/models: use that URL"
        ):
            await run(tmp_path, f"http://127.0.0.1:{port}", **{"target.model": "m"})
        for transport in ("http1", "aiohttp"):  # and the timed request, on either transport, says the same
            cfg = ClientConfig(base_url=f"http://127.0.0.1:{port}", model="m", transport=transport)
            async with make_session(1, 5) as session:
                client = StreamingClient(cfg, session, time.perf_counter_ns())
                rec = await client.send(RequestRecord("r"), b"{}")
                await client.aclose()
            assert rec.error_type == "http_308", transport
            assert (
                rec.error_message
                == f"redirected to https://127.0.0.1:{tls_port}/v1/completions: use that URL"
            )


async def test_nginx_error_page_becomes_its_title(tmp_path):
    port = free_port()
    with nginx(tmp_path, proxy(port, f"127.0.0.1:{free_port()}")):  # nothing listens upstream
        for transport in ("http1", "aiohttp"):
            cfg = ClientConfig(base_url=f"http://127.0.0.1:{port}", model="m", transport=transport)
            async with make_session(1, 5) as session:
                client = StreamingClient(cfg, session, time.perf_counter_ns())
                rec = await client.send(RequestRecord("r"), b"{}")
                await client.aclose()
            assert rec.error_type == "http_502" and rec.error_message == "502 Bad Gateway", transport
        with pytest.raises(TargetUnreachable) as exc:  # and /v1/models: the hint keeps the page's title
            await run(tmp_path, f"http://127.0.0.1:{port}")
    assert "HTTP 502 (502 Bad Gateway): the server, or the one behind this proxy" in str(exc.value)
    assert "--model" not in str(exc.value)


@pytest.mark.parametrize("transport", ["http1", "aiohttp"])
async def test_a_body_limit_stops_the_run_at_the_probe_not_at_every_request(tmp_path, transport):
    """nginx refuses bodies over 100 KB: 30k-token prompts (~180 KB) would all be 413; exit 3 instead."""
    port = free_port()
    limit = "proxy_buffering off; client_max_body_size 100k;"
    async with spawned_mock("ci") as mock:
        with nginx(tmp_path, proxy(port, mock.base_url, limit)), pytest.raises(TargetUnreachable) as exc:
            await run(
                tmp_path,
                f"http://127.0.0.1:{port}",
                **{"prompts.lengths": [30000], "target.transport": transport},
            )
    assert exc.value.exit_code == 3 and "\n" not in str(exc.value)
    assert "refused: 413 Request Entity Too Large; " in str(exc.value)
    assert "30,000 tokens" in str(exc.value) and "client_max_body_size" in str(exc.value)
    assert not list((tmp_path / "results").glob("*/manifest.json"))  # stopped before a run was made
