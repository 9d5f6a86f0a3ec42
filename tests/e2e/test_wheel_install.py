"""Install like a tool: the wheel `pip wheel .` builds installs into a fresh venv outside the clone
and gives a working `kvbench` there: scenarios, mock profiles, the datasets, the C accelerator or
its fallback said once, and `kvbench run ttft` prints its table; `pipx install <wheel>` (a pipx of
its own, pip-installed into a temp venv) does the same. (`.ci/run` runs it with `make test`.)

Dependencies come from pip's index and local cache (the machine reaches PyPI); nothing of the clone
is on the installed kvbench's path: it runs from an empty directory under tmp."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "datasets" / "sharegpt.json"


def sh(*cmd: str | Path, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    return subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `pip wheel .` builds, once for the pip and the pipx installs alike."""
    wheels = tmp_path_factory.mktemp("wheels")
    p = sh(sys.executable, "-m", "pip", "wheel", ROOT, "--no-deps", "-w", wheels, "-q", cwd=wheels)
    assert p.returncode == 0, p.stderr[-3000:]
    (built,) = wheels.glob("kvbench-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("wheel")
    env_dir = base / "venv"
    venv.create(env_dir, with_pip=True)
    p = sh(env_dir / "bin" / "python", "-m", "pip", "install", "-q", wheel, cwd=base)
    assert p.returncode == 0, p.stderr[-3000:]
    work = base / "elsewhere"  # no scenarios/ here: everything must come from the package
    work.mkdir()
    return env_dir / "bin", work


def test_installed_kvbench_is_not_the_clone(installed: tuple[Path, Path]) -> None:
    bin_dir, work = installed
    p = sh(bin_dir / "python", "-c", "import kvbench, kvbench.datasets; print(kvbench.__file__)", cwd=work)
    assert p.returncode == 0, p.stderr
    assert not Path(p.stdout.strip()).is_relative_to(ROOT)


def run_ttft(kvbench: Path, work: Path) -> subprocess.CompletedProcess[str]:
    # the fastest honest run: the ci mock profile, two short lengths
    return sh(
        kvbench,
        "run",
        "ttft",
        "--mock-profile",
        "ci",
        "--lengths",
        "2000,4000",
        "--output-dir",
        work / "results",
        cwd=work,
    )


def test_run_ttft_prints_the_table(installed: tuple[Path, Path]) -> None:
    bin_dir, work = installed
    p = run_ttft(bin_dir / "kvbench", work)
    assert p.returncode == 0, p.stderr[-3000:]
    out = p.stdout + p.stderr
    assert "cold TTFT s" in out and "TTFT speedup @ 2,000 tok" in out  # the run's table and the key table
    native = sh(
        bin_dir / "python", "-c", "from kvbench.mock import native; print(native.available())", cwd=work
    )
    said = out.count("no C accelerator built in this install")
    assert said == (0 if native.stdout.strip() == "True" else 1)  # the fallback said once, or not at all
    (run_dir,) = (work / "results").iterdir()
    assert (run_dir / "report.html").is_file()


def test_shipped_scenarios_profiles_and_a_dataset(installed: tuple[Path, Path]) -> None:
    bin_dir, work = installed
    for name in ("ttft", "throughput", "replay", "sessions"):
        p = sh(bin_dir / "kvbench", "validate", name, cwd=work)
        assert p.returncode == 0, p.stderr
    p = sh(
        bin_dir / "kvbench",
        "run",
        "throughput",
        "--mock-profile",
        "ci",
        "--dataset",
        FIXTURE,
        "--requests",
        "6",
        "--no-report",
        "--quiet",
        "--output-dir",
        work / "ds",
        cwd=work,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert "cached" in p.stdout


def test_pipx_install_runs_ttft(wheel: Path, tmp_path: Path) -> None:
    """`pipx install <wheel>` into a pipx of its own (PIPX_HOME, PIPX_BIN_DIR under tmp): the app it
    puts on the bin dir runs `kvbench run ttft` outside the clone and prints the table."""
    tool = tmp_path / "pipx-venv"
    venv.create(tool, with_pip=True)
    p = sh(tool / "bin" / "python", "-m", "pip", "install", "-q", "pipx", cwd=tmp_path, timeout=300)
    if p.returncode != 0:
        pytest.skip(f"pipx could not be pip-installed into a temp venv: {p.stderr.strip()[-300:]}")
    homes = {k: tmp_path / k.lower() for k in ("PIPX_HOME", "PIPX_BIN_DIR", "PIPX_MAN_DIR")}
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env |= {k: str(v) for k, v in homes.items()}  # never the user's own pipx
    p = subprocess.run(
        # no byte-compiling of the dependencies: it more than doubles the install on a busy machine
        [str(tool / "bin" / "pipx"), "install", "--pip-args=--no-compile", str(wheel)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    kvbench = homes["PIPX_BIN_DIR"] / "kvbench"
    assert kvbench.is_file()
    work = tmp_path / "elsewhere"
    work.mkdir()
    p = run_ttft(kvbench, work)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "cold TTFT s" in p.stdout + p.stderr
    python = homes["PIPX_HOME"] / "venvs" / "kvbench" / "bin" / "python"
    where = sh(python, "-c", "import kvbench; print(kvbench.__file__)", cwd=work)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(homes["PIPX_HOME"])  # pipx's venv, not the clone
    (run_dir,) = (work / "results").iterdir()
    assert (run_dir / "report.html").is_file()
