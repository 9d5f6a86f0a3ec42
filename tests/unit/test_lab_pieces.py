"""The lab's pure pieces: command construction, the state file, cleanup planning, the manifest."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvbench.errors import UsageError
from kvbench.lab import config, link, storage
from kvbench.lab.config import EngineInfo, LabConfig, LabState, LinkShape, load_state, save_state
from kvbench.lab.down import Found, names_lab, plan_down
from kvbench.lab.system import LabUnavailable, require_root

ROOT = Path(__file__).resolve().parents[2]


def test_addresses_are_one_link_local_slash_30() -> None:
    cfg = LabConfig(block=200)
    net = ipaddress.ip_network("169.254.200.0/30")
    for addr in (cfg.host_addr, cfg.ns_addr):
        ip = ipaddress.ip_address(addr)
        assert ip.is_link_local and ip in net
    cmds = link.up_commands(cfg, None)
    flat = [" ".join(c) for c in cmds]
    # only the /30 on the pair: no route, no default gateway, no other interface
    assert not any(" route " in c or "default" in c for c in flat)
    assert sum(" addr add " in c for c in flat) == 2
    assert all("/30" in c for c in flat if " addr add " in c)


def test_both_ends_are_shaped_tbf_without_delay_netem_with() -> None:
    cfg = LabConfig(rate_mbit=250)
    tbf = [c for c in link.up_commands(cfg, None) if "qdisc" in c]
    assert len(tbf) == 2 and all("tbf" in c and "250mbit" in c for c in tbf)
    assert {c[c.index("dev") + 1] for c in tbf} == {config.VETH_HOST, config.VETH_NS}
    assert tbf[1][:4] == ["ip", "netns", "exec", config.NETNS]  # the storage end, inside the namespace
    netem = [c for c in link.up_commands(cfg, 0.3) if "qdisc" in c]
    assert all(c[c.index("root") + 1 :][:3] == ["netem", "delay", "0.3ms"] and "250mbit" in c for c in netem)


def test_delay_resolution_names_the_missing_qdisc() -> None:
    assert link.resolve_delay(LabConfig(), netem=True) == (link.DEFAULT_DELAY_MS, "")
    delay, note = link.resolve_delay(LabConfig(), netem=False)
    assert delay is None and "sch_netem" in note
    assert link.resolve_delay(LabConfig(delay_ms=0), netem=True)[0] is None
    with pytest.raises(LabUnavailable, match="sch_netem"):
        link.resolve_delay(LabConfig(delay_ms=0.5), netem=False)


def test_link_down_deletes_the_veth_before_the_namespace() -> None:
    assert link.down_commands() == [
        ["ip", "link", "del", config.VETH_HOST],
        ["ip", "netns", "del", config.NETNS],
    ]


def test_sshd_listens_on_the_namespace_address_only_with_keys_only(tmp_path: Path) -> None:
    text = storage.sshd_config_text(tmp_path, "169.254.1.2")
    lines = set(text.splitlines())
    assert "ListenAddress 169.254.1.2" in lines and "PasswordAuthentication no" in lines
    assert "AllowTcpForwarding no" in lines and "ForceCommand internal-sftp" in lines
    argv = storage.sshd_command(tmp_path)
    assert argv[:4] == ["ip", "netns", "exec", config.NETNS] and "-D" in argv


def test_sshfs_reads_over_the_network_every_time(tmp_path: Path) -> None:
    argv = storage.sshfs_command(tmp_path, "169.254.1.2", Path("/s"), Path("/m"))
    assert argv[:3] == ["sshfs", "root@169.254.1.2:/s", "/m"]
    opts = argv[argv.index("-o") + 1].split(",")
    for opt in ("direct_io", "Compression=no", "StrictHostKeyChecking=yes", "attr_timeout=0"):
        assert opt in opts


def test_engine_commands(tmp_path: Path) -> None:
    from kvbench.lab.engines import connector_command, server_command

    cfg = LabConfig(port_base=9000, slots=3)
    argv = server_command(cfg, 1, tmp_path / "g4", tmp_path / "m.gguf")
    assert argv[argv.index("--slot-save-path") + 1] == str(tmp_path / "g4")
    assert argv[argv.index("--cache-ram") + 1] == "0"  # a G4 hit must not come from a RAM copy
    assert argv[argv.index("--port") + 1] == "9012" and argv[argv.index("-np") + 1] == "3"
    conn = connector_command(cfg, 1, tmp_path / "g4", tmp_path)
    assert conn[conn.index("--port") + 1] == "9002"
    assert conn[conn.index("--upstream") + 1] == "http://127.0.0.1:9012"
    assert names_lab(conn, tmp_path)  # how `lab down` finds it after a crash


def _state(root: Path) -> LabState:
    cfg = LabConfig()
    shape = LinkShape(rate_mbit=400, delay_ms=None, qdisc="tbf", host_addr=cfg.host_addr,
                      ns_addr=cfg.ns_addr, note="no netem")  # fmt: skip
    eng = EngineInfo(name="a", url="http://127.0.0.1:8471", raw_url="http://127.0.0.1:8481",
                     server_pid=11, connector_pid=12, log="x")  # fmt: skip
    return LabState(config=cfg, started_at="t", step="ready", link=shape, read_mbit=300.0,
                    write_mbit=310.0, engines=[eng], mounts={"g4": str(root / "mnt/g4")})  # fmt: skip


def test_state_file_round_trip_and_garbage(tmp_path: Path) -> None:
    state = _state(tmp_path)
    save_state(state, tmp_path)
    assert load_state(tmp_path) == state
    (tmp_path / "state.json").write_text("{not json")
    assert load_state(tmp_path) is None
    assert load_state(tmp_path / "absent") is None


def test_state_updates_stay_strict(tmp_path: Path) -> None:
    state = _state(tmp_path)
    assert state.with_(step="x").step == "x"
    with pytest.raises(ValueError):
        state.with_(step=3)


def test_manifest_only_for_lab_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kvbench.lab.manifest import BANNER, lab_manifest

    monkeypatch.setenv("KVBENCH_LAB_DIR", str(tmp_path))
    assert lab_manifest("http://127.0.0.1:8471") is None  # no lab
    save_state(_state(tmp_path), tmp_path)
    got = lab_manifest("http://127.0.0.1:8471/", None)
    assert got is not None and got["banner"] == BANNER
    assert got["link"]["rate_mbit"] == 400 and got["unloaded_read_mbit"] == 300.0
    assert got["engines"][0]["via"] == "g4-connector"
    assert lab_manifest("http://127.0.0.1:8481")["engines"][0]["via"] == "llama-server"  # type: ignore[index]
    assert lab_manifest("http://10.0.0.1:8000") is None


def test_report_banner_says_lab_not_production() -> None:
    from kvbench.lab.manifest import BANNER
    from kvbench.report.core.manifest import RunManifest
    from kvbench.report.summary import simulated_banner
    from kvbench.results import load_manifest

    fixture = (
        Path(__file__).resolve().parents[1] / "data" / "fixture_runs" / "20261130T141500Z-throughput-7b2e90"
    )
    lab = {"banner": BANNER, "engines": [], "link": {}, "file_service": "sshfs"}
    run = RunManifest(load_manifest(fixture).replace(simulated=False, lab=lab))
    assert "not on production hardware" in (simulated_banner(run) or "")


def test_plan_down_order(tmp_path: Path) -> None:
    found = Found(netns=True, veth=True, mounts=("/l/mnt/g4",), ns_pids=(5, 6), host_pids=(7,),
                  fuse_pids=(8,), dir_exists=True)  # fmt: skip
    steps = [(s.action, s.target) for s in plan_down(found, tmp_path)]
    assert steps == [
        ("stop", "7"),  # engines first: they hold files open on the mount
        ("unmount", "/l/mnt/g4"),
        ("stop", "8"),
        ("stop", "5"),
        ("stop", "6"),
        ("run", config.VETH_HOST),
        ("run", config.NETNS),
        ("rmtree", str(tmp_path)),
    ]
    assert plan_down(Found(), tmp_path) == []
    only_ns = plan_down(Found(netns=True), tmp_path)
    assert [s.argv for s in only_ns] == [("ip", "netns", "del", config.NETNS)]


def test_leftovers_name_every_piece() -> None:
    found = Found(netns=True, veth=True, mounts=("/m",), ns_pids=(1,), host_pids=(2,), fuse_pids=(3,))
    text = "; ".join(found.leftovers())
    for word in (config.NETNS, "veth", "/m", "process 1", "process 2", "process 3"):
        assert word in text


def test_names_lab_matches_paths_inside_the_dir_only(tmp_path: Path) -> None:
    root = tmp_path / "lab"
    assert names_lab(["sshfs", "x", "-o", f"IdentityFile={root}/client_key"], root)
    assert names_lab(["llama-server", "--slot-save-path", f"{root}/mnt/g4"], root)
    assert not names_lab(["grep", str(tmp_path / "lab2")], root)
    assert not names_lab(["python", "-m", "pytest"], root)


def test_not_root_is_one_line_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(UsageError) as err:
        require_root()
    assert err.value.exit_code == 2 and "root" in err.value.message


@pytest.mark.parametrize("cmd", ["up", "status", "down"])
def test_cli_refuses_without_root(
    cmd: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kvbench import cli

    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # CI runs as root: pretend a user ran it
    monkeypatch.setattr(sys, "argv", ["kvbench", "lab", cmd])
    with pytest.raises(SystemExit) as done:
        cli.main()
    assert done.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs root" in err[0], err


def test_cli_lists_the_lab_commands() -> None:
    out = subprocess.run([sys.executable, "-m", "kvbench", "lab", "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0
    for cmd in ("up", "status", "down"):
        assert cmd in out.stdout
