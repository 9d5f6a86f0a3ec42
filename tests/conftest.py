import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("MPLBACKEND", "Agg")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A `timing` test compares wall-clock figures of real runs (warm beats cold, noisy slower than
    # quiet, who served a returning user). On a shared 2-core machine another process can steal the
    # few milliseconds it measures, so it gets two more tries; three failures in a row still fail.
    for item in items:
        if item.get_closest_marker("timing") is not None:
            item.add_marker(pytest.mark.flaky(reruns=2, reruns_delay=1))


@pytest.fixture
def run_cli(monkeypatch, capsys):
    """`kvbench ARGS...` in this process: (exit code, stdout, stderr), as the bad-input corpora check."""

    def run(*args: str) -> tuple[object, str, str]:
        from kvbench.cli import main

        monkeypatch.setattr(sys, "argv", ["kvbench", *args])
        with pytest.raises(SystemExit) as exc:
            main()
        out = capsys.readouterr()
        return exc.value.code, out.out, out.err

    return run


@pytest.fixture
def kvbench(monkeypatch, capsys):
    """`kvbench ARGS...` in this process: (exit code, stdout, stderr); 0 when the command returns
    without SystemExit (a run or sweep that succeeded), unlike run_cli, which expects an exit."""

    def run(*args: str) -> tuple[object, str, str]:
        from kvbench.cli import main

        monkeypatch.setattr(sys, "argv", ["kvbench", *args])
        code: object = 0
        try:
            main()
        except SystemExit as exc:
            code = exc.code or 0
        out = capsys.readouterr()
        return code, out.out, out.err

    return run
