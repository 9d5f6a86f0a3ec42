"""`kvbench lab down`: find every piece of the lab and remove it, in an order that cannot hang.

Discovery does not trust the state file alone (a crash can stop `up` between making a piece and
recording it): the namespace and veth are found by their fixed names, mounts from /proc/mounts
under the lab directory, processes inside the namespace with `ip netns pids`, and host-side
processes (llama-servers, connectors, sshfs and its ssh) by an argv that names the lab directory.
Pids from the state file are added only when their argv still matches (a pid can be reused).

The plan is a pure function of what was found (unit-tested): stop the engines and connectors,
which hold files open on the mounts; unmount (sshfs and its ssh exit); stop what is left on the
host; stop everything in the namespace (sshd, sinks); delete the veth (its qdiscs go with it)
and the namespace; remove the lab directory. Then discover again: anything left is an error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import time
from pathlib import Path

from kvbench.lab.config import NETNS, LabState
from kvbench.lab.link import down_commands, link_exists
from kvbench.lab.storage import mounted_under, unmount
from kvbench.lab.system import LabError, run


@dataclasses.dataclass(frozen=True)
class Found:
    """What exists of a lab right now."""

    netns: bool = False
    veth: bool = False
    mounts: tuple[str, ...] = ()
    ns_pids: tuple[int, ...] = ()
    host_pids: tuple[int, ...] = ()  # engines and connectors: they hold files open on the mounts
    fuse_pids: tuple[int, ...] = ()  # sshfs and its ssh: they exit when their mount goes
    dir_exists: bool = False

    def leftovers(self) -> list[str]:
        out = []
        if self.netns:
            out.append(f"network namespace {NETNS}")
        if self.veth:
            out.append("veth kvlab-h (and its qdisc)")
        out += [f"mount {m}" for m in self.mounts]
        out += [f"process {p} (in the namespace)" for p in self.ns_pids]
        out += [f"process {p}" for p in (*self.host_pids, *self.fuse_pids)]
        return out


@dataclasses.dataclass(frozen=True)
class Step:
    action: str  # stop | unmount | run | rmtree
    target: str
    argv: tuple[str, ...] = ()


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def names_lab(argv: list[str], root: Path) -> bool:
    """An argv belongs to the lab when one of its words is or contains a path inside the lab dir."""
    base = str(root).rstrip("/")
    return any(word == base or base + "/" in word for word in argv)


def _ancestors() -> set[int]:
    pids = {os.getpid()}
    pid = os.getpid()
    for _ in range(64):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        if pid <= 1:
            break
        pids.add(pid)
    return pids


def host_processes(root: Path, state: LabState | None) -> list[int]:
    skip = _ancestors()
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) not in skip and names_lab(cmdline(int(entry.name)), root):
            found.add(int(entry.name))
    if state is not None:
        recorded = [
            *state.pids.values(),
            *(p for e in state.engines for p in (e.server_pid, e.connector_pid)),
        ]
        found.update(p for p in recorded if p not in skip and names_lab(cmdline(p), root))
    return sorted(found)


def namespace_processes() -> list[int]:
    got = run(["ip", "netns", "pids", NETNS], check=False)
    return sorted({int(w) for w in got.stdout.split() if w.isdigit()}) if got.returncode == 0 else []


def is_fuse_client(argv: list[str]) -> bool:
    return bool(argv) and Path(argv[0]).name in ("sshfs", "ssh")


def discover(root: Path, state: LabState | None) -> Found:
    link = link_exists()
    ns_pids = namespace_processes() if link["netns"] else []
    host = [p for p in host_processes(root, state) if p not in ns_pids]
    return Found(
        netns=link["netns"],
        veth=link["veth"],
        mounts=tuple(mounted_under(root)),
        ns_pids=tuple(ns_pids),
        host_pids=tuple(p for p in host if not is_fuse_client(cmdline(p))),
        fuse_pids=tuple(p for p in host if is_fuse_client(cmdline(p))),
        dir_exists=root.exists(),
    )


def plan_down(found: Found, root: Path) -> list[Step]:
    """The ordered steps that remove what was found (pure)."""
    steps = [Step("stop", str(p)) for p in found.host_pids]
    steps += [Step("unmount", m) for m in found.mounts]
    steps += [Step("stop", str(p)) for p in (*found.fuse_pids, *found.ns_pids)]
    if found.veth or found.netns:
        for argv in down_commands():
            if (argv[1] == "link" and found.veth) or (argv[1] == "netns" and found.netns):
                steps.append(Step("run", argv[-1], tuple(argv)))
    if found.dir_exists:
        steps.append(Step("rmtree", str(root)))
    return steps


def stop_pids(pids: list[int], grace_s: float = 5.0) -> None:
    """SIGTERM each, wait up to grace_s for all, SIGKILL the rest."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in alive if _alive(p)]
    for pid in alive:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie we started (the state is Z) is gone for every purpose but reaping
    with contextlib.suppress(OSError, IndexError, ChildProcessError):
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            return False
    return True


def execute(steps: list[Step], root: Path) -> None:
    i = 0
    while i < len(steps):
        step = steps[i]
        if step.action == "stop":  # consecutive stops go together: one grace period, not one each
            batch = []
            while i < len(steps) and steps[i].action == "stop":
                batch.append(int(steps[i].target))
                i += 1
            stop_pids(batch)
            continue
        if step.action == "unmount":
            unmount(step.target)
        elif step.action == "run":
            run(list(step.argv), check=False)
        elif step.action == "rmtree" and not mounted_under(root):  # never delete through a mount
            shutil.rmtree(step.target, ignore_errors=True)
        i += 1


def lab_down(root: Path, state: LabState | None) -> list[str]:
    """Remove everything; returns what was removed. Raises LabError naming anything left behind."""
    found = discover(root, state)
    steps = plan_down(found, root)
    execute(steps, root)
    # a veth is deleted asynchronously with its namespace; give the kernel a moment
    for _ in range(20):
        after = discover(root, None)
        if not after.leftovers() and not after.dir_exists:
            break
        time.sleep(0.1)
    left = after.leftovers() + ([f"directory {root}"] if after.dir_exists else [])
    if left:
        raise LabError("lab down left behind: " + "; ".join(left))
    return found.leftovers() + ([f"directory {root}"] if found.dir_exists else [])
