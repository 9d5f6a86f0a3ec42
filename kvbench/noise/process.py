"""Local child processes as noise generators: find the tool, stop it for sure, read its output.

Shared by the backends that run programs on this machine (tcp senders, iperf3, fio). The stop is
the part that matters: ask first (close stdin, or the tool's own signal: fio and iperf3 print their
final JSON on SIGINT), then SIGTERM, then SIGKILL, and always reap, so that no process outlives
the phase, whether it ended, raised or was cancelled. Every wait is bounded.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import re
import shutil
import signal
from typing import Any

from kvbench.errors import UsageError
from kvbench.noise.backend import NoiseBackend

STOP_GRACE_S = 2.0  # after EOF / SIGINT, before SIGTERM
KILL_GRACE_S = 1.0  # after SIGTERM, before SIGKILL
EARLY_FAIL_S = 0.3  # watch this long for a tool that fails at once (bad option, refused)
MAX_CHILD_OUTPUT = 64 * 1024 * 1024  # bound on what we buffer from a tool's stdout


def split_host_port(text: str, default_port: int | None, field_name: str) -> tuple[str, int | None]:
    """'host:port', '[v6]:port' or (with a default port) 'host'."""
    m = re.fullmatch(r"\[([^\]]+)\](?::(\d+))?|([^:\s\[\]]+)(?::(\d+))?", text.strip())
    if not m:
        raise UsageError(f"{field_name}: '{text}' is not host:port")
    host = m.group(1) or m.group(3)
    port_text = m.group(2) or m.group(4)
    if port_text is None:
        if default_port is None:
            raise UsageError(f"{field_name}: '{text}' needs a port (host:port)")
        return host, None
    port = int(port_text)
    if not 0 < port < 65536:
        raise UsageError(f"{field_name}: port {port} out of range")
    return host, port


def require_program(kind: str, program: str) -> str:
    path = shutil.which(program)
    if path is None:
        raise UsageError(
            f"noise.kind={kind}: the {program} program is not installed (Debian: apt-get install {program})"
        )
    return path


async def wait_exit(proc: asyncio.subprocess.Process, timeout: float) -> bool:
    try:
        await asyncio.wait_for(proc.wait(), timeout)
    except TimeoutError:
        return False
    return True


async def stop_processes(
    procs: list[asyncio.subprocess.Process], first_signal: int | None, grace: float
) -> None:
    """Ask (close stdin, or `first_signal`), then SIGTERM, then SIGKILL; always reaps."""
    for p in procs:
        if p.returncode is None:
            if first_signal is None:
                if p.stdin is not None and not p.stdin.is_closing():
                    p.stdin.close()
            else:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(first_signal)
    for sig, wait in ((None, grace), (signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 5.0)):
        alive = [p for p in procs if p.returncode is None]
        if not alive:
            return
        if sig is not None:
            for p in alive:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(sig)
        await asyncio.gather(*(wait_exit(p, wait) for p in alive))


def kill_now(procs: list[asyncio.subprocess.Process]) -> None:
    """Last resort when the orderly stop itself was cancelled."""
    for p in procs:
        if p.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                p.kill()


async def cancel_tasks(tasks: list[asyncio.Task[Any]]) -> None:
    for t in tasks:
        t.cancel()
    for t in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await t


async def drain(stream: asyncio.StreamReader | None, limit: int = 4096) -> bytes:
    """Read a stream to EOF, keeping at most its first `limit` bytes."""
    if stream is None:
        return b""
    kept = b""
    while chunk := await stream.read(65536):
        if len(kept) < limit:
            kept += chunk[: limit - len(kept)]
    return kept


class ProcessNoise(NoiseBackend):
    """A backend whose generators are local child processes: one stop() for all of them.

    Subclasses start their processes in start() (appending to `procs`, their reader tasks to
    `tasks`) and implement `_stop()`: the orderly stop. If that itself fails or is cancelled,
    every process is killed at once.
    """

    procs: list[asyncio.subprocess.Process]
    tasks: list[asyncio.Task[Any]]

    @abc.abstractmethod
    async def _stop(self) -> None:
        """Stop the processes the kind's way, reap them, fill the handle."""

    async def stop(self) -> None:
        try:
            await self._stop()
        except BaseException:
            kill_now(self.procs)
            raise
        finally:
            self.handle.active = False
            if self.handle.stopped_ns is None:
                self.handle.stopped_ns = self.handle.now_ns()
