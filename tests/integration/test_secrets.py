"""Every kind of secret, through every command that can carry one, found in no file and no stream.

Secrets: URL userinfo of the target (`--base-url http://alice:PW@...`), `--api-key-env`, an exporter
URL's userinfo, and both echoed back: a front before the kvbench mock puts the Authorization header
it got into a /metrics label (the target's echo) and so does an exporter (the exporter's echo).
Commands: run (with --serve-metrics), replay, sweep (one that completes and one that fails
validation) and report. Each runs in a child process, so nothing learnt by one command's process
helps another; every file written and every console line is searched for each secret, raw and
in base64.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvbench.mock.spawn import spawned_mock

pytestmark = pytest.mark.slow

URL_PW = "urlPW-7c1e9aq"
EXP_PW = "expPW-4b2d8zk"
API_KEY = "sk-secret-KEY-91f0d3"


def forms() -> list[str]:
    """Each secret as it could leak: raw, and the Basic token that carries it."""
    raw = [URL_PW, EXP_PW, API_KEY]
    tokens = [base64.b64encode(s.encode()).decode() for s in (f"alice:{URL_PW}", f"bob:{EXP_PW}", API_KEY)]
    return raw + [t.rstrip("=") for t in tokens]


async def serve_until_stopped(app: Any, server: Any) -> None:
    """Serve `app` on a free local port: `server.url` set, `server.ready` signalled, until `server.stop`."""
    from aiohttp import web

    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    server.url = f"127.0.0.1:{port}"
    server.ready.set()
    await server.stop.wait()
    await runner.cleanup()


class Front:
    """A reverse proxy in front of the mock that echoes the Authorization it got into /metrics,
    and an exporter (/exporter/metrics) that does the same."""

    def __init__(self) -> None:
        self.url = ""
        self.ready = threading.Event()
        self.stop: asyncio.Event | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    async def main(self) -> None:
        import aiohttp
        from aiohttp import web

        self.stop = asyncio.Event()
        async with spawned_mock(profile="ci") as mock, aiohttp.ClientSession() as session:

            def echo(request: web.Request) -> str:
                auth = request.headers.get("Authorization", "none").replace('"', "")
                return f'echo_auth{{authorization="{auth}"}} 1\n'

            async def exporter(request: web.Request) -> web.Response:
                return web.Response(text=echo(request), content_type="text/plain")

            async def proxy(request: web.Request) -> web.StreamResponse:
                drop = {"host", "authorization", "content-length"}
                headers = {k: v for k, v in request.headers.items() if k.lower() not in drop}
                url = mock.base_url + request.path_qs
                async with session.request(
                    request.method, url, data=await request.read(), headers=headers
                ) as up:
                    if request.path == "/metrics":
                        body = await up.text() + echo(request)
                        return web.Response(text=body, status=up.status, content_type="text/plain")
                    resp = web.StreamResponse(status=up.status)
                    resp.content_type = up.content_type
                    await resp.prepare(request)
                    async for chunk in up.content.iter_any():
                        await resp.write(chunk)
                    await resp.write_eof()
                    return resp

            app = web.Application()
            app.router.add_get("/exporter/metrics", exporter)
            app.router.add_route("*", "/{tail:.*}", proxy)
            await serve_until_stopped(app, self)

    def run(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self.main())


@pytest.fixture(scope="module")
def front() -> Iterator[Front]:
    f = Front()
    t = threading.Thread(target=f.run, daemon=True)
    t.start()
    assert f.ready.wait(60), "front did not start"
    yield f
    assert f.loop is not None and f.stop is not None
    f.loop.call_soon_threadsafe(f.stop.set)
    t.join(30)


def kvbench(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "kvbench", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
    )
    return proc.returncode, proc.stdout + proc.stderr


def telemetry(front: Front) -> list[str]:
    exporters = (
        f"telemetry.exporters=[{{kind: prometheus, url: 'http://bob:{EXP_PW}@{front.url}/exporter/metrics'}}]"
    )
    return ["--set", exporters, "--set", "telemetry.interval_s=0.1"]


def assert_nowhere(root: Path, console: str) -> None:
    files = [p for p in root.rglob("*") if p.is_file()]
    assert files
    for secret in forms():
        assert secret not in console, (secret, console[-2000:])
        for path in files:
            assert secret.encode() not in path.read_bytes(), (secret, path)


def test_no_secret_in_any_file_or_stream(front: Front, tmp_path: Path) -> None:
    user_url = f"http://alice:{URL_PW}@{front.url}"
    out = tmp_path / "results"
    console = ""
    small = ["--set", "prompts.count=2", "--set", "prompts.lengths=[2000]"]

    # a sweep that fails validation, and one whose target refuses (its sweep.json is written)
    code, text = kvbench(
        "sweep", "ttft", "--base-url", user_url, *telemetry(front), "--over", "prompts.lengths=[1000],[-5]",
        "--out", str(tmp_path / "bad-sweep"), "--quiet",
    )  # fmt: skip
    assert code == 2, text
    console += text
    code, text = kvbench(
        "sweep", "ttft", "--base-url", f"http://alice:{URL_PW}@127.0.0.1:9",
        "--over", "prompts.lengths=[1000]",
        "--out", str(tmp_path / "refused-sweep"), "--quiet",
    )  # fmt: skip
    assert code == 3 and (tmp_path / "refused-sweep" / "sweep.json").exists(), text
    console += text
    code, text = kvbench(
        "sweep", "ttft", "--base-url", user_url, *telemetry(front), *small,
        "--over", "prompts.lengths=[1000],[2000]", "--out", str(tmp_path / "sweep"), "--quiet",
    )  # fmt: skip
    assert code == 0, text
    console += text
    code, text = kvbench("sweep", "--resume", str(tmp_path / "sweep"))
    assert code == 2 and "credentials" in text, text  # --resume alone cannot send what was not stored
    console += text

    code, text = kvbench(
        "run", "ttft", "--base-url", user_url, *telemetry(front), *small,
        "--output-dir", str(out), "--serve-metrics", "0",
    )  # fmt: skip
    assert code == 0, text
    console += text
    code, text = kvbench(
        "run", "ttft", "--base-url", f"http://{front.url}", "--api-key-env", "KVB_SECRET_KEY",
        *telemetry(front), *small, "--output-dir", str(out),
        env={"KVB_SECRET_KEY": API_KEY},
    )  # fmt: skip
    assert code == 0, text
    console += text
    code, text = kvbench(
        "run", "replay", "--base-url", user_url, *telemetry(front), "--set", "test.trace.speedup=40",
        "--output-dir", str(out),
    )  # fmt: skip
    assert code == 0, text
    console += text
    runs = [d for d in out.iterdir() if d.is_dir()]
    assert len(runs) == 3
    for run in runs:
        code, text = kvbench("report", str(run), "-q")
        assert code == 0, text
        console += text
    # the echo reached the files, masked: the test would prove nothing if nothing had been echoed
    rows = "".join((d / "telemetry.jsonl").read_text() for d in runs if (d / "telemetry.jsonl").exists())
    assert '"name":"echo_auth","labels":{"authorization":"<redacted>"}' in rows
    assert_nowhere(tmp_path, console)


class Echo:
    """A hostile target: every request answered HTTP 500 with the Authorization it got, raw and
    decoded, so each secret comes back in the error kvbench prints."""

    def __init__(self) -> None:
        self.url = ""
        self.ready = threading.Event()
        self.loop = asyncio.new_event_loop()
        self.stop = asyncio.Event()

    async def main(self) -> None:
        from aiohttp import web

        async def answer(request: web.Request) -> web.Response:
            auth = request.headers.get("Authorization", "none")
            scheme, _, token = auth.partition(" ")
            plain = base64.b64decode(token).decode() if scheme == "Basic" else token
            return web.Response(status=500, text=f"refused: Authorization: {auth} (that is {plain})")

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", answer)
        await serve_until_stopped(app, self)


@pytest.fixture(scope="module")
def echo() -> Iterator[Echo]:
    e = Echo()
    t = threading.Thread(target=lambda: e.loop.run_until_complete(e.main()), daemon=True)
    t.start()
    assert e.ready.wait(60), "echo server did not start"
    yield e
    e.loop.call_soon_threadsafe(e.stop.set)
    t.join(30)


@pytest.mark.parametrize("verbose", [False, True], ids=["plain", "verbose"])
def test_a_failing_run_prints_no_secret(echo: Echo, tmp_path: Path, verbose: bool) -> None:
    """The target echoes each credential into its error: the console line (and, with --verbose,
    the traceback before it) says it was refused and shows no secret; the exit code is the one the
    failure has, with --verbose or without."""
    flags = ["--verbose"] if verbose else []
    out = str(tmp_path / "o")
    console = ""
    for target, extra in [
        (f"http://alice:{URL_PW}@{echo.url}/v1", []),
        (f"http://{echo.url}/v1", ["--api-key-env", "KVB_SECRET_KEY"]),
    ]:
        code, text = kvbench(
            *flags, "run", "ttft", "--base-url", target, *extra, "--no-report", "--output-dir", out,
            env={"KVB_SECRET_KEY": API_KEY},
        )  # fmt: skip
        assert code == 3, text  # the target refused: the same code as without --verbose
        assert "answered HTTP 500" in text and "Authorization: " in text and "<redacted>" in text, text
        assert ("Traceback (most recent call last)" in text) == verbose, text
        console += text
    for secret in forms():
        assert secret not in console, (secret, console)


# --- the CLI's own output, in this process (run_cli): an error whose text carries a secret (a
# library's exception, a server's words), its --verbose traceback, and a stray log record that
# reaches logging.lastResort; a secret learnt from the command line (--api-key-env, a URL's
# userinfo) is masked before any preflight has seen it.

CLI_PW = "cliPW-5e8d1qz"  # its own secrets: the in-process tests remember them in this process
CLI_KEY = "sk-cli-KEY-3a9f7c"


def failing_run(monkeypatch: pytest.MonkeyPatch, secret: str) -> None:
    """`kvbench run` fails inside the runner with an error that carries `secret` raw, as a
    library's exception or a server's words could: only the CLI's own redaction can mask it."""

    async def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"upstream said {secret} (from http://alice:{secret}@h/v1)")

    monkeypatch.setattr("kvbench.run.runner.run_scenario", boom)
    monkeypatch.setenv("KVB_CLI_KEY", CLI_KEY)


