"""The kvbench lab end to end, on real parts: `kvbench lab up`, the three lab scenarios through
`kvbench run`, `kvbench lab down`, then a check that nothing is left.

Real engine (llama-server, tiny seeded model), real network stack (veth in a namespace, tc-shaped),
real remote file system (sshfs to an sshd in the namespace), real competing traffic (fio reading
through a second mount over the same link). Root only; a machine without a needed program or
kernel feature skips with that missing piece named.
"""

from __future__ import annotations

import os
import random
import socket
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from engine_e2e import ROOT, Run, check_all_ok, kvbench_run, say

from kvbench.engines.install import Installed
from kvbench.lab.config import LabState, load_state, state_dir
from kvbench.lab.down import discover

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# Quiet vs noisy G4-restored TTFT: fio's 4 jobs keep the neighbour's ssh connection full, and
# TCP shares the shaped link about evenly between it and G4's connection, so a restore takes at
# least twice as long (measured 2-3x TTFT). 1.5x is a margin the link makes certain, with 16
# requests per phase so the noise's first second (fio opening its file) cannot move the median.
NOISY_MARGIN = 1.5


def lab_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "kvbench", "lab", *args]
    say("$ kvbench lab " + " ".join(args))
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    for line in (proc.stdout + proc.stderr).strip().splitlines()[-14:]:
        say("  " + line)
    return proc


def free_port_base() -> int:
    """A base whose four lab ports (+1, +2, +11, +12) are free on 127.0.0.1 right now."""
    for _ in range(50):
        base = random.randrange(20000, 60000, 100)
        try:
            for off in (1, 2, 11, 12):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", base + off))
        except OSError:
            continue
        return base
    raise RuntimeError("no free port base")


def nothing_left() -> list[str]:
    found = discover(state_dir(), None)
    left = found.leftovers()
    if found.dir_exists:
        left.append(f"directory {state_dir()}")
    qdiscs = subprocess.run(["tc", "qdisc", "show"], capture_output=True, text=True).stdout
    left += [f"qdisc: {ln}" for ln in qdiscs.splitlines() if "kvlab" in ln]
    mounts = Path("/proc/mounts").read_text()
    left += [f"mount: {ln}" for ln in mounts.splitlines() if str(state_dir()) in ln]
    return left


@pytest.fixture(scope="module")
def lab(llamacpp_installed: Installed) -> Iterator[LabState]:
    if os.geteuid() != 0:
        pytest.skip("kvbench lab needs root")
    from kvbench.lab.system import unavailable_reason

    reason = unavailable_reason()
    if reason:
        say(f"SKIP lab: {reason}")
        pytest.skip(f"this machine cannot host the lab: {reason}")
    if load_state() is not None or discover(state_dir(), None).leftovers():
        pytest.skip("a kvbench lab is already up on this machine (kvbench lab down, then rerun)")
    try:
        up = lab_cli("up", "--port-base", str(free_port_base()))
        assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
        state = load_state()
        assert state is not None and state.step == "ready" and len(state.engines) == 2
        yield state
    finally:
        lab_cli("down")  # a safety net: idempotent, also when test_lab_down already ran


def g4_delta(run: Run, phase: str, name: str) -> float:
    return run.delta(phase, f"kvbench_lab_g4_{name}_total")


def test_lab_status_shows_every_piece(lab: LabState) -> None:
    out = lab_cli("status")
    assert out.returncode == 0, out.stdout
    text = out.stdout
    qdisc = "qdisc tbf" if lab.link and lab.link.qdisc == "tbf" else "qdisc netem"
    pieces = ["namespace up", qdisc, "mount g4", "(mounted)", "noise sink", "status: up"]
    for piece in [*pieces, lab.engines[0].url, lab.engines[1].url]:
        assert piece in text, piece
    assert lab.read_mbit and lab.read_mbit > 0.3 * lab.config.rate_mbit
    assert lab.read_mbit < 1.1 * lab.config.rate_mbit  # the shaping holds: reads cannot beat the link
    say(
        f"link {lab.config.rate_mbit:g} Mbit/s: unloaded G4 read {lab.read_mbit} Mbit/s, "
        f"write {lab.write_mbit}"
    )


def test_ttft_lab_g4_restore_beats_cold_prefill(lab: LabState, run_dir: Path) -> None:
    run = Run(kvbench_run("ttft-lab", lab.engines[0].raw_url, run_dir))
    check_all_ok(run)
    assert run.manifest["lab"]["banner"].startswith("measured on the kvbench lab")
    assert run.manifest["lab"]["link"]["rate_mbit"] == lab.config.rate_mbit
    steps = run.manifest["ttft_steps"]
    lines = []
    for s in steps:
        assert s["verified"] is True and s["n_restored"] >= 0.9 * s["tokens"]
        g4 = s["warm_ttft_s"] + s["restore_client_ms"] / 1000
        lines.append(
            f"{s['tokens']:>6} tokens: cold {s['cold_ttft_s'] * 1000:7.1f} ms, "
            f"G4-restored {g4 * 1000:7.1f} ms "
            f"(restore {s['restore_client_ms']:.1f} ms of {s['bytes_read'] / 2**20:.1f} MiB), "
            f"RAM {s['warm_ttft_s'] * 1000:6.1f} ms"
        )
    for line in lines:
        say(line)
    longest = max(steps, key=lambda s: s["tokens"])
    g4 = longest["warm_ttft_s"] + longest["restore_client_ms"] / 1000
    assert g4 < longest["cold_ttft_s"], lines[-1]
    assert longest["warm_ttft_s"] < g4  # RAM beats G4: the restore really crossed the link
    # the restore moved the slot file over the shaped link: it cannot beat the link's rate
    link_s = longest["bytes_read"] * 8 / (lab.config.rate_mbit * 1e6)
    assert longest["restore_client_ms"] / 1000 >= 0.9 * link_s, (longest["restore_client_ms"], link_s)


