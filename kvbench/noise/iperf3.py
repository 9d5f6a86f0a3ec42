"""kind: iperf3, network noise from the standard tool: `iperf3 -c SERVER -J` per server.

Use it where iperf3 servers already run (`iperf3 -s`) or when the path to test needs iperf3's own
options. iperf3 prints its JSON only when it ends (here: on SIGINT at the end of the phase), so the
per-second rows are written then, placed in time from each client's spawn time and its interval
ends; while it runs, only the start is known (sample_bytes() is None). A client that cannot
connect fails within EARLY_FAIL_S, and the phase refuses to start rather than run quiet.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvbench.errors import UsageError
from kvbench.noise.backend import NoiseContext
from kvbench.noise.handle import NoiseHandle
from kvbench.noise.process import (
    EARLY_FAIL_S,
    MAX_CHILD_OUTPUT,
    STOP_GRACE_S,
    ProcessNoise,
    cancel_tasks,
    drain,
    kill_now,
    require_program,
    split_host_port,
    stop_processes,
)

if TYPE_CHECKING:
    from kvbench.scenario import Iperf3Noise

_RATE_UNITS = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


def parse_bitrate(text: str) -> float:
    """iperf3's -b value (bits/s, decimal units, optional /burst) -> bits/s."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(?:/\d+)?\s*", text)
    if not m:
        raise UsageError(f"noise.bitrate: '{text}' is not an iperf3 rate such as 500M or 10G")
    return float(m.group(1)) * _RATE_UNITS[m.group(2).lower()]


@dataclass
class _Iperf3Client:
    name: str
    server: str
    proc: asyncio.subprocess.Process
    spawn_ns: int
    result: dict[str, Any] | None = None
    error: str | None = None


class Iperf3NoiseBackend(ProcessNoise):
    """kind: iperf3: one `iperf3 -c` per server; rows placed in time from its JSON at the end."""

    def __init__(self, cfg: Iperf3Noise, ctx: NoiseContext) -> None:
        self.program = require_program("iperf3", "iperf3")
        self.servers = [(s, *split_host_port(s, 5201, "noise.servers")) for s in cfg.servers]
        target = None
        if cfg.bitrate is not None:
            target = parse_bitrate(cfg.bitrate) / 8 * cfg.parallel * len(cfg.servers) or None
        self.cfg = cfg
        self.handle = ctx.handle("iperf3", cfg, target)
        self.clients: list[_Iperf3Client] = []
        self.procs = []
        self.tasks = []

    def command(self, host: str, port: int | None) -> list[str]:
        cfg = self.cfg
        cmd = [self.program, "-c", host]
        if port is not None:
            cmd += ["-p", str(port)]
        cmd += ["-P", str(cfg.parallel), "-t", str(max(1, math.ceil(cfg.max_duration_s))), "-J"]
        if cfg.bitrate is not None:
            cmd += ["-b", cfg.bitrate]
        return cmd

    async def start(self) -> NoiseHandle:
        try:
            for i, (server, host, port) in enumerate(self.servers):
                proc = await asyncio.create_subprocess_exec(
                    *self.command(host, port),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                )
                self.procs.append(proc)
                self.clients.append(
                    _Iperf3Client(name=f"iperf3-{i}", server=server, proc=proc, spawn_ns=self.handle.now_ns())
                )
            self.tasks = [asyncio.create_task(self._collect(c)) for c in self.clients]
            self.handle.started_ns = self.handle.now_ns()
            self.handle.active = True
            # a client that cannot connect fails within moments: refuse to start rather than run quiet
            done, _ = await asyncio.wait(self.tasks, timeout=EARLY_FAIL_S)
            for c, t in zip(self.clients, self.tasks, strict=True):
                if t in done and c.error:
                    raise UsageError(f"noise.servers: iperf3 -c {c.server} failed: {c.error}")
        except BaseException:
            with contextlib.suppress(BaseException):
                await stop_processes(self.procs, signal.SIGINT, STOP_GRACE_S)
            kill_now(self.procs)
            await cancel_tasks(self.tasks)
            raise
        return self.handle

    async def _collect(self, c: _Iperf3Client) -> None:
        out, err = await asyncio.gather(drain(c.proc.stdout, MAX_CHILD_OUTPUT), drain(c.proc.stderr))
        await c.proc.wait()
        try:
            data = json.loads(out.decode(errors="replace")) if out.strip() else None
        except json.JSONDecodeError:
            data = None
        if isinstance(data, dict):
            c.result = data
            error = data.get("error")
            if error and "interrupt" not in str(error):  # SIGINT from us is the normal end
                c.error = str(error)
        else:
            lines = err.decode(errors="replace").strip().splitlines()
            c.error = f"exit {c.proc.returncode}: {lines[-1] if lines else 'no JSON output'}"

    async def _stop(self) -> None:
        self.handle.stopped_ns = self.handle.now_ns()
        await stop_processes(self.procs, signal.SIGINT, STOP_GRACE_S)
        try:
            await asyncio.wait_for(asyncio.gather(*self.tasks, return_exceptions=True), 5.0)
        except TimeoutError:
            await cancel_tasks(self.tasks)
        self._record()

    def _record(self) -> None:
        """iperf3 -J prints only at the end: write its per-second intervals now, placed in time."""
        h = self.handle
        series: list[list[tuple[int, float, int]]] = []  # per client: (t_ns, dt_s, bytes)
        seconds = 0.0
        for c in self.clients:
            rows: list[tuple[int, float, int]] = []
            data = c.result or {}
            for iv in data.get("intervals") or []:
                s = iv.get("sum") or {}
                dt = float(s.get("end", 0)) - float(s.get("start", 0))
                if dt > 0:
                    rows.append((c.spawn_ns + int(float(s["end"]) * 1e9), dt, int(s.get("bytes", 0))))
            series.append(rows)
            sent = (data.get("end") or {}).get("sum_sent") or {}
            nbytes = int(sent.get("bytes", sum(r[2] for r in rows)))
            seconds = max(seconds, float(sent.get("seconds", 0) or 0))
            h.total_bytes += nbytes
            h.clients.append(
                {
                    "client": c.name,
                    "server": c.server,
                    "bytes": nbytes,
                    "bits_per_second": sent.get("bits_per_second"),
                    "retransmits": sent.get("retransmits"),
                    "error": c.error,
                }
            )
            if c.error:
                h.problems.append(f"{c.name} -> {c.server}: {c.error}")
        if seconds > 0:
            h.duration_s = seconds
        for k in range(max((len(r) for r in series), default=0)):
            present = [(c, r[k]) for c, r in zip(self.clients, series, strict=True) if k < len(r)]
            t_ns = max(x[1][0] for x in present)
            dt = max(x[1][1] for x in present)
            h.record(t_ns, dt, {c.name: x[2] for c, x in present}, full=dt >= 0.5)
