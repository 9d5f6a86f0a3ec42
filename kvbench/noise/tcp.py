"""kind: tcp, kvbench's own network noise: sender processes stream zeros to TCP sinks.

Each sender is a child process (`python -S -m kvbench.noise.sender HOST PORT ...`, see sender.py:
one process per sender, so that senders use several cores and none waits for kvbench's event
loop). The sinks are `kvbench noise sink` on any machine, or the mock's fabric port, which turns
the bytes it receives into slower cache transfers. All senders connect first, then start together
on `go`; their cumulative byte counts are sampled once a second into per-sender and total rows;
they stop on EOF on stdin, then SIGTERM, then SIGKILL (process.py).

Against the embedded mock's fabric port (no targets named) with a rate, each sender declares its
share of `rate_bytes_per_s` as its offered rate (modelled bytes/s: the mock models the flow at it)
and sends only MODEL_CONFIRM_BYTES_PER_S of real bytes to confirm it is on, so the modelled noise
does not depend on how many bytes the host's spare CPU can push. Without a rate the senders run
unthrottled and the mock counts their real bytes times its noise scale.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kvbench.errors import UsageError
from kvbench.noise.backend import NoiseContext
from kvbench.noise.handle import NoiseHandle
from kvbench.noise.process import (
    STOP_GRACE_S,
    ProcessNoise,
    cancel_tasks,
    drain,
    kill_now,
    split_host_port,
    stop_processes,
)

if TYPE_CHECKING:
    from kvbench.scenario import TcpNoise

SAMPLE_INTERVAL_S = 1.0
MODEL_CONFIRM_BYTES_PER_S = 1e6  # real bytes per sender that confirm a declared flow to the mock
SENDER_CONNECT_TIMEOUT_S = 15.0  # spawn + import + connect, on a loaded 2-core box


@dataclass
class _Sender:
    name: str
    target: str
    proc: asyncio.subprocess.Process
    sent: int = 0  # cumulative, as last reported
    done: bool = False
    error: str | None = None


class TcpNoiseBackend(ProcessNoise):
    """kind: tcp: `senders` sender processes spread over the targets, sampled once a second."""

    def __init__(self, cfg: TcpNoise, ctx: NoiseContext) -> None:
        targets = list(cfg.targets) or list(ctx.default_targets)
        # no targets named: the embedded mock's fabric port, a model that takes a declared rate
        self.modelled = not cfg.targets and bool(ctx.default_targets)
        if not targets:
            raise UsageError("noise.targets: the tcp noise generator needs an explicit target (host:port)")
        self.targets = [split_host_port(t, None, "noise.targets") for t in targets]
        self.cfg = cfg
        target = cfg.rate_bytes_per_s
        if self.modelled and target:  # the real bytes aim at the confirming rate, not the modelled one
            target = cfg.senders * min(target / cfg.senders, MODEL_CONFIRM_BYTES_PER_S)
        self.handle = ctx.handle("tcp", cfg, target)
        self.senders: list[_Sender] = []
        self.procs = []
        self.tasks = []
        self._baseline: list[int] = []
        self._last: list[int] = []
        self._last_ns = 0

    async def start(self) -> NoiseHandle:
        try:
            await self._start()
        except BaseException:
            with contextlib.suppress(BaseException):
                await self._stop_senders()
            kill_now(self.procs)
            raise
        return self.handle

    def sample_bytes(self) -> int | None:
        return sum(s.sent for s in self.senders) - sum(self._baseline)

    async def _start(self) -> None:
        cfg = self.cfg
        per_sender = cfg.rate_bytes_per_s / cfg.senders if cfg.rate_bytes_per_s else 0.0
        declare = per_sender if self.modelled else 0.0
        real = min(per_sender, MODEL_CONFIRM_BYTES_PER_S) if declare else per_sender
        env = dict(os.environ)
        pkg_root = str(Path(__file__).resolve().parents[2])  # the directory that holds kvbench/
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH")) if p)
        for i in range(cfg.senders):
            host, port = self.targets[i % len(self.targets)]
            target = f"{host}:{port}"
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-S",  # no site-packages: the sender needs only the stdlib and kvbench (on PYTHONPATH)
                "-m",
                "kvbench.noise.sender",
                host,
                str(port),
                "--chunk-bytes",
                str(cfg.chunk_bytes),
                "--rate",
                repr(real),
                "--declare",
                repr(declare),
                "--max-duration",
                repr(cfg.max_duration_s),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
            )
            self.procs.append(proc)
            self.senders.append(_Sender(name=f"tcp-{i}", target=target, proc=proc))
        firsts = await asyncio.gather(*(self._first_line(s) for s in self.senders))
        failed = [(s, line) for s, line in zip(self.senders, firsts, strict=True) if line != "connected"]
        if failed:
            s, line = failed[0]
            raise UsageError(f"noise.targets: cannot stream to the tcp sink {s.target}: {line}")
        for s in self.senders:  # all connected: start them together (a started one would hog the CPU)
            assert s.proc.stdin is not None
            s.proc.stdin.write(b"go\n")
        await asyncio.gather(*(s.proc.stdin.drain() for s in self.senders if s.proc.stdin is not None))
        self._baseline = [0] * len(self.senders)
        self._last = [0] * len(self.senders)
        self.handle.started_ns = self._last_ns = self.handle.now_ns()
        self.handle.active = True
        self.tasks = [asyncio.create_task(self._read(s)) for s in self.senders]
        self.tasks.append(asyncio.create_task(self._sample()))

    async def _first_line(self, s: _Sender) -> str:
        assert s.proc.stdout is not None
        try:
            raw = await asyncio.wait_for(s.proc.stdout.readline(), SENDER_CONNECT_TIMEOUT_S)
        except TimeoutError:
            return f"the sender did not connect within {SENDER_CONNECT_TIMEOUT_S:.0f} s"
        line = raw.decode(errors="replace").strip()
        if not line:
            err = (await drain(s.proc.stderr)).decode(errors="replace").strip().splitlines()
            return f"the sender exited: {err[-1] if err else 'no output'}"
        return line.removeprefix("error ")

    async def _read(self, s: _Sender) -> None:
        assert s.proc.stdout is not None
        while line := await s.proc.stdout.readline():
            text = line.decode(errors="replace").strip()
            if text.isdigit():
                s.sent = int(text)
            elif text.startswith("error "):
                s.error = text.removeprefix("error ")
        s.done = True

    async def _sample(self) -> None:
        h = self.handle
        assert h.started_ns is not None
        start = h.started_ns
        k = 1
        # bounded: the senders stop at max_duration_s; the sampler stops with them (+ slack)
        while h.now_ns() - start < (self.cfg.max_duration_s + 5.0) * 1e9:
            delay = (start + k * SAMPLE_INTERVAL_S * 1e9 - h.now_ns()) / 1e9
            if delay > 0:
                await asyncio.sleep(delay)
            k += 1
            self._take_sample(full=True)
            if all(s.done for s in self.senders):
                h.active = False
                return

    def _take_sample(self, *, full: bool) -> None:
        now = self.handle.now_ns()
        dt = (now - self._last_ns) / 1e9
        cur = [s.sent for s in self.senders]
        per_client = {s.name: c - last for s, c, last in zip(self.senders, cur, self._last, strict=True)}
        if dt > 0:
            self.handle.record(now, dt, per_client, full=full and dt >= 0.5)
        self._last, self._last_ns = cur, now

    async def _stop_senders(self) -> None:
        await stop_processes(self.procs, None, STOP_GRACE_S)

    async def _stop(self) -> None:
        sampler = self.tasks[-1:] if self.tasks else []
        readers = self.tasks[:-1]
        stop_ns = self.handle.now_ns()  # the phase ended: from here on, stragglers only
        await cancel_tasks(sampler)
        await self._stop_senders()
        # the senders have exited: their pipes reach EOF, the readers end by themselves
        try:
            await asyncio.wait_for(asyncio.gather(*readers, return_exceptions=True), 5.0)
        except TimeoutError:
            await cancel_tasks(readers)
        errs = await asyncio.gather(*(drain(p.stderr) for p in self.procs), return_exceptions=True)
        h = self.handle
        if h.started_ns is None:
            return
        if self._last_ns:
            self._take_sample(full=False)
        h.stopped_ns = stop_ns
        h.total_bytes = sum(s.sent for s in self.senders) - sum(self._baseline)
        for s, err in zip(self.senders, errs, strict=True):
            rc = s.proc.returncode
            if s.error is None and rc not in (0, -signal.SIGTERM, -signal.SIGKILL) and isinstance(err, bytes):
                lines = err.decode(errors="replace").strip().splitlines()
                s.error = f"exit {rc}: {lines[-1] if lines else 'no output'}"
            if s.error:
                h.problems.append(f"{s.name} -> {s.target}: {s.error}")
            h.clients.append({"client": s.name, "target": s.target, "bytes": s.sent, "error": s.error})
