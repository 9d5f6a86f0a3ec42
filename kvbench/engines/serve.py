"""Start a real engine on 127.0.0.1, wait until it answers, stop it for sure.

    with running_engine("llamacpp", slots=2) as eng:      # sync; installs + makes the model if missing
        print(eng.base_url, eng.model)                      # http://127.0.0.1:PORT, kvbench-tiny
    async with arunning_engine("vllm-cpu") as eng: ...      # the same from async code

The server runs in its own process group, with a parent-death signal, and is stopped with
SIGTERM then SIGKILL in `finally`: an exception, Ctrl-C or a failing test never leaves it behind.
Its output goes to <engines dir>/<engine>/logs/serve-<port>.log.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

from kvbench.engines.install import EngineInstallError, check_engine, engine_dir, install, installed
from kvbench.errors import KvbenchError

Progress = Callable[[str], None]
HOST = "127.0.0.1"


class EngineStartError(KvbenchError):
    """The engine process exited or never became healthy."""


VLLM_MIN_STEP_BUDGET = 8192  # vLLM --max-num-batched-tokens at least this (its GPU server default)


def vllm_step_budget(ctx: int) -> int:
    """vLLM's --max-num-batched-tokens as serve starts it: a whole prompt of ctx in one step."""
    return max(ctx, VLLM_MIN_STEP_BUDGET)


@dataclasses.dataclass(frozen=True)
class ServeOptions:
    """How to start an engine. Fields that do not apply to an engine are ignored by it."""

    port: int = 0  # 0: a free port
    slots: int = 4  # llama.cpp -np; vLLM --max-num-seqs
    ctx: int = 16384  # tokens per sequence (llama.cpp: -c is ctx * slots, one region per slot)
    threads: int | None = None  # default: all cores
    cache_ram_mib: int = 2048  # llama.cpp --cache-ram: the RAM prompt-cache tier (G2); 0 = off
    slot_save_dir: Path | None = None  # llama.cpp --slot-save-path (disk tier); default under the cache dir
    kv_cache_gib: float = 2.0  # vLLM VLLM_CPU_KVCACHE_SPACE
    model: Path | None = None  # default: the seed-0 tiny model, made when missing
    served_name: str = "kvbench-tiny"
    extra_args: tuple[str, ...] = ()
    startup_timeout_s: float | None = None  # default: 120 s llama.cpp, 600 s vLLM
    quiet: bool = False  # llama.cpp: warnings only (no per-request info lines)


@dataclasses.dataclass
class EngineProcess:
    """A started engine. `base_url` has no /v1 suffix."""

    engine: str
    base_url: str
    port: int
    model: str
    model_path: Path
    log_path: Path
    slot_save_dir: Path | None
    proc: subprocess.Popen[bytes]
    options: ServeOptions
    started_s: float = 0.0  # seconds from spawn to healthy

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """SIGTERM the process group, then SIGKILL; returns the exit code."""
        return _stop(self.proc, timeout_s)

    def __str__(self) -> str:
        return self.base_url


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def command(name: str, opts: ServeOptions, *, port: int, model: Path) -> tuple[list[str], dict[str, str]]:
    """The argv and environment that start `name` (pure, for tests and for `--dry-run` style use)."""
    check_engine(name)
    info = installed(name)
    threads = str(opts.threads or os.cpu_count() or 1)
    env = dict(os.environ)
    if name == "llamacpp":
        server = str(info.server_bin) if info and info.server_bin else "llama-server"
        slot_dir = opts.slot_save_dir or engine_dir(name) / "slots"
        argv = [
            server,
            "-m", str(model),
            "--host", HOST,
            "--port", str(port),
            "-a", opts.served_name,
            "-np", str(opts.slots),
            "-c", str(opts.ctx * opts.slots),
            "-t", str(threads),
            "-tb", str(threads),
            "--cache-ram", str(opts.cache_ram_mib),
            "--slot-save-path", str(slot_dir),
            "--metrics",
            "--slots",
            "--no-webui",
            "--no-warmup",
        ]  # fmt: skip
        if opts.quiet:
            argv += ["--log-verbosity", "2"]
        return [*argv, *opts.extra_args], env
    python = str(info.python) if info and info.python else sys.executable
    argv = [
        python, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model),
        "--served-model-name", opts.served_name,
        "--host", HOST,
        "--port", str(port),
        "--max-model-len", str(opts.ctx),
        "--max-num-seqs", str(opts.slots),
        "--max-num-batched-tokens", str(vllm_step_budget(opts.ctx)),
        "--enable-prefix-caching",
        "--enable-prompt-tokens-details",
        "--dtype", "bfloat16",
        "--enforce-eager",
        "--disable-uvicorn-access-log",
    ]  # fmt: skip
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_SERVER_DEV_MODE": "1",  # POST /reset_prefix_cache
            "VLLM_CPU_KVCACHE_SPACE": f"{opts.kv_cache_gib:g}",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "OMP_NUM_THREADS": threads,
        }
    )
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    return [*argv, *opts.extra_args], env


