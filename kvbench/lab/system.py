"""Running system commands for the lab, and probing which kernel features and programs exist.

A missing piece must be named exactly ("the kernel has no veth support", "sshfs is not
installed"), so `lab up` refuses with that line and the e2e test skips with it as its reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from kvbench.errors import KvbenchError, UsageError

PACKAGES = {  # program -> Debian package that provides it (what .ci/run and `lab up` hint install)
    "ip": "iproute2",
    "tc": "iproute2",
    "sshd": "openssh-server",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "sshfs": "sshfs",
    "fusermount3": "fuse3",
    "fio": "fio",
}
OPTIONAL = {"iperf3": "iperf3"}


class LabError(KvbenchError):
    """A lab step failed: the command and what it printed, in one line."""


class LabUnavailable(UsageError):
    """This machine cannot host the lab; names exactly what is missing."""


def run(
    argv: Sequence[str], *, check: bool = True, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """Run one command; on failure raise LabError with its first stderr line."""
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except FileNotFoundError:
        raise LabError(f"{argv[0]}: not found") from None
    except subprocess.TimeoutExpired:
        raise LabError(f"`{' '.join(argv)}` did not finish within {timeout:g} s") from None
    if check and proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        raise LabError(f"`{' '.join(argv)}` exited {proc.returncode}: {err[-1] if err else 'no output'}")
    return proc


def in_ns(netns: str, argv: Sequence[str]) -> list[str]:
    return ["ip", "netns", "exec", netns, *argv]


def which(program: str) -> str | None:
    found = shutil.which(program)
    if found:
        return found
    for folder in ("/usr/sbin", "/sbin"):  # sshd is in sbin, not always on a user's PATH
        candidate = Path(folder) / program
        if candidate.exists():
            return str(candidate)
    return None


def require_root() -> None:
    if os.geteuid() != 0:
        raise UsageError("kvbench lab needs root (network namespaces, tc and mounts); rerun with sudo")


def missing_programs() -> list[str]:
    """Programs the lab needs that are not installed, with the Debian package that has them."""
    return [f"{p} (Debian package {pkg})" for p, pkg in PACKAGES.items() if which(p) is None]


def missing_features() -> list[str]:
    """Kernel features the lab needs that this machine lacks, each named exactly."""
    missing = []
    if not Path("/dev/fuse").exists():
        missing.append("FUSE: /dev/fuse is missing (modprobe fuse, or give the container /dev/fuse)")
    if not Path("/proc/self/ns/net").exists():
        missing.append("network namespaces: /proc/self/ns/net is missing (CONFIG_NET_NS)")
    return missing


def probe_link_kernel() -> list[str]:
    """Create and delete a throwaway veth pair with a tbf qdisc: the features the link needs."""
    name_a, name_b = "kvlabprobe0", "kvlabprobe1"
    run(["ip", "link", "del", name_a], check=False)
    made = run(["ip", "link", "add", name_a, "type", "veth", "peer", "name", name_b], check=False)
    if made.returncode != 0:
        return [f"veth: `ip link add type veth` failed: {made.stderr.strip()[:160]}"]
    try:
        tbf = run(
            ["tc", "qdisc", "add", "dev", name_a, "root", "tbf", "rate", "100mbit", "burst", "32kb",
             "latency", "50ms"],
            check=False,
        )  # fmt: skip
        if tbf.returncode != 0:
            return [f"tc qdisc tbf (sch_tbf): {tbf.stderr.strip()[:160]}"]
        return []
    finally:
        run(["ip", "link", "del", name_a], check=False)


def netem_available() -> bool:
    """sch_netem adds delay; some kernels (this CI's among them) are built without it."""
    name_a, name_b = "kvlabprobe0", "kvlabprobe1"
    run(["ip", "link", "del", name_a], check=False)
    if run(["ip", "link", "add", name_a, "type", "veth", "peer", "name", name_b], check=False).returncode:
        return False
    try:
        got = run(
            ["tc", "qdisc", "add", "dev", name_a, "root", "netem", "delay", "1ms", "rate", "100mbit"],
            check=False,
        )
        return got.returncode == 0
    finally:
        run(["ip", "link", "del", name_a], check=False)


def unavailable_reason() -> str | None:
    """One line naming everything this machine lacks for the lab, or None when it can host it."""
    if os.geteuid() != 0:
        return "kvbench lab needs root"
    programs = missing_programs()
    problems = programs + missing_features()
    if not problems and which("ip") and which("tc"):
        problems += probe_link_kernel()
    if not problems:
        return None
    hint = ""
    if programs:
        packages = sorted({pkg for p, pkg in PACKAGES.items() if which(p) is None})
        hint = f" (as root: apt-get install -y {' '.join(packages)}, as .ci/run does)"
    return "missing: " + "; ".join(problems) + hint
