"""Noise receivers inside the storage namespace: kvbench's TCP sink and, when installed, iperf3 -s.

Traffic sent to them (scenario noise kind tcp or iperf3, from the host) crosses the shaped link
toward the storage side, the direction G4 saves take. The neighbour's reads (noise kind fio on the
neighbour mount, the throughput-lab default) load the other direction, the one restores take.
Both listen only on the namespace's link-local address.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from kvbench.lab.config import IPERF3_PORT, NETNS, SINK_PORT
from kvbench.lab.system import LabError, in_ns, which


def sink_command(ns_addr: str) -> list[str]:
    # inside the namespace: `lab down` finds it (and sshd, iperf3) with `ip netns pids`
    return in_ns(
        NETNS, [sys.executable, "-m", "kvbench", "noise", "sink", "--host", ns_addr, "--port", str(SINK_PORT)]
    )


def iperf3_command(ns_addr: str) -> list[str] | None:
    program = which("iperf3")
    if program is None:
        return None
    return in_ns(NETNS, [program, "-s", "-B", ns_addr, "-p", str(IPERF3_PORT)])


def _wait_port(addr: str, port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LabError(f"{what} exited {proc.returncode} at start")
        try:
            with socket.create_connection((addr, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise LabError(f"{what} did not listen on {addr}:{port} within 15 s")


def start_sinks(ns_addr: str, root: Path) -> dict[str, tuple[str, int]]:
    """Start the receivers; returns role -> (address, pid)."""
    started: dict[str, tuple[str, int]] = {}
    logs = root / "logs"
    with (logs / "sink.log").open("ab") as fh:
        sink = subprocess.Popen(
            sink_command(ns_addr), stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
    started["sink"] = (f"{ns_addr}:{SINK_PORT}", sink.pid)
    _wait_port(ns_addr, SINK_PORT, sink, "kvbench noise sink")
    argv = iperf3_command(ns_addr)
    if argv is not None:
        with (logs / "iperf3.log").open("ab") as fh:
            iperf = subprocess.Popen(
                argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        started["iperf3"] = (f"{ns_addr}:{IPERF3_PORT}", iperf.pid)
        _wait_port(ns_addr, IPERF3_PORT, iperf, "iperf3 -s")
    return started
