"""`kvbench lab status`: what is up, checked live (not just read back from the state file)."""

from __future__ import annotations

from pathlib import Path

from kvbench.lab.config import LabState
from kvbench.lab.down import Found, cmdline, discover
from kvbench.lab.link import qdisc_line
from kvbench.redact import redact


def _proc(pid: int | None) -> str:
    if pid is None:
        return "-"
    return f"pid {pid} " + ("running" if cmdline(pid) else "NOT RUNNING")


def status_lines(root: Path, state: LabState | None) -> tuple[list[str], bool]:
    """(lines to print, whether the lab is fully up), every line redacted here: engine URLs, the
    export and the sink may carry credentials, and a caller printing or logging these lines should
    not have to know that."""
    lines, ok = _lines(root, state)
    return [redact(line) for line in lines], ok


def _lines(root: Path, state: LabState | None) -> tuple[list[str], bool]:
    found: Found = discover(root, state)
    if state is None:
        if found.leftovers():
            return ["no lab state file, but lab pieces exist: " + "; ".join(found.leftovers()),
                    "run `kvbench lab down` to remove them"], False  # fmt: skip
        return ["the lab is down (kvbench lab up starts it)"], False
    lines = [f"lab started {state.started_at}, step: {state.step}  (state: {root / 'state.json'})"]
    link = state.link
    if link is not None:
        delay = f"{link.delay_ms:g} ms" if link.delay_ms is not None else f"unshaped ({link.note})"
        lines.append(
            f"link: namespace {'up' if found.netns else 'MISSING'}, {link.host_addr} <-> {link.ns_addr}, "
            f"{link.rate_mbit:g} Mbit/s per direction, delay {delay}"
        )
        lines.append(f"  qdisc: {qdisc_line() or 'MISSING'}")
    if state.read_mbit is not None:
        lines.append(
            f"  measured unloaded: G4 read {state.read_mbit:g} Mbit/s, write {state.write_mbit:g} Mbit/s"
        )
    lines.append(f"file server: sshd in the namespace, {_proc(state.sshd_pid)}; export {state.store}")
    for role, point in state.mounts.items():
        lines.append(f"  mount {role}: {point} ({'mounted' if point in found.mounts else 'NOT MOUNTED'})")
    for e in state.engines:
        lines.append(
            f"engine {e.name}: {e.url} (G4 connector, {_proc(e.connector_pid)}) -> {e.raw_url} "
            f"(llama-server, {_proc(e.server_pid)})"
        )
    if state.sink:
        lines.append(f"noise sink: {state.sink} (kvbench noise sink, {_proc(state.pids.get('sink'))})")
    if state.iperf3:
        lines.append(f"iperf3 server: {state.iperf3} ({_proc(state.pids.get('iperf3'))})")
    ok = (
        state.step == "ready"
        and found.netns
        and found.veth
        and all(p in found.mounts for p in state.mounts.values())
        and all(cmdline(e.server_pid) and cmdline(e.connector_pid) for e in state.engines)
    )
    lines.append("status: up" if ok else "status: NOT fully up (kvbench lab down, then up)")
    return lines, ok
