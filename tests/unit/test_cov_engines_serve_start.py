"""start_engine's edges with a stand-in server in place of llama-server: a free port taken before
the server binds it is retried, the context managers always stop what they started, and
`engines serve` reports a server that exits by itself with its code."""

from __future__ import annotations

import signal
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvbench.engines import serve
from kvbench.engines.install_steps import EngineInstallError, Installed

# argv[1]: a file counting the starts; the first MODE=busy start fails as a taken port does
STAND_IN = textwrap.dedent(
    """
    import http.server, json, os, sys, threading
    count_file, mode = sys.argv[1], sys.argv[2]
    port = int(sys.argv[sys.argv.index("--port") + 1])
    n = int(open(count_file).read() or 0) + 1 if os.path.exists(count_file) else 1
    open(count_file, "w").write(str(n))
    if mode == "busy" and n == 1:
        print("couldn't bind HTTP server socket, error: Address already in use", flush=True)
        sys.exit(1)
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"data": [{"id": "kvbench-tiny"}]} if self.path == "/v1/models" else {})
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body.encode())
            if mode == "once" and self.path == "/v1/models":  # healthy once, then gone
                threading.Thread(target=server.shutdown).start()
        def log_message(self, *a):
            pass
    server = http.server.HTTPServer(("127.0.0.1", port), H)
    server.serve_forever()
    sys.exit(5 if mode == "once" else 0)
    """
)


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Make llamacpp start the stand-in in `mode`; returns a setter and the count file."""
    monkeypatch.setenv("KVBENCH_ENGINES_DIR", str(tmp_path / "engines"))
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    count = tmp_path / "starts"
    model = tmp_path / "m.gguf"
    model.write_text("")
    monkeypatch.setattr(serve, "installed", lambda n: Installed(n, tmp_path / n, "v", "r", "t", {}))
    real = serve.command
    mode = {"mode": "serve"}

    def command(name: str, opts: serve.ServeOptions, *, port: int, model: Path) -> Any:
        argv, env = real(name, opts, port=port, model=model)
        return [sys.executable, str(script), str(count), mode["mode"], *argv[1:]], env

    monkeypatch.setattr(serve, "command", command)

    def use(m: str) -> tuple[Path, Path]:
        mode["mode"] = m
        return model, count

    yield use


def test_a_port_taken_before_the_bind_is_retried_on_another(stand_in: Any) -> None:
    model, count = stand_in("busy")
    said: list[str] = []
    eng = serve.start_engine("llamacpp", serve.ServeOptions(model=model), progress=said.append)
    try:
        assert eng.alive() and count.read_text() == "2"
        starts = [line for line in said if " starting on " in line]
        assert len(starts) == 2
        assert starts[1].startswith(f"[llamacpp] starting on 127.0.0.1:{eng.port} ")
    finally:
        eng.stop(timeout_s=10)


def test_a_fixed_port_that_is_taken_is_not_retried(stand_in: Any) -> None:
    model, count = stand_in("busy")
    port = serve.free_port()
    with pytest.raises(serve.EngineStartError, match=r"exited with code 1 .*Address already in use"):
        serve.start_engine("llamacpp", serve.ServeOptions(model=model, port=port))
    assert count.read_text() == "1"


def test_running_engine_stops_it_even_when_the_block_raises(stand_in: Any) -> None:
    model, _count = stand_in("serve")
    with (
        pytest.raises(RuntimeError, match="the test's own"),
        serve.running_engine("llamacpp", model=model) as eng,
    ):
        assert eng.alive()
        raise RuntimeError("the test's own failure")
    assert not eng.alive()


async def test_arunning_engine_starts_and_stops_off_the_event_loop(stand_in: Any) -> None:
    model, _count = stand_in("serve")
    async with serve.arunning_engine("llamacpp", model=model, slots=1) as eng:
        assert eng.alive() and eng.options.slots == 1
    assert not eng.alive()


def test_not_installed_and_not_allowed_to_install(stand_in: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    model, count = stand_in("serve")
    monkeypatch.setattr(serve, "installed", lambda _n: None)
    with pytest.raises(
        EngineInstallError, match=r"llamacpp is not installed \(kvbench engines install llamacpp\)"
    ):
        serve.start_engine("llamacpp", serve.ServeOptions(model=model), install_missing=False)
    assert not count.exists()  # nothing was started


def test_serve_forever_reports_a_server_that_exits_by_itself(
    stand_in: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    model, _count = stand_in("once")
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    said: list[str] = []
    try:
        with pytest.raises(serve.EngineStartError, match="the server exited with code 5"):
            serve.serve_forever("llamacpp", serve.ServeOptions(model=model), progress=said.append)
    finally:
        signal.signal(signal.SIGINT, handlers[0])
        signal.signal(signal.SIGTERM, handlers[1])
    url = capsys.readouterr().out.strip()
    assert url.startswith("http://127.0.0.1:")
    assert said[-1] == "[llamacpp] stopped (exit 5)"
