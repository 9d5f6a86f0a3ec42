"""The iperf3 and fio noise backends against stand-in programs on PATH (small Python scripts that
speak the tools' JSON), so their command lines, their start-up refusal and the rows and totals
they make from the tools' reports are checked without the real tools."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from kvbench.errors import UsageError
from kvbench.noise.backend import NoiseContext
from kvbench.noise.fio import FioNoiseBackend
from kvbench.noise.iperf3 import Iperf3NoiseBackend, parse_bitrate
from kvbench.scenario.noise import FioNoise, Iperf3Noise

# iperf3 -J prints its JSON when it ends: on SIGINT; "fail" servers refuse at once
FAKE_IPERF3 = """\
import json, signal, sys, time
host = sys.argv[sys.argv.index("-c") + 1]
if host.startswith("fail"):
    sys.stderr.write("iperf3: error - unable to connect to server\\n")
    sys.exit(1)
per = int(host.split(".")[-1]) * 1000  # bytes per interval, from the address (10.0.0.N)
def done(*_):
    out = {
        "intervals": [{"sum": {"start": i, "end": i + 1, "bytes": per}} for i in range(3)],
        "end": {"sum_sent": {"bytes": 3 * per, "seconds": 3.0, "bits_per_second": 8 * per, "retransmits": 0}},
        "error": "interrupt - the client has terminated",
    }
    print(json.dumps(out), flush=True)
    sys.exit(0)
signal.signal(signal.SIGINT, done)
while True:
    time.sleep(0.05)
"""

# fio prints a status report every interval and the last one on SIGINT
FAKE_FIO = """\
import json, signal, sys, time
if any(a.startswith("--bs=bad") for a in sys.argv):
    sys.stderr.write("fio: bad block size\\n")
    sys.exit(1)
n = 0
def report():
    global n
    n += 1
    jobs = [{"read": {"io_bytes": 1000 * n}, "write": {"io_bytes": 10 * n}, "trim": {}}]
    print(json.dumps({"jobs": jobs}, indent=1), flush=True)
def done(*_):
    report()
    sys.exit(0)
signal.signal(signal.SIGINT, done)
report()
while True:
    time.sleep(0.05)
