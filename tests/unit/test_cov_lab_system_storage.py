"""The lab's system layer without root: `run`'s one-line failures, the probes and the refusal they
build (with `run`, `which` and the euid stood in), the file service's keys, mounts and throughput
probe, the noise receivers' commands and port wait, and the engines' spawn and health wait."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvbench.lab import engines, sink, storage, system
from kvbench.lab.config import IPERF3_PORT, NETNS, SINK_PORT, LabConfig
from kvbench.lab.system import LabError


class _Proc:
    """Stands in for a CompletedProcess or a Popen: a return code, output, and poll()."""

    def __init__(self, returncode: int | None = 0, stdout: str = "", stderr: str = "", pid: int = 4242):
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.pid = pid

    def poll(self) -> int | None:
        return self.returncode


def _fake_run(answers: dict[str, _Proc], calls: list[list[str]]) -> Any:
    """A `run` that records every argv and answers by the first word that names a known command."""

    def fake(argv: list[str], *, check: bool = True, timeout: float = 60.0) -> _Proc:
        calls.append(list(argv))
        key = " ".join(argv)
        for prefix, answer in answers.items():
            if key.startswith(prefix):
                return answer
        return _Proc()

    return fake


# --- system.run ---------------------------------------------------------------------------------


def test_run_returns_output_and_raises_with_the_last_stderr_line() -> None:
    ok = system.run([sys.executable, "-c", "print('hello')"])
    assert ok.stdout.strip() == "hello"
    code = "import sys; sys.stderr.write('first\\nthe reason\\n'); sys.exit(3)"
    with pytest.raises(LabError) as exc:
        system.run([sys.executable, "-c", code])
    assert "exited 3: the reason" in exc.value.message
    assert system.run([sys.executable, "-c", code], check=False).returncode == 3


def test_run_names_a_missing_program_and_a_timeout() -> None:
    with pytest.raises(LabError, match="no-such-program-kvb: not found"):
        system.run(["no-such-program-kvb"])
    with pytest.raises(LabError, match=r"did not finish within 0\.2 s"):
        system.run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.2)


def test_which_falls_back_to_sbin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(system.shutil, "which", lambda _p: None)
    real_exists = Path.exists
    monkeypatch.setattr(Path, "exists", lambda self: str(self) == "/sbin/kvbtool" or real_exists(self))
    assert system.which("kvbtool") == "/sbin/kvbtool"
    assert system.which("kvbother") is None
    assert system.in_ns("ns1", ["ip", "a"]) == ["ip", "netns", "exec", "ns1", "ip", "a"]


# --- probes and the refusal ----------------------------------------------------------------------


def test_probe_link_kernel_names_the_failed_feature_and_always_cleans_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(
        system, "run", _fake_run({"tc qdisc add": _Proc(2, stderr="Unknown qdisc tbf")}, calls)
    )
    assert system.probe_link_kernel() == ["tc qdisc tbf (sch_tbf): Unknown qdisc tbf"]
    assert calls[-1] == ["ip", "link", "del", "kvlabprobe0"]  # the finally removed the pair

    calls.clear()
    monkeypatch.setattr(system, "run", _fake_run({"ip link add": _Proc(1, stderr="no veth")}, calls))
    assert system.probe_link_kernel() == ["veth: `ip link add type veth` failed: no veth"]
    assert not any(c[:2] == ["tc", "qdisc"] for c in calls)  # no pair, no qdisc attempt

    calls.clear()
    monkeypatch.setattr(system, "run", _fake_run({}, calls))
    assert system.probe_link_kernel() == []


@pytest.mark.parametrize(("tc_rc", "expected"), [(0, True), (2, False)])
def test_netem_available_follows_the_netem_qdisc(
    monkeypatch: pytest.MonkeyPatch, tc_rc: int, expected: bool
) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(system, "run", _fake_run({"tc qdisc add": _Proc(tc_rc)}, calls))
    assert system.netem_available() is expected
    assert any("netem" in c for c in calls)
    assert calls[-1] == ["ip", "link", "del", "kvlabprobe0"]


def test_netem_is_unavailable_without_veth(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(system, "run", _fake_run({"ip link add": _Proc(1)}, []))
    assert system.netem_available() is False


def test_unavailable_reason_names_each_missing_piece_and_the_packages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(system.os, "geteuid", lambda: 1000)
    assert system.unavailable_reason() == "kvbench lab needs root"
    with pytest.raises(system.UsageError, match="needs root"):
        system.require_root()

    monkeypatch.setattr(system.os, "geteuid", lambda: 0)
    absent = {"sshfs", "fusermount3"}
    monkeypatch.setattr(system, "which", lambda p: None if p in absent else f"/usr/bin/{p}")
    monkeypatch.setattr(system, "missing_features", lambda: ["FUSE: /dev/fuse is missing"])
    monkeypatch.setattr(system, "probe_link_kernel", lambda: pytest.fail("probed with pieces missing"))
    reason = system.unavailable_reason()
    assert reason is not None
    assert "sshfs (Debian package sshfs)" in reason and "fusermount3 (Debian package fuse3)" in reason
    assert "FUSE: /dev/fuse is missing" in reason
    assert reason.endswith("(as root: apt-get install -y fuse3 sshfs, as .ci/run does)")

    monkeypatch.setattr(system, "which", lambda p: f"/usr/bin/{p}")
    monkeypatch.setattr(system, "missing_features", lambda: [])
    monkeypatch.setattr(system, "probe_link_kernel", lambda: ["veth: failed"])
    assert system.unavailable_reason() == "missing: veth: failed"  # nothing to install: no hint
    monkeypatch.setattr(system, "probe_link_kernel", lambda: [])
    assert system.unavailable_reason() is None


def test_missing_features_checks_fuse_and_namespaces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Path, "exists", lambda self: str(self) != "/dev/fuse")
    assert [m.split(":")[0] for m in system.missing_features()] == ["FUSE"]
    monkeypatch.setattr(Path, "exists", lambda self: False)
    assert [m.split(":")[0] for m in system.missing_features()] == ["FUSE", "network namespaces"]


# --- storage ------------------------------------------------------------------------------------


def test_make_keys_pins_the_host_key_for_the_namespace_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []

    def keygen(argv: list[str], **_kw: Any) -> _Proc:
        calls.append(list(argv))
        key = Path(argv[argv.index("-f") + 1])
        key.write_text("private")
        key.with_name(key.name + ".pub").write_text(f"ssh-ed25519 AAAA{key.name} kvbench-lab\n")
        return _Proc()

    monkeypatch.setattr(storage, "run", keygen)
    storage.make_keys(tmp_path, "169.254.7.2")
    assert [Path(c[-1]).name for c in calls] == ["host_key", "client_key"]
    assert (tmp_path / "known_hosts").read_text() == "169.254.7.2 ssh-ed25519 AAAAhost_key\n"
    assert (tmp_path / "authorized_keys").read_text() == "ssh-ed25519 AAAAclient_key kvbench-lab\n"
    assert "ListenAddress 169.254.7.2" in (tmp_path / "sshd_config").read_text()
    calls.clear()
    storage.make_keys(tmp_path, "169.254.7.2")
    assert calls == []  # keys already there are kept


def test_sshd_command_runs_in_the_namespace_in_the_foreground(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(storage, "which", lambda _p: None)
    argv = storage.sshd_command(Path("/lab"))
    assert argv[:4] == ["ip", "netns", "exec", NETNS]
    assert argv[4:] == ["/usr/sbin/sshd", "-D", "-e", "-f", "/lab/sshd_config"]


def test_mounted_under_reads_proc_mounts_deepest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    table = (
        "proc /proc proc rw 0 0\n"
        "root@169.254.1.2:/s /lab/mnt/g4 fuse.sshfs rw 0 0\n"
        "root@169.254.1.2:/s /lab/mnt/my\\040disk fuse.sshfs rw 0 0\n"
        "tmpfs /lab tmpfs rw 0 0\n"
        "tmpfs /labx tmpfs rw 0 0\n"
        "short\n"
    )
    real = Path.read_text
    monkeypatch.setattr(
        Path, "read_text", lambda self, *a, **k: table if str(self) == "/proc/mounts" else real(self, *a, **k)
    )
    assert storage.mounted_under(Path("/lab/")) == ["/lab/mnt/my disk", "/lab/mnt/g4", "/lab"]
    assert storage.is_mounted(Path("/lab/mnt/g4"))
    assert not storage.is_mounted(Path("/lab/mnt/neighbour"))


def test_mounted_under_decodes_every_escape_the_kernel_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    # the kernel escapes space, tab, newline and backslash in /proc/mounts as octal; each decodes,
    # and an escaped backslash before digits stays a backslash (one pass, not chained replaces)
    table = (
        "s /lab/tab\\011dir fuse rw 0 0\n"
        "s /lab/new\\012line fuse rw 0 0\n"
        "s /lab/back\\134slash fuse rw 0 0\n"
        "s /lab/lit\\134040 fuse rw 0 0\n"
        "s /lab/sp\\040ace fuse rw 0 0\n"
    )
    real = Path.read_text
    monkeypatch.setattr(
        Path, "read_text", lambda self, *a, **k: table if str(self) == "/proc/mounts" else real(self, *a, **k)
    )
    points = storage.mounted_under(Path("/lab"))
    assert sorted(points) == sorted(
        ["/lab/tab\tdir", "/lab/new\nline", "/lab/back\\slash", "/lab/lit\\040", "/lab/sp ace"]
    )
    assert storage.is_mounted(Path("/lab/tab\tdir")) and storage.is_mounted(Path("/lab/back\\slash"))


def test_mount_refuses_when_sshfs_returns_without_a_mount(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(storage, "run", _fake_run({}, calls))
    monkeypatch.setattr(storage, "is_mounted", lambda _p: False)
    point = tmp_path / "mnt" / "g4"
    with pytest.raises(LabError, match="is not mounted"):
        storage.mount(tmp_path, "169.254.1.2", tmp_path / "store", point)
    assert point.is_dir() and calls[0][:2] == ["sshfs", f"root@169.254.1.2:{tmp_path / 'store'}"]
    monkeypatch.setattr(storage, "is_mounted", lambda p: p == point)
    storage.mount(tmp_path, "169.254.1.2", tmp_path / "store", point)


def test_unmount_falls_back_to_a_lazy_umount_only_when_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(storage, "run", _fake_run({"fusermount3": _Proc(1)}, calls))
    storage.unmount("/lab/mnt/g4")
    assert calls == [["fusermount3", "-u", "/lab/mnt/g4"], ["umount", "-l", "/lab/mnt/g4"]]
    calls.clear()
    monkeypatch.setattr(storage, "run", _fake_run({}, calls))
    storage.unmount("/lab/mnt/g4")
    assert calls == [["fusermount3", "-u", "/lab/mnt/g4"]]


def test_measure_writes_reads_and_removes_its_probe(tmp_path: Path) -> None:
    write, read = storage.measure(tmp_path, mib=2)
    assert write > 0 and read > 0
    assert list(tmp_path.iterdir()) == []


def test_the_noise_file_is_written_once_at_its_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(storage, "NOISE_FILE_MIB", 2)
    storage.write_noise_file(tmp_path)
    path = tmp_path / storage.NOISE_FILE
    first = path.read_bytes()
    assert len(first) == 2 << 20 and first[: 1 << 20] == first[1 << 20 :]
    storage.write_noise_file(tmp_path)
    assert path.read_bytes() == first  # the right size already: left alone
    path.write_bytes(b"short")
    storage.write_noise_file(tmp_path)
    assert path.stat().st_size == 2 << 20


def test_start_sshd_reports_an_early_exit_with_the_log_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()

    def popen(argv: list[str], stdout: Any, **_kw: Any) -> _Proc:
        stdout.write(b"line one\n\nBind to port 22 failed\n")
        stdout.flush()
        return _Proc(returncode=255)

    monkeypatch.setattr(storage.Path, "mkdir", lambda self, **_kw: None)  # /run/sshd: not ours to make
    monkeypatch.setattr(storage.subprocess, "Popen", popen)
    with pytest.raises(LabError) as exc:
        storage.start_sshd(tmp_path, "127.0.0.1", logs)
    assert exc.value.message == "sshd exited 255: line one | Bind to port 22 failed"
    assert storage._tail(tmp_path / "absent.log") == ""


# --- noise receivers ----------------------------------------------------------------------------


def test_receiver_commands_listen_on_the_namespace_address(monkeypatch: pytest.MonkeyPatch) -> None:
    argv = sink.sink_command("169.254.9.2")
    assert argv[:4] == ["ip", "netns", "exec", NETNS]
    assert argv[-6:] == ["noise", "sink", "--host", "169.254.9.2", "--port", str(SINK_PORT)]
    monkeypatch.setattr(sink, "which", lambda _p: None)
    assert sink.iperf3_command("169.254.9.2") is None
    monkeypatch.setattr(sink, "which", lambda p: f"/usr/bin/{p}")
    assert sink.iperf3_command("169.254.9.2")[4:] == [
        "/usr/bin/iperf3", "-s", "-B", "169.254.9.2", "-p", str(IPERF3_PORT),
    ]  # fmt: skip


def test_wait_port_returns_once_listening_and_names_an_early_exit() -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        sink._wait_port("127.0.0.1", srv.getsockname()[1], _Proc(returncode=None), "sink")  # type: ignore[arg-type]
    with pytest.raises(LabError, match="iperf3 -s exited 1 at start"):
        sink._wait_port("127.0.0.1", 1, _Proc(returncode=1), "iperf3 -s")  # type: ignore[arg-type]


def test_start_sinks_starts_iperf3_only_when_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "logs").mkdir()
    started: list[list[str]] = []
    pids = iter([101, 102])
    monkeypatch.setattr(
        sink.subprocess, "Popen", lambda argv, **_kw: started.append(argv) or _Proc(None, pid=next(pids))
    )
    monkeypatch.setattr(sink, "_wait_port", lambda *_a: None)
    monkeypatch.setattr(sink, "which", lambda p: f"/usr/bin/{p}")
    got = sink.start_sinks("169.254.9.2", tmp_path)
    assert got == {"sink": (f"169.254.9.2:{SINK_PORT}", 101), "iperf3": (f"169.254.9.2:{IPERF3_PORT}", 102)}
    assert len(started) == 2
    monkeypatch.setattr(sink, "which", lambda _p: None)
    pids = iter([103])
    assert list(sink.start_sinks("169.254.9.2", tmp_path)) == ["sink"]


# --- engines ------------------------------------------------------------------------------------


class _Models(http.server.BaseHTTPRequestHandler):
    body = b'{"data": [{"id": "kvbench-tiny"}]}'

    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *_a: Any) -> None:
        pass


@pytest.fixture
def models_url() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_wait_healthy_needs_a_model_list_and_a_live_process(models_url: str, tmp_path: Path) -> None:
    engines.wait_healthy(models_url, _Proc(returncode=None), tmp_path / "log")  # type: ignore[arg-type]
    with pytest.raises(LabError, match=r"exited 9 before it was healthy \(log: .*log\)"):
        engines.wait_healthy(models_url, _Proc(returncode=9), tmp_path / "log")  # type: ignore[arg-type]
    with pytest.raises(LabError, match=r"not healthy after 0\.3 s"):
        engines.wait_healthy("http://127.0.0.1:1", _Proc(returncode=None), tmp_path / "log", timeout_s=0.3)  # type: ignore[arg-type]


def test_spawn_logs_the_command_line_then_the_output(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "x.log"
    proc = engines.spawn([sys.executable, "-c", "print('served')"], log)
    assert proc.wait(timeout=60) == 0
    lines = log.read_text().splitlines()
    assert lines[0] == f"$ {sys.executable} -c print('served')"
    assert lines[1] == "served"


def test_start_engines_records_each_instance_before_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kvbench.engines.install as install
    import kvbench.engines.models as models

    cfg = LabConfig(port_base=9100, model=str(tmp_path / "m.gguf"))
    monkeypatch.setattr(install, "install", lambda *_a, **_k: None)
    monkeypatch.setattr(models, "make_model", lambda *_a, **_k: pytest.fail("a model was given"))
    monkeypatch.setattr(engines, "server_command", lambda *_a: ["llama-server"])
    spawned: list[list[str]] = []
    pids = iter(range(500, 504))
    monkeypatch.setattr(
        engines, "spawn", lambda argv, log: spawned.append(argv) or _Proc(None, pid=next(pids))
    )
    events: list[str] = []
    monkeypatch.setattr(engines, "wait_healthy", lambda url, *_a, **_k: events.append(f"wait {url}"))
    infos = engines.start_engines(
        cfg, tmp_path / "g4", tmp_path, lambda _l: None, lambda i: events.append(f"record {i.name}")
    )
    assert [(i.name, i.url, i.raw_url, i.server_pid, i.connector_pid) for i in infos] == [
        ("a", "http://127.0.0.1:9101", "http://127.0.0.1:9111", 500, 501),
        ("b", "http://127.0.0.1:9102", "http://127.0.0.1:9112", 502, 503),
    ]
    assert events[:3] == ["record a", "wait http://127.0.0.1:9111", "wait http://127.0.0.1:9101"]
    assert spawned[1][spawned[1].index("--upstream") + 1] == "http://127.0.0.1:9111"


def test_run_subprocess_gets_no_stdin() -> None:
    # a lab command that reads stdin must not hang `lab up` waiting on the terminal
    got = system.run([sys.executable, "-c", "import sys; print(repr(sys.stdin.read()))"])
    assert got.stdout.strip() == "''"
    assert isinstance(got, subprocess.CompletedProcess)
