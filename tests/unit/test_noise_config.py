"""Noise generators without traffic: config checks, summaries, parsing helpers, the CLI's mount."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvbench.errors import UsageError
from kvbench.noise import NoiseHandle, format_rate, noise_generator, parse_bitrate, process, split_host_port
from kvbench.results import JsonlWriter, read_jsonl
from kvbench.scenario import FioNoise, Iperf3Noise, NoNoise, TcpNoise


async def test_no_noise_is_a_noop_handle() -> None:
    async with noise_generator(NoNoise(), phase="noisy-1", writer=None, origin_ns=0) as h:
        assert h.active is False
    s = h.summary()
    assert s["kind"] == "none" and s["total_bytes"] == 0 and s["warning"] is None
    assert s["reached_target"] is None and s["config"] == {"kind": "none"}


def test_tcp_without_target_refuses() -> None:
    with pytest.raises(UsageError, match=r"noise.targets: the tcp noise generator needs an explicit target"):
        noise_generator(TcpNoise(), phase="p", writer=None, origin_ns=0)
    with pytest.raises(UsageError, match=r"noise\.targets"):
        noise_generator(TcpNoise(), phase="p", writer=None, origin_ns=0, default_targets=[])


def test_tcp_target_needs_a_port() -> None:
    with pytest.raises(UsageError, match="needs a port"):
        noise_generator(TcpNoise(targets=["example.org"]), phase="p", writer=None, origin_ns=0)


def test_default_targets_are_used_when_none_configured() -> None:
    gen = noise_generator(TcpNoise(), phase="p", writer=None, origin_ns=0, default_targets=["127.0.0.1:9"])
    assert gen.targets == [("127.0.0.1", 9)]  # type: ignore[attr-defined]


def test_missing_programs_name_the_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(process.shutil, "which", lambda _name: None)
    with pytest.raises(UsageError) as exc:
        noise_generator(Iperf3Noise(servers=["127.0.0.1"]), phase="p", writer=None, origin_ns=0)
    assert exc.value.message == (
        "noise.kind=iperf3: the iperf3 program is not installed (Debian: apt-get install iperf3)"
    )
    with pytest.raises(UsageError, match=r"noise.kind=fio: the fio program is not installed .*install fio"):
        noise_generator(FioNoise(path=str(tmp_path)), phase="p", writer=None, origin_ns=0)


def test_fio_path_checks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(process.shutil, "which", lambda name: f"/usr/bin/{name}")
    with pytest.raises(UsageError, match="does not exist"):
        noise_generator(FioNoise(path=str(tmp_path / "nope")), phase="p", writer=None, origin_ns=0)
    victim = tmp_path / "data.bin"
    victim.write_bytes(b"precious")
    with pytest.raises(UsageError, match="would overwrite"):
        noise_generator(FioNoise(path=str(victim), rw="randwrite"), phase="p", writer=None, origin_ns=0)
    gen = noise_generator(FioNoise(path=str(victim), rw="read"), phase="p", writer=None, origin_ns=0)
    assert f"--filename={victim}" in gen.command()  # type: ignore[attr-defined]
    gen = noise_generator(
        FioNoise(path=str(tmp_path), max_duration_s=2.5), phase="p", writer=None, origin_ns=0
    )
    cmd = gen.command()  # type: ignore[attr-defined]
    assert f"--directory={tmp_path}" in cmd and "--unlink=1" in cmd and "--runtime=3" in cmd


def test_iperf3_command_and_target(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process.shutil, "which", lambda name: f"/usr/bin/{name}")
    cfg = Iperf3Noise(servers=["10.0.0.1", "10.0.0.2:5202"], parallel=4, bitrate="1G", max_duration_s=60)
    gen = noise_generator(cfg, phase="p", writer=None, origin_ns=0)
    assert gen.command("10.0.0.2", 5202) == [  # type: ignore[attr-defined]
        *("/usr/bin/iperf3", "-c", "10.0.0.2", "-p", "5202", "-P", "4", "-t", "60", "-J", "-b", "1G")
    ]
    assert gen.command("10.0.0.1", None)[:3] == ["/usr/bin/iperf3", "-c", "10.0.0.1"]  # type: ignore[attr-defined]
    # -b is per stream: 1 Gbit/s x 4 streams x 2 servers = 1 GB/s
    assert gen.handle.target_bytes_per_s == pytest.approx(1e9)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "bits"), [("10G", 10e9), ("500m", 500e6), ("1.5K", 1500.0), ("100", 100.0), ("2G/10", 2e9)]
)
def test_parse_bitrate(text: str, bits: float) -> None:
    assert parse_bitrate(text) == bits


def test_parse_bitrate_rejects_junk() -> None:
    with pytest.raises(UsageError, match=r"noise\.bitrate"):
        parse_bitrate("fast")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("h:1", ("h", 1)), ("10.1.2.3:5201", ("10.1.2.3", 5201)), ("[::1]:80", ("::1", 80)), ("h", ("h", None))],
)
def test_split_host_port(text: str, expected: tuple[str, int | None]) -> None:
    assert split_host_port(text, 5201, "f") == expected


@pytest.mark.parametrize("bad", ["", "a:b:c", "h:0", "h:70000", "h:x"])
def test_split_host_port_rejects(bad: str) -> None:
    with pytest.raises(UsageError):
        split_host_port(bad, None, "noise.targets")


def test_format_rate() -> None:
    assert format_rate(1.2e9) == "1.2 GB/s"
    assert format_rate(5e9) == "5 GB/s"
    assert format_rate(3.5e6) == "3.5 MB/s"
    assert format_rate(12) == "12 B/s"


def test_handle_rows_and_summary(tmp_path: Path) -> None:
    with JsonlWriter(tmp_path / "noise.jsonl") as w:
        h = NoiseHandle(kind="tcp", config={}, phase="noisy-1", origin_ns=0, writer=w, target_bytes_per_s=5e9)
        h.started_ns = 0
        h.record(1_000_000_000, 1.0, {"a": 600_000_000, "b": 600_000_000})
        h.record(2_000_000_000, 1.0, {"a": 400_000_000, "b": 400_000_000})
        h.record(2_100_000_000, 0.1, {"a": 100_000_000, "b": 100_000_000}, full=False)  # not a peak
        h.stopped_ns = 2_000_000_000
        h.total_bytes = 2_400_000_000
    rows = read_jsonl(tmp_path / "noise.jsonl")
    assert len(rows) == 9
    assert set(rows[0]) == {"t_ns", "phase", "client", "bytes", "bytes_per_s"}
    totals = [r for r in rows if r["client"] == "total"]
    assert [r["bytes"] for r in totals] == [1_200_000_000, 800_000_000, 200_000_000]
    assert totals[2]["bytes_per_s"] == pytest.approx(2e9)
    s = h.summary()
    assert s["mean_bytes_per_s"] == pytest.approx(1.2e9)
    assert s["peak_bytes_per_s"] == pytest.approx(1.2e9)
    assert s["reached_target"] is False
    assert s["warning"] == "noise never reached its target rate: 1.2 GB/s of 5 GB/s"


def test_summary_target_reached_at_ninety_percent() -> None:
    h = NoiseHandle(kind="tcp", config={}, phase="p", origin_ns=0, target_bytes_per_s=100.0)
    h.started_ns, h.stopped_ns, h.total_bytes = 0, 1_000_000_000, 91
    s = h.summary()
    assert s["reached_target"] is True and s["warning"] is None
    h.problems.append("tcp-0 -> h:1: the sink closed the connection")
    assert "sink closed" in (h.summary()["warning"] or "")


def test_noise_commands_import_is_cheap() -> None:
    code = "import sys, kvbench.noise.commands as m; bad = {'kvbench.noise.tcp', 'kvbench.noise.handle', "
    code += "'kvbench.noise.backend', 'kvbench.scenario', 'pydantic'}"
    code += "; print(sorted(bad & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_cli_mounts_noise_subcommands() -> None:
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "kvbench", "noise", "--help"], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    assert "sink" in out.stdout and "tcp" in out.stdout
    assert time.perf_counter() - t0 < 10