@pytest.mark.parametrize("verbose", [False, True], ids=["plain", "verbose"])
@pytest.mark.parametrize(
    ("secret", "target"),
    [
        (CLI_PW, [f"--base-url=http://alice:{CLI_PW}@127.0.0.1:9/v1"]),
        (CLI_KEY, ["--api-key-env", "KVB_CLI_KEY"]),
    ],
    ids=["url-password", "api-key-env"],
)
def test_an_error_carrying_a_secret_is_printed_redacted(
    run_cli, monkeypatch, tmp_path, verbose: bool, secret: str, target: list[str]
) -> None:
    failing_run(monkeypatch, secret)
    args = ["--verbose"] if verbose else []
    code, out, err = run_cli(*args, "run", "ttft", *target, "--no-report", "--output-dir", str(tmp_path))
    assert code == 1, err  # an internal error: exit 1, with --verbose or without
    assert "RuntimeError: upstream said <redacted>" in err, err
    assert ("Traceback (most recent call last)" in err) == verbose, err
    assert secret not in out + err, err


def test_verbose_keeps_a_user_errors_exit_code(run_cli, tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nnot_a_field: 1\n")
    plain = run_cli("validate", str(bad))
    verbose = run_cli("--verbose", "validate", str(bad))
    assert plain[0] == verbose[0] == 2
    assert "Traceback (most recent call last)" in verbose[2] and "Traceback" not in plain[2]


def test_a_stray_log_record_is_redacted_by_last_resort(capsys) -> None:
    from kvbench.cli import _guard_logging
    from kvbench.redact import remember

    remember(CLI_KEY)
    _guard_logging()
    assert logging.lastResort is not None
    try:
        raise ValueError(f"Authorization: Bearer {CLI_KEY}")
    except ValueError:
        record = logging.LogRecord(
            "somelib", logging.WARNING, __file__, 1, "retrying %s", (f"http://u:{CLI_PW}@h",), sys.exc_info()
        )
    logging.lastResort.handle(record)
    err = capsys.readouterr().err
    assert "retrying http://" in err and "ValueError: Authorization: Bearer <redacted>" in err
    assert CLI_PW not in err and CLI_KEY not in err


async def test_a_sweep_over_credentialled_urls_names_no_password(tmp_path: Path) -> None:
    """`--over target.base_url=http://u:PW1@host,http://u:PW2@host`: both points run, and no file,
    no file name (the point folders are named for their values: before, the password was in it)
    and no console line of the sweep holds either password."""
    pws = ["ovPW-6h2k9d", "ovPW-8m4q1s"]
    async with spawned_mock(profile="ci") as mock:
        host = mock.base_url.split("://", 1)[1]
        urls = ",".join(f"http://u:{pw}@{host}" for pw in pws)
        code, text = kvbench(
            "sweep", "ttft", "--over", f"target.base_url={urls}", "--set", "prompts.count=2",
            "--set", "prompts.lengths=[1000]", "--out", str(tmp_path / "sweep"), "--quiet",
        )  # fmt: skip
    assert code == 0, text
    points = sorted(p.name for p in (tmp_path / "sweep" / "points").iterdir())
    assert len(points) == 2 and all("redacted" in p for p in points), points
    for pw in pws:
        assert pw not in text
        for path in (tmp_path / "sweep").rglob("*"):
            assert pw not in str(path.relative_to(tmp_path)), path
            assert path.is_dir() or pw.encode() not in path.read_bytes(), path
