"""A full or read-only disk: one line naming the file, exit 1 (2 when --output-dir is unwritable from
the start), the manifest closed as `failed` with the cause `disk: ...`, and every file left valid
(rows cut back to the last whole one; JSON written to a temporary file, then renamed)."""

import contextlib
import errno
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kvbench.mock.spawn import spawned_mock
from kvbench.results.files import RESERVE, JsonlWriter, WriteFailed, write_json_atomic

pytestmark = pytest.mark.slow


def strict_loads(text: str):
    def refuse(constant: str):
        raise ValueError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


@contextlib.contextmanager
def mounted(where: Path, *args: str):
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", *args, str(where)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount here ({done.stderr.strip() or 'mount failed'}); needs root")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def kvbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kvbench", *args], capture_output=True, text=True, timeout=300
    )


def test_a_row_the_disk_refuses_is_cut_off_and_names_the_file():
    """/dev/full refuses every write with ENOSPC, as a full disk does."""
    writer = JsonlWriter(Path("/dev/full"))
    with pytest.raises(WriteFailed, match=r"cannot write /dev/full: No space left on device") as exc:
        writer.write({"request_id": "a"})
    assert exc.value.disk and exc.value.errno == errno.ENOSPC
    with pytest.raises(WriteFailed):  # and it stays refused: the run is ending
        writer.write({"request_id": "b"})
    assert writer.rows == 0
    writer.close()


async def test_a_full_disk_fails_the_run_in_one_line_and_leaves_every_file_valid(tmp_path):
    with mounted(tmp_path / "disk", "-t", "tmpfs", "-o", "size=2m", "tmpfs") as disk:
        # leave ~150 KiB beside the run's own 256 KiB reserve: a few hundred rows fill it
        st = os.statvfs(disk)
        free = st.f_bavail * st.f_frsize
        (disk / "fill").write_bytes(bytes(free - 256 * 1024 - 150 * 1024))
        async with spawned_mock(profile="ci") as mock:  # its ground truth is off the small disk
            done = kvbench(
                "run", "throughput", "--base-url", mock.base_url, "--requests", "3000", "--concurrency",
                "8", "--lengths", "100", "--max-tokens", "16", "--output-dir", str(disk / "out"), "-q",
            )  # fmt: skip
        assert done.returncode == 1, done.stderr
        (run_dir,) = (disk / "out").iterdir()
        (line,) = done.stderr.strip().splitlines()
        # the rows or the /metrics samples: whichever write found the disk full first
        assert re.fullmatch(
            rf"kvbench: cannot write {re.escape(str(run_dir))}/\w+\.jsonl: No space left on device", line
        )
        manifest = strict_loads((run_dir / "manifest.json").read_text())
        assert manifest["status"] == "failed"
        assert manifest["error"].startswith("disk: cannot write ") and "No space left" in manifest["error"]
        rows = [strict_loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
        assert 0 < len(rows) < 3000 and len(rows) == manifest["requests"]  # none torn, none lost
        strict_loads((run_dir / "metrics_deltas.json").read_text())
        for jsonl in run_dir.glob("*.jsonl"):
            for line in jsonl.read_text().splitlines():
                strict_loads(line)
        assert not list(run_dir.glob("*.tmp")) and not (run_dir / RESERVE).exists()
        # the report still reads it and says why it failed
        report = kvbench("report", str(run_dir), "-q")
        assert report.returncode == 0, report.stderr
        assert "disk: cannot write" in (run_dir / "summary.json").read_text()


def test_a_read_only_output_dir_is_one_line_before_anything_runs(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    with (
        mounted(tmp_path / "ro", "--bind", str(source)) as ro,
        mounted(ro, "-o", "remount,ro,bind"),
    ):
        done = kvbench("run", "ttft", "--output-dir", str(ro / "out"), "-q", "--no-report")
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().splitlines() == [
            f"kvbench: --output-dir {ro / 'out'}: cannot write there (Read-only file system)"
        ]
        assert not any(source.iterdir())


def test_a_json_file_the_disk_refuses_keeps_its_old_copy(tmp_path):
    with mounted(tmp_path / "disk", "-t", "tmpfs", "-o", "size=64k", "tmpfs") as disk:
        target = disk / "manifest.json"
        write_json_atomic(target, {"status": "running"})
        with pytest.raises(WriteFailed, match=r"manifest.json: No space left on device") as exc:
            write_json_atomic(target, {"status": "complete", "pad": "x" * 200_000})
        assert exc.value.disk
        assert strict_loads(target.read_text()) == {"status": "running"}
        assert [p.name for p in disk.iterdir()] == ["manifest.json"]  # no temporary file left
