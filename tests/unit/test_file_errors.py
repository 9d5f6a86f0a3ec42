"""Every file-writing command, pointed at a folder it cannot write or a directory where a file goes:
one `kvbench: path: why` line, exit 2, never an internal error or a traceback."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from kvbench import cli

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "tests/data/fixture_runs/20261130T140312Z-ttft-3f9a1c"
TRACE = REPO / "scenarios/traces/ci.jsonl"
CLAIMS = REPO / "tests/data/claims/planted.yaml"


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    old = sys.argv
    sys.argv = ["kvbench", *argv]
    try:
        cli.main()
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        sys.argv = old
    return code, capsys.readouterr().err


@pytest.fixture
def readonly(tmp_path: Path):
    """A folder nothing can be created in: chmod for a user, /sys for root (chmod does not stop root)."""
    if os.geteuid() == 0:
        yield Path("/sys/kernel")
        return
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o555)
    yield d
    d.chmod(0o755)


def commands(target: Path, as_file: bool) -> list[list[str]]:
    """Each file-writing command with its output at `target` (a folder, or a file path when as_file)."""
    out_file = target if as_file else target / "out"
    return [
        ["trace", "analyze", str(TRACE), "--out", str(target / "ana" if not as_file else target)],
        [
            "trace",
            "synth",
            "-o",
            str(out_file.with_suffix(".jsonl") if not as_file else target),
            "--rows",
            "5",
        ],
        ["fit", str(RUN), "-o", str(out_file.with_suffix(".yaml") if not as_file else target)],
        ["compare", str(RUN), str(RUN), "-o", str(target / "cmp" if not as_file else target), "-q"],
    ]


def assert_one_line(code: int, err: str, argv: list[str]) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, (argv, code, err)
    assert len(lines) == 1 and lines[0].startswith("kvbench: "), (argv, err)
    assert "internal error" not in err and "Traceback" not in err, (argv, err)


def test_read_only_folder(readonly: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in commands(readonly, as_file=False):
        code, err = run_cli(argv, capsys)
        assert_one_line(code, err, argv)


def test_directory_where_a_file_goes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a_dir = tmp_path / "taken.d"
    a_dir.mkdir()
    a_file = tmp_path / "taken.f"
    a_file.write_text("x")
    for argv in commands(a_dir, as_file=True)[1:3]:  # synth and fit write a FILE: give them a folder
        code, err = run_cli(argv, capsys)
        assert_one_line(code, err, argv)
        assert "directory" in err
    for argv in (commands(a_file, as_file=True)[0], commands(a_file, as_file=True)[3]):  # want a folder
        code, err = run_cli(argv, capsys)
        assert_one_line(code, err, argv)
        assert "not a directory" in err or "directory is expected" in err


def test_report_into_a_run_whose_files_are_folders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    for name in ("summary.json", "report.md"):
        (run / name).unlink(missing_ok=True)
        (run / name).mkdir()
    code, err = run_cli(["report", str(run), "-q"], capsys)
    assert_one_line(code, err, ["report"])


def test_audit_json_into_a_full_stream(capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    class Full:
        def write(self, _s: str) -> int:
            raise OSError(28, "No space left on device")

        def flush(self) -> None:
            pass

    monkeypatch.setattr(sys, "stdout", Full())
    code, err = run_cli(["audit", str(CLAIMS), "--json"], capsys)
    assert_one_line(code, err, ["audit", "--json"])
    assert "no space" in err


def test_trace_that_is_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_cli(["trace", "analyze", str(tmp_path)], capsys)
    assert_one_line(code, err, ["trace", "analyze"])
    assert "a directory" in err and "no such" not in err


def test_a_warning_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    with (run / "requests.jsonl").open("a") as fh:
        fh.write('{"torn')
    code, err = run_cli(["fit", str(run), "-o", str(tmp_path / "t.yaml")], capsys)
    assert code == 0, err
    warned = [ln for ln in err.splitlines() if "torn" in ln]
    assert warned == [
        "kvbench: warning: requests.jsonl: skipped a torn last line (the run was killed mid-write)"
    ]
    assert "UserWarning" not in err and "warnings.warn" not in err
