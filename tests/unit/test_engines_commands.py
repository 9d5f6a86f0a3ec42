"""`kvbench engines ...` through the real entry point (no install, no server)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _kvbench(*args: str, engines_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KVBENCH_ENGINES_DIR": str(engines_dir)}
    return subprocess.run([sys.executable, "-m", "kvbench", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def test_help_lists_the_commands(tmp_path: Path) -> None:
    out = _kvbench("engines", "--help", engines_dir=tmp_path)
    assert out.returncode == 0, out.stderr
    for cmd in ("install", "make-model", "serve", "status"):
        assert cmd in out.stdout


def test_status_on_an_empty_cache(tmp_path: Path) -> None:
    out = _kvbench("engines", "status", engines_dir=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"engines dir: {tmp_path.resolve()}" in out.stdout
    assert "llamacpp: not installed" in out.stdout and "vllm-cpu: not installed" in out.stdout


def test_unknown_engine_is_exit_2_one_line(tmp_path: Path) -> None:
    out = _kvbench("engines", "install", "tgi", engines_dir=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "kvbench: engine: unknown engine 'tgi'; choose one of llamacpp, vllm-cpu"
    ]


def test_serve_without_install_says_how(tmp_path: Path) -> None:
    out = _kvbench("engines", "serve", "llamacpp", "--no-install", engines_dir=tmp_path)
    assert out.returncode == 1
    assert "kvbench engines install llamacpp" in out.stderr and "Traceback" not in out.stderr


def test_module_import_is_cheap() -> None:
    code = (
        "import sys, kvbench.engines.commands, kvbench.engines.install, kvbench.engines.serve; "
        "heavy = [m for m in ('aiohttp', 'numpy', 'torch', 'gguf', 'pandas') if m in sys.modules]; "
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
