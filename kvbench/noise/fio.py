"""kind: fio, storage contention: one `fio --output-format=json --status-interval=1` process.

fio contends on the path given: a directory gets fio's own files (removed at the end,
--unlink=1); an existing file is only read (a write mode refuses to overwrite it). Its status
report every second becomes a row; the last report, printed on SIGINT, gives the totals. fio may
take seconds to unlink its files, hence its longer stop grace.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvbench.errors import UsageError
from kvbench.noise.backend import NoiseContext
from kvbench.noise.handle import NoiseHandle
from kvbench.noise.process import (
    EARLY_FAIL_S,
    MAX_CHILD_OUTPUT,
    ProcessNoise,
    cancel_tasks,
    drain,
    require_program,
    stop_processes,
    wait_exit,
)

if TYPE_CHECKING:
    from kvbench.scenario import FioNoise

FIO_STOP_GRACE_S = 10.0  # fio unlinks its files and prints its last JSON on SIGINT
_FIO_WRITES = {"write", "randwrite", "rw", "randrw"}
_JSON_START = re.compile(rb"^\{", re.M)


class FioNoiseBackend(ProcessNoise):
    """kind: fio: one fio process with group reporting; a row per status report."""

    def __init__(self, cfg: FioNoise, ctx: NoiseContext) -> None:
        self.program = require_program("fio", "fio")
        path = Path(cfg.path).expanduser()
        if path.is_dir():
            self.target_args = [f"--directory={path}", "--unlink=1"]  # fio's own files, removed at the end
        elif path.exists():
            if cfg.rw in _FIO_WRITES:
                raise UsageError(
                    f"noise.path: rw={cfg.rw} would overwrite {path}; give a directory for write modes"
                )
            self.target_args = [f"--filename={path}"]
        else:
            raise UsageError(f"noise.path: {path} does not exist")
        self.cfg = cfg
        self.client = f"fio:{path}"
        self.handle = ctx.handle("fio", cfg)
        self.procs = []
        self.tasks = []
        self.last_report: dict[str, Any] | None = None
        self._last_bytes = 0
        self._last_ns = 0
        self._stderr = b""

    def command(self) -> list[str]:
        cfg = self.cfg
        return [
            self.program,
            "--name=kvbench-noise",
            "--output-format=json",
            "--status-interval=1",
            "--time_based",
            f"--runtime={max(1, math.ceil(cfg.max_duration_s))}",
            f"--rw={cfg.rw}",
            f"--bs={cfg.block_size}",
            f"--numjobs={cfg.jobs}",
            f"--size={cfg.size}",
            "--group_reporting",
            *self.target_args,
        ]

    async def start(self) -> NoiseHandle:
        proc = await asyncio.create_subprocess_exec(
            *self.command(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        self.procs = [proc]
        self.handle.started_ns = self._last_ns = self.handle.now_ns()
        self.handle.active = True
        self.tasks = [asyncio.create_task(self._read(proc)), asyncio.create_task(self._read_stderr(proc))]
        # a bad option or path makes fio exit at once: refuse to start rather than run quiet
        if await wait_exit(proc, EARLY_FAIL_S) and self.last_report is None:
            await asyncio.gather(*self.tasks, return_exceptions=True)
            self.handle.active = False
            lines = self._stderr.decode(errors="replace").strip().splitlines()
            raise UsageError(f"noise: fio exited {proc.returncode}: {lines[-1] if lines else 'no output'}")
        return self.handle

    async def _read_stderr(self, proc: asyncio.subprocess.Process) -> None:
        self._stderr = await drain(proc.stderr)

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        buf = b""
        dec = json.JSONDecoder()
        while chunk := await proc.stdout.read(65536):
            buf += chunk
            while (m := _JSON_START.search(buf)) is not None:
                text = buf[m.start() :].decode(errors="replace")
                try:
                    obj, end = dec.raw_decode(text)
                except json.JSONDecodeError:
                    break  # incomplete: wait for more
                buf = text[end:].encode()
                if isinstance(obj, dict):
                    self._on_report(obj)
            if len(buf) > MAX_CHILD_OUTPUT:
                buf = b""

    def sample_bytes(self) -> int | None:
        return self._io_bytes(self.last_report or {})

    @staticmethod
    def _io_bytes(report: dict[str, Any]) -> int:
        total = 0
        for job in report.get("jobs") or []:
            for d in ("read", "write", "trim"):
                total += int((job.get(d) or {}).get("io_bytes", 0))
        return total

    def _on_report(self, report: dict[str, Any]) -> None:
        self.last_report = report
        now = self.handle.now_ns()
        cur = self._io_bytes(report)
        dt = (now - self._last_ns) / 1e9
        if dt > 0 and (dt >= 0.05 or cur > self._last_bytes):
            self.handle.record(now, dt, {self.client: cur - self._last_bytes}, full=dt >= 0.5)
            self._last_bytes, self._last_ns = cur, now

    async def _stop(self) -> None:
        self.handle.stopped_ns = self.handle.now_ns()
        await stop_processes(self.procs, signal.SIGINT, FIO_STOP_GRACE_S)
        try:
            await asyncio.wait_for(asyncio.gather(*self.tasks, return_exceptions=True), 5.0)
        except TimeoutError:
            await cancel_tasks(self.tasks)
        h = self.handle
        rep = self.last_report or {}
        h.total_bytes = self._io_bytes(rep)
        jobs = rep.get("jobs") or [{}]
        job_err = jobs[0].get("error", 0) if jobs else 0
        proc = self.procs[0]
        error: str | None = None
        if not rep:
            lines = self._stderr.decode(errors="replace").strip().splitlines()
            error = f"fio exited {proc.returncode} without a report: {lines[-1] if lines else 'no output'}"
        elif job_err:
            error = f"fio job error {job_err}"
        if error:
            h.problems.append(error)
        h.clients.append(
            {
                "client": self.client,
                "bytes": h.total_bytes,
                "read_bw_bytes": sum(int((j.get("read") or {}).get("bw_bytes", 0)) for j in jobs),
                "write_bw_bytes": sum(int((j.get("write") or {}).get("bw_bytes", 0)) for j in jobs),
                "error": error,
            }
        )
