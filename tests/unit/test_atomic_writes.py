"""Every file kvbench writes outside the row logs (reports, pictures, JSON) replaces the old copy
whole or not at all: a disk that fills mid-write leaves the previous file readable."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest

from kvbench.report.core.formats import write_json
from kvbench.results import files
from kvbench.results.files import WriteFailed, save_figure_atomic


def _full_disk_after(monkeypatch: pytest.MonkeyPatch, n_bytes: int) -> None:
    """The next file opened for writing takes n_bytes, then the disk is full."""
    real_open = Path.open

    def fake_open(self: Path, mode: str = "r", *a, **kw):  # type: ignore[no-untyped-def]
        fh = real_open(self, mode, *a, **kw)
        if "w" not in mode:
            return fh
        real_write = fh.write

        def write(data):  # type: ignore[no-untyped-def]
            real_write(data[:n_bytes])
            raise OSError(errno.ENOSPC, "No space left on device")

        fh.write = write  # type: ignore[method-assign]
        return fh

    monkeypatch.setattr(Path, "open", fake_open)


def test_a_report_json_on_a_full_disk_keeps_the_old_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "summary.json"
    write_json(path, {"ok": 1, "nan": float("nan")})
    assert json.loads(path.read_text()) == {"ok": 1, "nan": None}
    _full_disk_after(monkeypatch, 5)
    with pytest.raises(WriteFailed, match=r"summary\.json: No space left"):
        write_json(path, {"ok": 2})
    assert json.loads(path.read_text()) == {"ok": 1, "nan": None}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_a_picture_is_written_whole_under_its_final_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    path = save_figure_atomic(fig, tmp_path / "ttft.png", dpi=50)
    first = path.read_bytes()
    assert first[:8] == b"\x89PNG\r\n\x1a\n"
    _full_disk_after(monkeypatch, 100)
    with pytest.raises(WriteFailed):
        save_figure_atomic(fig, path, dpi=80)
    plt.close(fig)
    assert path.read_bytes() == first
    assert [p.name for p in tmp_path.iterdir()] == ["ttft.png"]


def test_text_is_replaced_by_rename(tmp_path: Path):
    path = tmp_path / "report.md"
    files.write_text_atomic(path, "# one\n")
    files.write_text_atomic(path, "# two\n")
    assert path.read_text() == "# two\n"
