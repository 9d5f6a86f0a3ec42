"""`kvbench lab down` as a whole, without root: the namespace, veth and mounts stood in by a small
model that the down commands change, the processes real children of this test (an engine naming
the lab directory, an sshfs client, a process "in the namespace"), so discovery, the order of the
stops and what is reported removed, or left behind, are checked end to end."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvbench.lab import down
from kvbench.lab.config import NETNS, VETH_HOST, EngineInfo, LabConfig, LabState
from kvbench.lab.system import LabError

CHILD = "import sys, time\nprint('ready', flush=True)\ntime.sleep(120)\n"


def _child(argv0: str, *words: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([argv0, "-c", CHILD, *words], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.readline()
    return proc


class _Kernel:
    """What `ip` and /proc/mounts would say, changed by the commands down runs."""

    def __init__(self, ns_child: subprocess.Popen[bytes] | None, mounts: list[str]) -> None:
        self.netns = True
        self.veth = True
        self.ns_child = ns_child
        self.mounts = mounts
        self.commands: list[tuple[str, ...]] = []
        self.removable = True

    def run(self, argv: list[str], *, check: bool = True, timeout: float = 60.0) -> Any:
        self.commands.append(tuple(argv))
        out = ""
        if argv[:3] == ["ip", "netns", "pids"]:
            alive = self.ns_child is not None and self.ns_child.poll() is None
            out = f"{self.ns_child.pid}\n" if alive and self.ns_child else ""
        elif self.removable and argv == ["ip", "link", "del", VETH_HOST]:
            self.veth = False
        elif self.removable and argv == ["ip", "netns", "del", NETNS]:
            self.netns = False
        return types.SimpleNamespace(returncode=0, stdout=out, stderr="")


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    made: list[subprocess.Popen[bytes]] = []
    yield made
    for p in made:
        if p.poll() is None:
            p.kill()
        p.wait(10)


def _install(monkeypatch: pytest.MonkeyPatch, kernel: _Kernel) -> None:
    monkeypatch.setattr(down, "run", kernel.run)
    monkeypatch.setattr(down, "link_exists", lambda: {"netns": kernel.netns, "veth": kernel.veth})
    monkeypatch.setattr(down, "mounted_under", lambda root: list(kernel.mounts))
    monkeypatch.setattr(down, "unmount", lambda point: kernel.mounts.remove(point))


def test_down_removes_every_piece_in_order_and_reports_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, children: list[subprocess.Popen[bytes]]
) -> None:
    root = tmp_path / "lab"
    (root / "mnt" / "g4").mkdir(parents=True)
    sshfs = tmp_path / "bin" / "sshfs"  # a client named like sshfs, whose argv names the mount
    sshfs.parent.mkdir()
    sshfs.symlink_to(sys.executable)
    engine = _child(sys.executable, str(root / "models" / "x.gguf"))
    fuse = _child(str(sshfs), f"root@169.254.1.2:{root / 'store'}", str(root / "mnt" / "g4"))
    in_ns = _child(sys.executable, "sshd-stand-in")
    children += [engine, fuse, in_ns]
    kernel = _Kernel(in_ns, [str(root / "mnt" / "g4")])
    _install(monkeypatch, kernel)
    order: list[tuple[int, ...]] = []
    real_stop = down.stop_pids
    monkeypatch.setattr(
        down, "stop_pids", lambda pids, grace_s=5.0: order.append(tuple(pids)) or real_stop(pids)
    )

    info = EngineInfo(
        name="a", url="u", raw_url="r", server_pid=engine.pid, connector_pid=os.getpid(), log="l"
    )
    state = LabState(config=LabConfig(), started_at="t", engines=[info])
    found = down.discover(root, state)
    assert found.host_pids == (engine.pid,) and found.fuse_pids == (fuse.pid,)  # never this test's own pid
    assert found.ns_pids == (in_ns.pid,) and found.mounts == (str(root / "mnt" / "g4"),)

    removed = down.lab_down(root, state)
    assert removed == [
        f"network namespace {NETNS}", f"veth {VETH_HOST} (and its qdisc)", f"mount {root / 'mnt' / 'g4'}",
        f"process {in_ns.pid} (in the namespace)", f"process {engine.pid}", f"process {fuse.pid}",
        f"directory {root}",
    ]  # fmt: skip
    # engines first (they hold files on the mount), then the mount's client and the namespace
    assert order == [(engine.pid,), (fuse.pid, in_ns.pid)]
    assert [c for c in kernel.commands if c[:3] != ("ip", "netns", "pids")] == [
        ("ip", "link", "del", VETH_HOST), ("ip", "netns", "del", NETNS),
    ]  # fmt: skip
    assert not root.exists()
    assert all(p.wait(10) is not None for p in (engine, fuse, in_ns))


def test_a_piece_that_will_not_go_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "lab"
    root.mkdir()
    kernel = _Kernel(None, [])
    kernel.removable = False  # `ip netns del` fails to remove it (a process holds it, say)
    kernel.veth = False
    _install(monkeypatch, kernel)
    monkeypatch.setattr(down, "time", types.SimpleNamespace(sleep=lambda _s: None, monotonic=lambda: 0.0))
    with pytest.raises(LabError) as exc:
        down.lab_down(root, None)
    assert exc.value.message == f"lab down left behind: network namespace {NETNS}"
    assert not root.exists()  # what could go, went


def test_down_of_a_lab_that_is_not_there_removes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kernel = _Kernel(None, [])
    kernel.netns = kernel.veth = False
    _install(monkeypatch, kernel)
    assert down.lab_down(tmp_path / "never-made", None) == []
    assert kernel.commands == []  # no namespace: not even asked for its processes