"""


class _Rows:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def write(self, row: dict[str, Any]) -> None:
        self.rows.append(row)


def _install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, body: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    prog = bin_dir / name
    prog.write_text(f"#!{sys.executable}\n{body}")
    prog.chmod(prog.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")


def _ctx(rows: _Rows) -> NoiseContext:
    return NoiseContext(phase="noisy-1", writer=rows, origin_ns=0)


@pytest.mark.parametrize(
    ("text", "bits"),
    [("500M", 500e6), ("10G", 10e9), ("1.5k", 1500.0), ("2g/64", 2e9), ("800", 800.0), (" 1T ", 1e12)],
)
def test_parse_bitrate_reads_decimal_units_and_a_burst(text: str, bits: float) -> None:
    assert parse_bitrate(text) == pytest.approx(bits)


@pytest.mark.parametrize("text", ["fast", "10 Gbit", "-5M", ""])
def test_parse_bitrate_refuses_with_the_field(text: str) -> None:
    with pytest.raises(UsageError, match=r"noise\.bitrate"):
        parse_bitrate(text)


def test_a_missing_tool_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UsageError, match="iperf3 program is not installed"):
        Iperf3NoiseBackend(Iperf3Noise(servers=["h"]), _ctx(_Rows()))


def test_iperf3_command_and_target_rate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _install(tmp_path, monkeypatch, "iperf3", FAKE_IPERF3)
    cfg = Iperf3Noise(servers=["a:6000", "b"], parallel=3, bitrate="80M", max_duration_s=2.2)
    be = Iperf3NoiseBackend(cfg, _ctx(_Rows()))
    assert be.command("a", 6000)[1:] == ["-c", "a", "-p", "6000", "-P", "3", "-t", "3", "-J", "-b", "80M"]
    assert "-p" not in Iperf3NoiseBackend(Iperf3Noise(servers=["b"]), _ctx(_Rows())).command("b", None)
    # 80 Mbit/s per stream = 10 MB/s, x 3 streams x 2 servers
    assert be.handle.target_bytes_per_s == pytest.approx(60e6)


async def test_iperf3_rows_and_totals_come_from_each_clients_json(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _install(tmp_path, monkeypatch, "iperf3", FAKE_IPERF3)
    rows = _Rows()
    be = Iperf3NoiseBackend(Iperf3Noise(servers=["10.0.0.1", "10.0.0.2:5202"]), _ctx(rows))
    handle = await be.start()
    assert handle.active
    await be.stop()
    assert not handle.active
    # client 1 sends 1000 B per interval, client 2 2000 B, for 3 intervals each
    assert handle.total_bytes == 3 * 1000 + 3 * 2000
    assert handle.duration_s == 3.0 and handle.intervals == 3
    totals = [r for r in rows.rows if r["client"] == "total"]
    assert [r["bytes"] for r in totals] == [3000, 3000, 3000]
    assert all(r["bytes_per_s"] == 3000.0 and r["phase"] == "noisy-1" for r in totals)
    # a row per client per interval sums to the total row of that interval
    per_client = [r for r in rows.rows if r["client"] != "total"]
    assert sum(r["bytes"] for r in per_client) == handle.total_bytes
    # SIGINT's "interrupt" is iperf3's normal end here, not a problem
    assert handle.problems == [] and [c["error"] for c in handle.clients] == [None, None]
    summary = handle.summary()
    assert summary["mean_bytes_per_s"] == pytest.approx(9000 / 3.0)
    assert summary["warning"] is None


async def test_iperf3_refuses_to_start_when_a_client_cannot_connect(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _install(tmp_path, monkeypatch, "iperf3", FAKE_IPERF3)
    be = Iperf3NoiseBackend(Iperf3Noise(servers=["10.0.0.1", "fail.example"]), _ctx(_Rows()))
    with pytest.raises(UsageError, match=r"iperf3 -c fail\.example failed: exit 1: .*unable to connect"):
        await be.start()
    assert all(p.returncode is not None for p in be.procs)  # nothing left behind


def test_fio_path_rules(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _install(tmp_path, monkeypatch, "fio", FAKE_FIO)
    with pytest.raises(UsageError, match=r"noise\.path: .* does not exist"):
        FioNoiseBackend(FioNoise(path=str(tmp_path / "nope")), _ctx(_Rows()))
    existing = tmp_path / "data.bin"
    existing.write_bytes(b"x")
    with pytest.raises(UsageError, match="rw=randwrite would overwrite"):
        FioNoiseBackend(FioNoise(path=str(existing), rw="randwrite"), _ctx(_Rows()))
    reader = FioNoiseBackend(FioNoise(path=str(existing)), _ctx(_Rows()))
    assert reader.command()[-1] == f"--filename={existing}"
    in_dir = FioNoiseBackend(FioNoise(path=str(tmp_path), jobs=2, max_duration_s=0.2), _ctx(_Rows()))
    cmd = in_dir.command()
    assert cmd[-2:] == [f"--directory={tmp_path}", "--unlink=1"]  # its own files, removed at the end
    assert "--runtime=1" in cmd and "--numjobs=2" in cmd and "--group_reporting" in cmd


async def test_fio_rows_are_the_rise_between_reports(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _install(tmp_path, monkeypatch, "fio", FAKE_FIO)
    rows = _Rows()
    be = FioNoiseBackend(FioNoise(path=str(tmp_path)), _ctx(rows))
    handle = await be.start()
    await be.stop()
    assert be.last_report is not None
    # every report counts read + write + trim of every job: report n holds 1010 * n bytes
    final = be.sample_bytes()
    assert final is not None and final % 1010 == 0 and final >= 2 * 1010
    client_rows = [r for r in rows.rows if r["client"] != "total"]
    # rows are increments: they add up to the last report's cumulative count
    assert sum(r["bytes"] for r in client_rows) == final
    assert all(r["bytes"] >= 0 for r in client_rows)
    assert not handle.active


async def test_fio_that_exits_at_once_refuses_with_its_last_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _install(tmp_path, monkeypatch, "fio", FAKE_FIO)
    be = FioNoiseBackend(FioNoise(path=str(tmp_path), block_size="bad"), _ctx(_Rows()))
    with pytest.raises(UsageError, match="noise: fio exited 1: fio: bad block size"):
        await be.start()
    assert not be.handle.active


def test_io_bytes_sums_every_direction_of_every_job() -> None:
    report = {"jobs": [{"read": {"io_bytes": 5}, "write": {"io_bytes": 7}}, {"trim": {"io_bytes": 11}}, {}]}
    assert FioNoiseBackend._io_bytes(report) == 23
    assert FioNoiseBackend._io_bytes({}) == 0