def test_persistence_lab_instance_b_restores_what_a_saved(lab: LabState, run_dir: Path) -> None:
    a, b = lab.engines
    run = Run(kvbench_run("persistence-lab", a.url, run_dir, "--set", f"between_phases.base_url={b.url}"))
    check_all_ok(run)
    assert run.manifest["target"]["base_url_after"] == b.url
    on_b = run.rows(phase="after-restart")
    assert on_b, {r["phase"] for r in run.requests}
    for r in on_b:  # B never computed these prompts: every one's KV came from A's files on G4
        assert r["cached_tokens"] >= 0.9 * r["prompt_tokens_server"], r
    assert g4_delta(run, "after-restart", "hits") == len(on_b)
    assert g4_delta(run, "after-restart", "misses") == 0
    assert g4_delta(run, "cached", "saves") >= 4  # A wrote each prompt through to G4
    say(
        f"persistence: B restored {len(on_b)}/{len(on_b)} requests from A's G4 files, "
        f"cached {sum(r['cached_tokens'] for r in on_b)} of "
        f"{sum(r['prompt_tokens_server'] for r in on_b)} tokens"
    )


def _ttfts(run: Run, phase: str) -> list[float]:
    return [r["ttft_ms"] for r in run.rows(phase=phase)]


# two TCP flows on one shaped link share it as TCP's congestion control decides, run by run
@pytest.mark.timing
def test_throughput_lab_noisy_neighbour_slows_g4(lab: LabState, run_dir: Path) -> None:
    run = Run(kvbench_run("throughput-lab", lab.engines[0].url, run_dir, "--noisy"))
    check_all_ok(run)
    phases = {p["name"]: p for p in run.manifest["phases"]}
    quiet, noisy = _ttfts(run, "quiet-1"), _ttfts(run, "noisy-1")
    assert quiet and noisy
    for phase in ("quiet-1", "noisy-1"):  # the measured load read its KV from G4, every request
        rows = run.rows(phase=phase)
        assert g4_delta(run, phase, "hits") == len(rows) and g4_delta(run, phase, "misses") == 0
        for r in rows:
            assert r["cached_tokens"] >= 0.9 * r["prompt_tokens_server"], r
    noise: dict[str, Any] = phases["noisy-1"]["noise"]
    rate_mbit = noise["mean_bytes_per_s"] * 8 / 1e6
    q, n = statistics.median(quiet), statistics.median(noisy)
    say(
        f"throughput-lab: G4-restored TTFT median quiet {q:.0f} ms, noisy {n:.0f} ms ({n / q:.2f}x); "
        f"noise (fio via the neighbour mount) {rate_mbit:.0f} Mbit/s "
        f"on a {lab.config.rate_mbit:g} Mbit/s link"
    )
    assert noise["kind"] == "fio" and noise["total_bytes"] > 0
    assert rate_mbit > 0.3 * lab.config.rate_mbit, noise  # the neighbour really loaded the link
    assert n >= NOISY_MARGIN * q, (quiet, noisy)
    # the G4 read itself (the connector's restore, inside TTFT) slowed down: the link, not just CPU
    restore = {
        p: g4_delta(run, p, "restore_seconds") / g4_delta(run, p, "hits") for p in ("quiet-1", "noisy-1")
    }
    say(
        f"mean G4 restore: quiet {restore['quiet-1'] * 1000:.0f} ms, noisy {restore['noisy-1'] * 1000:.0f} ms"
    )
    assert restore["noisy-1"] >= NOISY_MARGIN * restore["quiet-1"], restore
    assert "lab" in run.manifest and run.manifest["lab"]["engines"][0]["via"] == "g4-connector"


def test_lab_down_leaves_nothing_behind(lab: LabState) -> None:
    down = lab_cli("down")
    assert down.returncode == 0, down.stderr
    assert nothing_left() == []
    again = lab_cli("down")  # idempotent
    assert again.returncode == 0 and "nothing to remove" in again.stdout


def test_lab_down_after_a_crash_finds_everything_by_name() -> None:
    """`up` killed before it could record anything: no state file, every piece still found."""
    from kvbench.lab.system import unavailable_reason

    if os.geteuid() != 0 or unavailable_reason():
        pytest.skip(f"this machine cannot host the lab: {unavailable_reason()}")
    up = lab_cli("up", "--no-engines", "--port-base", str(free_port_base()))
    assert up.returncode == 0, up.stderr
    (state_dir() / "state.json").unlink()  # the crash: what `up` recorded is gone
    assert discover(state_dir(), None).leftovers()  # the pieces are found by name alone
    down = lab_cli("down")
    assert down.returncode == 0, down.stderr
    assert nothing_left() == []
