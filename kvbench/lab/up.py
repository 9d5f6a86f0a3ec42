"""`kvbench lab up`: build the lab piece by piece, recording each in the state file as it goes.

Order: refuse early (not root, a program or kernel feature missing: named exactly), clear a half-
built lab left by a crash, then link -> file server -> mounts -> measured link throughput (before
anything else loads the CPU) -> noise receivers -> engines. If any step fails, everything made so
far is removed again (`lab down`'s own code), so a failed `up` leaves nothing behind either.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

from kvbench.errors import UsageError
from kvbench.lab.config import EngineInfo, LabConfig, LabState, load_state, save_state, state_dir
from kvbench.lab.down import discover, lab_down
from kvbench.lab.engines import start_engines
from kvbench.lab.link import link_up
from kvbench.lab.sink import start_sinks
from kvbench.lab.storage import make_keys, measure, mount, start_sshd, write_noise_file
from kvbench.lab.system import LabUnavailable, netem_available, require_root, unavailable_reason

Say = Callable[[str], None]


def preflight() -> None:
    require_root()
    reason = unavailable_reason()
    if reason:
        raise LabUnavailable(f"this machine cannot host the lab: {reason}")


def lab_up(cfg: LabConfig, say: Say, *, engines: bool = True) -> LabState:
    preflight()
    root = state_dir()
    previous = load_state(root)
    if previous is not None and previous.step == "ready" and discover(root, previous).leftovers():
        raise UsageError("the lab is already up (kvbench lab status); run `kvbench lab down` first")
    if discover(root, previous).leftovers() or root.exists():
        say("removing what a previous lab left behind")
        lab_down(root, previous)
    root.mkdir(parents=True)
    (root / "logs").mkdir()
    state = LabState(config=cfg, started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
    save_state(state, root)
    try:
        return _build(cfg, root, state, say, engines)
    except BaseException:
        say("lab up failed: removing what it made")
        try:
            lab_down(root, load_state(root))
        except Exception as exc:  # the original failure matters more; say what is left
            say(f"cleanup after the failure was incomplete: {exc}")
        raise


def _build(cfg: LabConfig, root: Path, state: LabState, say: Say, with_engines: bool) -> LabState:
    def step(name: str, **update: object) -> LabState:
        nonlocal state
        state = state.with_(step=name, **update)
        save_state(state, root)
        return state

    netem = cfg.delay_ms != 0 and netem_available()
    link = link_up(cfg, netem)
    delay = f"{link.delay_ms:g} ms" if link.delay_ms is not None else f"unshaped ({link.note})"
    say(f"link: {link.host_addr} <-> {link.ns_addr}, {link.rate_mbit:g} Mbit/s per direction, delay {delay}")
    step("link", link=link)

    store = root / "store"
    store.mkdir()
    make_keys(root, cfg.ns_addr)
    sshd = start_sshd(root, cfg.ns_addr, root / "logs")
    step("sshd", sshd_pid=sshd, store=str(store))
    write_noise_file(store)
    mounts = {"g4": root / "mnt" / "g4", "neighbour": root / "mnt" / "neighbour"}
    for role in ("g4", "neighbour"):  # one sshfs process and one ssh (TCP) connection each
        mount(root, cfg.ns_addr, store, mounts[role])
        step(f"mount {role}", mounts={**state.mounts, role: str(mounts[role])})
    say(f"G4: sshfs root@{cfg.ns_addr}:{store} on {mounts['g4']} (neighbour: {mounts['neighbour']})")

    write_mbit, read_mbit = measure(mounts["g4"])
    say(f"G4 throughput on the unloaded link: read {read_mbit:g} Mbit/s, write {write_mbit:g} Mbit/s")
    step("measured", read_mbit=read_mbit, write_mbit=write_mbit)

    sinks = start_sinks(cfg.ns_addr, root)
    step(
        "sinks",
        sink=sinks["sink"][0],
        iperf3=sinks["iperf3"][0] if "iperf3" in sinks else None,
        pids={role: pid for role, (_addr, pid) in sinks.items()},
    )
    say("noise receivers: " + ", ".join(f"{role} {addr}" for role, (addr, _pid) in sinks.items()))

    engines: list[EngineInfo] = []
    if not with_engines:
        return step("ready")

    def record(info: EngineInfo) -> None:
        step(f"engine {info.name}", engines=[*engines, info])

    engines = start_engines(cfg, mounts["g4"], root, say, record)
    return step("ready", engines=engines)
