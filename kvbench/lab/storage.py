"""The file service: sshd (SFTP) inside the storage namespace, mounted on the host with sshfs.

Why sshfs: it needs only FUSE on the host and an sshd in the namespace, both of which work in an
unprivileged-kernel container; the NFS kernel server needs nfsd in the kernel and rpcbind/mountd
inside the namespace, which a container usually cannot load (this machine has no kernel modules
at all). Every byte moves over a real TCP connection across the shaped veth.

Two mounts of the same export:
  g4         the engines' --slot-save-path: slot saves and restores cross the link
  neighbour  another tenant of the same file server (its own sshfs process and ssh connection, same link); the
             noisy-neighbour scenario reads a file through it with fio, so the noise competes with
             G4 restores in their own direction (storage -> host)
Both mount with direct_io and zero attribute/entry caching: a restore re-reads the file over the
network every time instead of from the host's page cache, and instance B sees what A just saved.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import time
from pathlib import Path

from kvbench.lab.config import NETNS, NOISE_FILE
from kvbench.lab.system import LabError, in_ns, run, which

KEYS = ("host_key", "client_key")
NOISE_FILE_MIB = 64


def sshd_config_text(root: Path, listen: str) -> str:
    """sshd listens only on the namespace's address, key auth only, SFTP only, no forwarding."""
    return "\n".join(
        [
            f"ListenAddress {listen}",
            "Port 22",
            f"HostKey {root / 'host_key'}",
            f"AuthorizedKeysFile {root / 'authorized_keys'}",
            "PermitRootLogin prohibit-password",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            f"PidFile {root / 'sshd.pid'}",
            "Subsystem sftp internal-sftp",
            "ForceCommand internal-sftp",
            "AllowTcpForwarding no",
            "AllowAgentForwarding no",
            "X11Forwarding no",
            "PermitTunnel no",
            "",
        ]
    )


def sshd_command(root: Path) -> list[str]:
    sshd = which("sshd") or "/usr/sbin/sshd"
    # -D: stay in the foreground so the pid we hold is sshd's; -e: log to stderr (our log file)
    return in_ns(NETNS, [sshd, "-D", "-e", "-f", str(root / "sshd_config")])


def sshfs_command(root: Path, ns_addr: str, store: Path, mount: Path) -> list[str]:
    opts = ",".join(
        [
            f"IdentityFile={root / 'client_key'}",
            f"UserKnownHostsFile={root / 'known_hosts'}",
            "StrictHostKeyChecking=yes",
            "BatchMode=yes",
            "Ciphers=aes128-gcm@openssh.com",  # AES-NI: the cipher is not the bottleneck
            "Compression=no",  # zeros would compress: the link must carry every byte
            "ServerAliveInterval=5",
            "dir_cache=no",
            "attr_timeout=0",
            "entry_timeout=0",
            "negative_timeout=0",
            "direct_io",
        ]
    )
    return ["sshfs", f"root@{ns_addr}:{store}", str(mount), "-o", opts]


def make_keys(root: Path, ns_addr: str) -> None:
    """A host key and a client key that exist only for this lab, and a known_hosts pinning it."""
    for name in KEYS:
        key = root / name
        if not key.exists():
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "kvbench-lab", "-f", str(key)])
    (root / "authorized_keys").write_text((root / "client_key.pub").read_text())
    host_pub = (root / "host_key.pub").read_text().split()
    (root / "known_hosts").write_text(f"{ns_addr} {host_pub[0]} {host_pub[1]}\n")
    (root / "sshd_config").write_text(sshd_config_text(root, ns_addr))


def start_sshd(root: Path, ns_addr: str, logs: Path) -> int:
    """Start sshd in the namespace; return its pid once it accepts TCP on port 22."""
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privilege-separation directory
    log = (logs / "sshd.log").open("ab")
    proc = subprocess.Popen(
        sshd_command(root), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LabError(f"sshd exited {proc.returncode}: {_tail(logs / 'sshd.log')}")
        with contextlib.suppress(OSError), socket.create_connection((ns_addr, 22), timeout=0.5):
            return proc.pid
        time.sleep(0.1)
    raise LabError(f"sshd did not listen on {ns_addr}:22 within 10 s: {_tail(logs / 'sshd.log')}")


def mount(root: Path, ns_addr: str, store: Path, point: Path) -> None:
    point.mkdir(parents=True, exist_ok=True)
    run(sshfs_command(root, ns_addr, store, point), timeout=30)
    if not is_mounted(point):
        raise LabError(f"sshfs returned but {point} is not mounted")


def is_mounted(point: Path) -> bool:
    return str(point) in mounted_under(point.parent)


_OCTAL = re.compile(r"\\([0-7]{3})")


def unescape_mount_field(field: str) -> str:
    """A /proc/mounts field as the path it names: the kernel writes space, tab, newline and
    backslash as `\\ooo` octal escapes (`\\040`, `\\011`, `\\012`, `\\134`). Decoded in one pass,
    so an escaped backslash followed by digits (`\\134040`) stays a backslash and `040`."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def mounted_under(folder: Path) -> list[str]:
    """Mount points at or below `folder` (from /proc/mounts), deepest first."""
    prefix = str(folder).rstrip("/")
    points = []
    try:
        # surrogateescape: a mount point is bytes; one that is not UTF-8 must not hide the others
        for line in Path("/proc/mounts").read_text(errors="surrogateescape").splitlines():
            parts = line.split()
            if len(parts) > 1:
                point = unescape_mount_field(parts[1])
                if point == prefix or point.startswith(prefix + "/"):
                    points.append(point)
    except OSError:
        pass
    return sorted(points, key=len, reverse=True)


def unmount(point: str) -> None:
    """fusermount3 -u, then a lazy umount if the file system is busy or its server is gone."""
    if run(["fusermount3", "-u", point], check=False).returncode != 0:
        run(["umount", "-l", point], check=False)


def write_noise_file(store: Path) -> None:
    """The neighbour's file is written straight into the server's directory: it is the file
    server's content, not traffic on the link."""
    path = store / NOISE_FILE
    if path.exists() and path.stat().st_size == NOISE_FILE_MIB << 20:
        return
    block = os.urandom(1 << 20)
    with path.open("wb") as fh:
        for _ in range(NOISE_FILE_MIB):
            fh.write(block)


def measure(point: Path, mib: int = 32) -> tuple[float, float]:
    """(write, read) throughput through a mount in Mbit/s: one file written, synced and read back."""
    path = point / ".kvbench-lab-probe"
    block = os.urandom(1 << 20)  # random bytes: nothing on the path may compress them
    t0 = time.perf_counter()
    with path.open("wb") as fh:
        for _ in range(mib):
            fh.write(block)
        fh.flush()
        os.fsync(fh.fileno())
    t_write = time.perf_counter() - t0
    t0 = time.perf_counter()
    with path.open("rb") as fh:
        while fh.read(1 << 20):
            pass
    t_read = time.perf_counter() - t0
    path.unlink()
    bits = mib * (1 << 20) * 8
    return round(bits / t_write / 1e6, 1), round(bits / t_read / 1e6, 1)


def _tail(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-3:])[-400:]