def _preexec() -> None:  # pragma: no cover - runs in the child
    """Die with the parent (Linux PR_SET_PDEATHSIG), so a killed test run leaves no server behind."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


def _stop(proc: subprocess.Popen[bytes], timeout_s: float) -> int | None:
    if proc.poll() is not None:
        return proc.returncode
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait()
    finally:
        # vLLM's engine-core children share the group; make sure none outlives the parent
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


def _get_json(url: str, timeout: float = 2.0) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            body = resp.read()
            return resp.status, json.loads(body) if body else None
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (urllib.error.URLError, OSError, ValueError):
        return 0, None


def _tail(path: Path, n: int = 6) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-n:])[-600:]


def start_engine(
    name: str,
    opts: ServeOptions | None = None,
    *,
    install_missing: bool = True,
    progress: Progress | None = None,
) -> EngineProcess:
    """Install (if allowed) and start `name`; return once GET /health and /v1/models answer 200."""
    from kvbench.engines.models import make_model

    check_engine(name)
    opts = opts or ServeOptions()
    say: Progress = progress or (lambda line: None)
    if installed(name) is None:
        if not install_missing:
            raise EngineInstallError(
                name, "serve", f"{name} is not installed (kvbench engines install {name})"
            )
        install(name, progress=say)
    model = opts.model or make_model(name, progress=say)
    if not Path(model).exists():
        raise EngineStartError(f"serve {name}: model not found: {model}")
    slot_dir = None
    if name == "llamacpp":
        slot_dir = opts.slot_save_dir or engine_dir(name) / "slots"
        slot_dir.mkdir(parents=True, exist_ok=True)
    _prune_logs(engine_dir(name) / "logs", keep=20)
    timeout = opts.startup_timeout_s or (120.0 if name == "llamacpp" else 600.0)
    last_error = ""
    for _attempt in range(3):  # a port picked free can be taken before the server binds it
        port = opts.port or free_port()
        argv, env = command(name, opts, port=port, model=Path(model))
        log = engine_dir(name) / "logs" / f"serve-{port}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        say(f"[{name}] starting on {HOST}:{port} (log: {log})")
        t0 = time.monotonic()
        with log.open("wb") as fh:
            fh.write(("$ " + " ".join(argv) + "\n").encode())
            fh.flush()
            proc = subprocess.Popen(
                argv,
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
                preexec_fn=_preexec,
            )
        eng = EngineProcess(
            name, f"http://{HOST}:{port}", port, opts.served_name, Path(model), log, slot_dir, proc, opts
        )
        try:
            _wait_healthy(eng, timeout, say)
        except EngineStartError as exc:
            eng.stop()
            last_error = str(exc)
            if opts.port == 0 and "address already in use" in _tail(log, 40).lower():
                continue
            raise
        except BaseException:
            eng.stop()
            raise
        eng.started_s = round(time.monotonic() - t0, 1)
        say(f"[{name}] healthy after {eng.started_s:.1f} s: {eng.base_url}")
        return eng
    raise EngineStartError(last_error)


def _prune_logs(logs: Path, keep: int) -> None:
    """Keep the newest `keep` serve-<port>.log files: every start writes one."""
    if not logs.is_dir():
        return
    old = sorted(logs.glob("serve-*.log"), key=lambda p: p.stat().st_mtime, reverse=True)[keep:]
    for path in old:
        with contextlib.suppress(OSError):
            path.unlink()


def _wait_healthy(eng: EngineProcess, timeout_s: float, say: Progress) -> None:
    deadline = time.monotonic() + timeout_s
    next_note = time.monotonic() + 30
    while True:
        rc = eng.proc.poll()
        if rc is not None:
            raise EngineStartError(
                f"serve {eng.engine}: the server exited with code {rc} before it was healthy: "
                f"{_tail(eng.log_path)} (full log: {eng.log_path})"
            )
        status, _ = _get_json(eng.base_url + "/health")
        if status == 200:
            status, body = _get_json(eng.base_url + "/v1/models")
            if status == 200 and isinstance(body, dict) and body.get("data"):
                return
        if time.monotonic() > deadline:
            raise EngineStartError(
                f"serve {eng.engine}: not healthy after {timeout_s:.0f} s: {_tail(eng.log_path)} "
                f"(full log: {eng.log_path})"
            )
        if time.monotonic() > next_note:
            say(f"[{eng.engine}] still starting ... ({_tail(eng.log_path, 1)[:160]})")
            next_note = time.monotonic() + 30
        time.sleep(0.25)


@contextlib.contextmanager
def running_engine(
    name: str,
    *,
    install_missing: bool = True,
    progress: Progress | None = None,
    **options: Any,
) -> Iterator[EngineProcess]:
    """Start `name` with ServeOptions(**options), yield it (`.base_url`), always stop it."""
    eng = start_engine(name, ServeOptions(**options), install_missing=install_missing, progress=progress)
    try:
        yield eng
    finally:
        eng.stop()


@contextlib.asynccontextmanager
async def arunning_engine(
    name: str,
    *,
    install_missing: bool = True,
    progress: Progress | None = None,
    **options: Any,
) -> AsyncIterator[EngineProcess]:
    """The async form of running_engine (start and stop run in a worker thread)."""
    import asyncio

    eng = await asyncio.to_thread(
        start_engine, name, ServeOptions(**options), install_missing=install_missing, progress=progress
    )
    try:
        yield eng
    finally:
        await asyncio.to_thread(eng.stop)


def serve_forever(
    name: str, opts: ServeOptions, *, install_missing: bool = True, progress: Progress | None = None
) -> None:
    """`kvbench engines serve`: start, print the base URL, wait for Ctrl-C or the server's exit."""
    say: Progress = progress or print

    def _interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    # Ctrl-C and `kill` both stop cleanly, even where a shell started us with SIGINT ignored
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    eng = start_engine(name, opts, install_missing=install_missing, progress=say)
    try:
        print(eng.base_url, flush=True)
        say(f"[{name}] model {eng.model!r}; Ctrl-C stops it")
        code = eng.proc.wait()
        raise EngineStartError(f"serve {name}: the server exited with code {code}: {_tail(eng.log_path)}")
    except KeyboardInterrupt:
        say(f"[{name}] stopping ...")
    finally:
        rc = eng.stop()
        say(f"[{name}] stopped (exit {rc})")
