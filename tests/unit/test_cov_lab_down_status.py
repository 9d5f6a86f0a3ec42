"""`kvbench lab down` / `status` without root: finding the lab's own processes by the paths in
their command lines (never this test's), stopping them with TERM then KILL, the steps run in
order, and the status lines for each state, with the system probes stood in."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kvbench.lab import down, status
from kvbench.lab.config import EngineInfo, LabConfig, LabState, LinkShape
from kvbench.lab.down import Found, Step, cmdline, execute, host_processes, names_lab, stop_pids


def _sleeper(root: Path, *, on_term: str = "exit") -> subprocess.Popen[bytes]:
    """A child naming a file under `root`; on SIGTERM it writes root/term.<pid> and exits, or ignores it."""
    code = "import os, signal, sys, time\n"
    if on_term == "ignore":
        code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    else:
        code += (
            "def bye(*_):\n"
            f"    open(os.path.join({str(root)!r}, 'term.%d' % os.getpid()), 'w').close()\n"
            "    sys.exit(0)\n"
            "signal.signal(signal.SIGTERM, bye)\n"
        )
    code += "print('ready', flush=True)\ntime.sleep(60)\n"
    root.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(root / "models" / "x.gguf")], stdout=subprocess.PIPE
    )
    assert proc.stdout is not None
    proc.stdout.readline()
    return proc


def test_a_process_naming_the_lab_dir_is_found_and_this_one_is_not(tmp_path: Path) -> None:
    root = tmp_path / "lab"
    proc = _sleeper(root)
    try:
        assert names_lab(cmdline(proc.pid), root)
        found = host_processes(root, None)
        assert proc.pid in found
        assert os.getpid() not in found  # never the process that runs `lab down`
        # a sibling directory sharing the prefix is not the lab
        assert not names_lab(["x", str(tmp_path / "lab-other" / "f")], root)
        assert names_lab([str(root)], root)
    finally:
        proc.kill()
        proc.wait()
    assert cmdline(proc.pid) == []  # gone (and reaped)


def test_stop_pids_terms_then_kills(tmp_path: Path) -> None:
    polite, stubborn = _sleeper(tmp_path), _sleeper(tmp_path, on_term="ignore")
    stop_pids([polite.pid, stubborn.pid], grace_s=0.3)
    # the polite one got SIGTERM first and ended by itself (stop_pids reaped its zombie); the
    # stubborn one outlived the grace period and was killed
    assert (tmp_path / f"term.{polite.pid}").exists()
    assert not (tmp_path / f"term.{stubborn.pid}").exists()
    assert cmdline(polite.pid) == []
    assert stubborn.wait(5) == -signal.SIGKILL
    polite.wait(5)
    stop_pids([polite.pid])  # an ended process: nothing to do, no error


def test_execute_batches_stops_and_never_deletes_through_a_mount(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, object]] = []
    monkeypatch.setattr(down, "stop_pids", lambda pids: calls.append(("stop", tuple(pids))))
    monkeypatch.setattr(down, "unmount", lambda point: calls.append(("unmount", point)))
    monkeypatch.setattr(down, "run", lambda argv, check: calls.append(("run", tuple(argv))))
    mounted: list[str] = ["/m"]
    monkeypatch.setattr(down, "mounted_under", lambda root: list(mounted))
    root = tmp_path / "lab"
    root.mkdir()
    steps = [Step("stop", "11"), Step("stop", "12"), Step("unmount", "/m"), Step("stop", "13"),
             Step("run", "x", ("ip", "link", "del", "x")), Step("rmtree", str(root))]  # fmt: skip
    execute(steps, root)
    assert calls == [
        ("stop", (11, 12)),
        ("unmount", "/m"),
        ("stop", (13,)),
        ("run", ("ip", "link", "del", "x")),
    ]
    assert root.exists()  # still mounted: left alone
    mounted.clear()
    execute([Step("rmtree", str(root))], root)
    assert not root.exists()


def _state(**kw: object) -> LabState:
    return LabState(config=LabConfig(), started_at="2026-12-06T12:00:00Z", **kw)  # type: ignore[arg-type]


def test_status_of_a_lab_that_is_down(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(status, "discover", lambda root, state: Found())
    lines, ok = status.status_lines(tmp_path, None)
    assert lines == ["the lab is down (kvbench lab up starts it)"] and not ok
    monkeypatch.setattr(status, "discover", lambda root, state: Found(netns=True, mounts=("/x",)))
    lines, ok = status.status_lines(tmp_path, None)
    assert "no lab state file, but lab pieces exist" in lines[0] and "mount /x" in lines[0] and not ok


def test_status_of_a_full_lab_and_of_one_missing_a_mount(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = EngineInfo(name="a", url="http://127.0.0.1:8471", raw_url="http://127.0.0.1:8481",
                        server_pid=101, connector_pid=102, log="/l")  # fmt: skip
    link = LinkShape(rate_mbit=400, delay_ms=None, qdisc="tbf", host_addr="169.254.123.1",
                     ns_addr="169.254.123.2", note="no sch_netem")  # fmt: skip
    state = _state(step="ready", link=link, mounts={"g4": "/lab/g4"}, engines=[engine],
                   sink="169.254.123.2:9000", pids={"sink": 103},
                   read_mbit=390.0, write_mbit=380.0)  # fmt: skip
    alive = {101, 102, 103}
    monkeypatch.setattr(status, "cmdline", lambda pid: ["x"] if pid in alive else [])
    monkeypatch.setattr(status, "qdisc_line", lambda: "tbf rate 400Mbit")
    monkeypatch.setattr(
        status, "discover", lambda root, st: Found(netns=True, veth=True, mounts=("/lab/g4",))
    )
    lines, ok = status.status_lines(tmp_path, state)
    text = "\n".join(lines)
    assert ok and lines[-1] == "status: up"
    assert "400 Mbit/s per direction, delay unshaped (no sch_netem)" in text
    assert "G4 read 390 Mbit/s, write 380 Mbit/s" in text
    assert "mount g4: /lab/g4 (mounted)" in text and "pid 101 running" in text
    # the mount gone and one engine dead: not up, and the lines say which
    monkeypatch.setattr(status, "discover", lambda root, st: Found(netns=True, veth=True))
    alive.discard(101)
    lines, ok = status.status_lines(tmp_path, state)
    text = "\n".join(lines)
    assert not ok and lines[-1].startswith("status: NOT fully up")
    assert "NOT MOUNTED" in text and "pid 101 NOT RUNNING" in text


def test_status_lines_are_redacted_at_the_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Any caller of `status_lines` (not only `lab status`, which prints them) gets no credential:
    an engine URL's userinfo and an echoed token are masked in the lines themselves."""
    engine = EngineInfo(name="a", url="http://alice:Sup3rPw9@127.0.0.1:8471",
                        raw_url="http://bob:Raw5ecret@127.0.0.1:8481",
                        server_pid=101, connector_pid=102, log="/l")  # fmt: skip
    state = _state(step="ready", engines=[engine], sink="Bearer Zm9vYmFyOmJheg==@169.254.123.2:9000")
    monkeypatch.setattr(status, "cmdline", lambda pid: ["x"])
    monkeypatch.setattr(status, "discover", lambda root, st: Found(netns=True, veth=True))
    lines, _ = status.status_lines(tmp_path, state)
    text = "\n".join(lines)
    for secret in ("alice", "Sup3rPw9", "bob", "Raw5ecret", "Zm9vYmFyOmJheg"):
        assert secret not in text
    assert "engine a: http://<redacted>@127.0.0.1:8471" in text and "@127.0.0.1:8481" in text
