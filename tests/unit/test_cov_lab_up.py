"""`kvbench lab up` without root: every step stood in by a recorder, so the order of the steps, the
state file after each, the refusal of a second `up`, the clean-up after a failed step and the CLI's
one-line errors are checked as data."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvbench.errors import UsageError
from kvbench.lab import commands, up
from kvbench.lab.config import EngineInfo, LabConfig, LabState, LinkShape, load_state, save_state
from kvbench.lab.down import Found
from kvbench.lab.system import LabError, LabUnavailable


class _Lab:
    """Stands in for the system: each step appends its name, and the state file as it was then."""

    def __init__(self, root: Path, fail_at: str | None = None) -> None:
        self.root = root
        self.fail_at = fail_at
        self.events: list[str] = []
        self.saved_steps: list[str] = []
        self.found = Found()
        self.downs: list[LabState | None] = []

    def _event(self, name: str) -> None:
        state = load_state(self.root)
        self.saved_steps.append(state.step if state else "-")
        self.events.append(name)
        if name == self.fail_at:
            raise LabError(f"{name} failed")

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("KVBENCH_LAB_DIR", str(self.root))
        monkeypatch.setattr(up, "preflight", lambda: self._event("preflight"))
        monkeypatch.setattr(up, "discover", lambda root, state: self.found)
        monkeypatch.setattr(up, "netem_available", lambda: True)

        def link_up(cfg: LabConfig, netem: bool) -> LinkShape:
            self._event("link")
            return LinkShape(
                rate_mbit=cfg.rate_mbit, delay_ms=0.2 if netem else None, qdisc="netem",
                host_addr=cfg.host_addr, ns_addr=cfg.ns_addr,
            )  # fmt: skip

        def lab_down(root: Path, state: LabState | None) -> list[str]:
            self.downs.append(state)
            return []

        def start_engines(cfg: LabConfig, g4: Path, root: Path, say: Any, record: Any) -> list[EngineInfo]:
            self._event("engines")
            info = EngineInfo(
                name="a", url="http://127.0.0.1:1", raw_url="http://127.0.0.1:2", server_pid=7,
                connector_pid=8, log=str(root / "logs" / "a.log"),
            )  # fmt: skip
            record(info)
            return [info]

        monkeypatch.setattr(up, "link_up", link_up)
        monkeypatch.setattr(up, "lab_down", lab_down)
        monkeypatch.setattr(up, "make_keys", lambda root, addr: self._event(f"keys {addr}"))
        monkeypatch.setattr(up, "start_sshd", lambda root, addr, logs: self._event("sshd") or 77)
        monkeypatch.setattr(up, "write_noise_file", lambda store: self._event("noise file"))
        monkeypatch.setattr(up, "mount", lambda root, addr, store, point: self._event(f"mount {point.name}"))
        monkeypatch.setattr(up, "measure", lambda point: self._event("measure") or (320.0, 350.0))
        monkeypatch.setattr(
            up,
            "start_sinks",
            lambda addr, root: (
                self._event("sinks") or {"sink": (f"{addr}:9000", 11), "iperf3": (f"{addr}:5201", 12)}
            ),
        )
        monkeypatch.setattr(up, "start_engines", start_engines)


def test_up_builds_in_order_and_the_state_file_follows_each_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lab = _Lab(tmp_path / "lab")
    lab.install(monkeypatch)
    said: list[str] = []
    cfg = LabConfig(rate_mbit=250, block=9)
    state = up.lab_up(cfg, said.append)
    assert lab.events == [
        "preflight", "link", "keys 169.254.9.2", "sshd", "noise file", "mount g4", "mount neighbour",
        "measure", "sinks", "engines",
    ]  # fmt: skip
    # what was on disk when each step began: one step behind at most
    assert lab.saved_steps[1:] == [
        "starting", "link", "link", "sshd", "sshd", "mount g4", "mount neighbour", "measured", "sinks",
    ]  # fmt: skip
    assert state.step == "ready" and load_state(tmp_path / "lab") == state
    assert state.sshd_pid == 77 and state.store == str(tmp_path / "lab" / "store")
    assert state.mounts == {
        "g4": str(tmp_path / "lab/mnt/g4"),
        "neighbour": str(tmp_path / "lab/mnt/neighbour"),
    }
    assert (state.read_mbit, state.write_mbit) == (350.0, 320.0)
    assert state.sink == "169.254.9.2:9000" and state.iperf3 == "169.254.9.2:5201"
    assert state.pids == {"sink": 11, "iperf3": 12}
    assert [e.name for e in state.engines] == ["a"]
    assert any("250 Mbit/s per direction, delay 0.2 ms" in line for line in said)
    assert any("read 350 Mbit/s, write 320 Mbit/s" in line for line in said)
    assert lab.downs == []  # nothing to clear, nothing failed


def test_up_without_engines_stops_after_the_receivers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lab = _Lab(tmp_path / "lab")
    lab.install(monkeypatch)
    state = up.lab_up(LabConfig(), lambda _l: None, engines=False)
    assert lab.events[-1] == "sinks" and state.step == "ready" and state.engines == []


def test_a_failed_step_removes_what_was_made_and_raises_the_original(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lab = _Lab(tmp_path / "lab", fail_at="mount neighbour")
    lab.install(monkeypatch)
    said: list[str] = []
    with pytest.raises(LabError, match="mount neighbour failed"):
        up.lab_up(LabConfig(), said.append)
    assert "measure" not in lab.events
    assert len(lab.downs) == 1
    left = lab.downs[0]
    assert left is not None and left.step == "mount g4" and list(left.mounts) == ["g4"]
    assert "lab up failed: removing what it made" in said


def test_an_incomplete_cleanup_is_said_and_the_first_failure_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lab = _Lab(tmp_path / "lab", fail_at="sshd")
    lab.install(monkeypatch)

    def broken_down(root: Path, state: LabState | None) -> list[str]:
        raise LabError("lab down left behind: mount /x")

    monkeypatch.setattr(up, "lab_down", broken_down)
    said: list[str] = []
    with pytest.raises(LabError, match="sshd failed"):
        up.lab_up(LabConfig(), said.append)
    assert said[-1] == "cleanup after the failure was incomplete: lab down left behind: mount /x"


def test_a_lab_that_is_up_is_refused_and_leftovers_are_cleared_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "lab"
    lab = _Lab(root)
    lab.install(monkeypatch)
    up.lab_up(LabConfig(), lambda _l: None)
    lab.found = Found(netns=True)
    with pytest.raises(UsageError, match="already up"):
        up.lab_up(LabConfig(), lambda _l: None)

    # a crash left a half-built lab: `up` removes it first, then builds afresh
    prev = load_state(root)
    assert prev is not None
    save_state(prev.with_(step="sshd"), root)
    said: list[str] = []
    lab.events.clear()
    lab.downs.clear()

    def clearing_down(r: Path, state: LabState | None) -> list[str]:
        lab.downs.append(state)
        shutil.rmtree(r)
        lab.found = Found()
        return []

    monkeypatch.setattr(up, "lab_down", clearing_down)
    state = up.lab_up(LabConfig(), said.append)
    assert said[0] == "removing what a previous lab left behind"
    assert [d.step if d else None for d in lab.downs] == ["sshd"]
    assert state.step == "ready"


def test_preflight_names_what_the_machine_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(up, "require_root", lambda: None)
    monkeypatch.setattr(up, "unavailable_reason", lambda: "missing: sshfs (Debian package sshfs)")
    with pytest.raises(LabUnavailable) as exc:
        up.preflight()
    assert exc.value.message == "this machine cannot host the lab: missing: sshfs (Debian package sshfs)"
    monkeypatch.setattr(up, "unavailable_reason", lambda: None)
    up.preflight()


# --- the CLI -------------------------------------------------------------------------------------


def _app() -> Any:
    import typer

    app = typer.Typer()
    commands.register(app)
    return app


@pytest.fixture
def as_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import kvbench.lab.system as system

    monkeypatch.setattr(system, "require_root", lambda: None)
    monkeypatch.setenv("KVBENCH_LAB_DIR", str(tmp_path / "lab"))


def test_up_flags_become_the_config_and_a_bad_one_names_its_flag(
    as_root: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[LabConfig, bool]] = []

    def fake_up(cfg: LabConfig, say: Any, *, engines: bool) -> LabState:
        seen.append((cfg, engines))
        info = EngineInfo(
            name="a", url="http://127.0.0.1:9", raw_url="u", server_pid=1, connector_pid=2, log="l"
        )
        return LabState(config=cfg, started_at="t", step="ready", engines=[info])

    monkeypatch.setattr(up, "lab_up", fake_up)
    got = CliRunner().invoke(_app(), ["lab", "up", "--rate-mbit", "50", "--delay-ms", "0", "--no-engines"])
    assert got.exit_code == 0, got.output
    assert seen[0][0].rate_mbit == 50 and seen[0][0].delay_ms == 0 and seen[0][1] is False
    assert "a: http://127.0.0.1:9" in got.output
    bad = CliRunner().invoke(_app(), ["lab", "up", "--rate-mbit", "0"])
    assert isinstance(bad.exception, UsageError)
    assert bad.exception.message.startswith("--rate-mbit: ")
    bad = CliRunner().invoke(_app(), ["lab", "up", "--slots", "65"])
    assert isinstance(bad.exception, UsageError) and bad.exception.message.startswith("--slots: ")


def test_status_exits_1_when_down_and_down_says_what_it_removed(
    as_root: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kvbench.lab.down as down
    import kvbench.lab.status as status

    monkeypatch.setattr(status, "status_lines", lambda root, state: (["lab: down"], False))
    got = CliRunner().invoke(_app(), ["lab", "status"])
    assert got.exit_code == 1 and "lab: down" in got.output
    monkeypatch.setattr(status, "status_lines", lambda root, state: (["lab: up"], True))
    assert CliRunner().invoke(_app(), ["lab", "status"]).exit_code == 0

    monkeypatch.setattr(down, "lab_down", lambda root, state: ["network namespace kvbench-lab", "mount /m"])
    got = CliRunner().invoke(_app(), ["lab", "down"])
    assert got.exit_code == 0 and "[lab] removed: network namespace kvbench-lab; mount /m" in got.output
    monkeypatch.setattr(down, "lab_down", lambda root, state: [])
    assert "nothing to remove" in CliRunner().invoke(_app(), ["lab", "down"]).output
