"""Run the mock as a CHILD PROCESS: ``async with spawned_mock("ci") as mock: ...``.

The child is ``python -m kvbench.mock serve --port 0 --announce --exit-on-stdin-eof``;
it prints one JSON line once listening, which gives the URL. It exits when asked
(SIGTERM, then SIGKILL after a grace period), and on its own when this process dies
(its stdin, a pipe from us, closes), so no stray process is left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import IO, Any

from kvbench.errors import KvbenchError
from kvbench.mock.faults import FaultConfig


def fault_flags(faults: FaultConfig | dict[str, Any] | Sequence[str] | None) -> list[str]:
    """`--fault` flag values for a FaultConfig, a dict of its fields, or flags as they are."""
    if faults is None:
        return []
    if isinstance(faults, FaultConfig):
        faults = faults.model_dump(exclude_defaults=True)
    if isinstance(faults, dict):
        return [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in faults.items()]
    return [str(f) for f in faults]


class SpawnedMock:
    """Handle of a spawned mock: base_url, fabric_address, profile_name, time_scale, pid; restart, stop."""

    def __init__(
        self,
        args: list[str],
        host: str,
        fabric_port: int | None,
        startup_timeout_s: float,
        stop_timeout_s: float,
    ) -> None:
        self._args = args
        self.host = host
        self._fabric_port = fabric_port
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.base_url = ""
        self.port: int | None = None
        self.fabric_address: tuple[str, int] | None = None
        self.profile_name = ""
        self.time_scale: float | None = None  # the profile's, after --set overrides (None: fixed-delay)
        self.pid = 0
        self.process: asyncio.subprocess.Process | None = None
        self._stderr: IO[bytes] | None = None

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        lines = self._stderr.read().decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else ""

    async def start(self, port: int = 0) -> None:
        args = [*self._args, "--port", str(port)]
        if self._fabric_port is not None:
            args += ["--fabric-port", str(self._fabric_port)]
        if self._stderr is not None:
            self._stderr.close()
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.process = proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "kvbench.mock",
            "serve",
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=self._stderr,
            env=env,
        )
        assert proc.stdout is not None
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), self.startup_timeout_s)
            info = json.loads(line)
        except (TimeoutError, ValueError):
            await self.stop()
            raise KvbenchError(f"mock did not start: {self._stderr_tail() or 'no announce line'}") from None
        self.base_url = info["base_url"]
        self.port = int(self.base_url.rsplit(":", 1)[1])
        self.profile_name = info["profile"]
        self.time_scale = info.get("time_scale")
        self.pid = int(info["pid"])
        if info.get("fabric_port") is not None:
            self.fabric_address = (self.host, int(info["fabric_port"]))
            self._fabric_port = int(info["fabric_port"])

    async def restart(self) -> None:
        """Stop and start again with the same arguments (same persist dir), on the same port
        if it is free again, else on a new one (base_url then changes)."""
        old_port = self.port or 0
        await self.stop()
        try:
            await self.start(old_port)
        except KvbenchError:
            if self._fabric_port is not None:
                self._fabric_port = 0
            await self.start(0)

    async def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is None:
            return
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), self.stop_timeout_s)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        if proc.stdin is not None:
            proc.stdin.close()
        if proc._transport is not None:  # type: ignore[attr-defined]
            proc._transport.close()  # type: ignore[attr-defined]

    def close(self) -> None:
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


@contextlib.asynccontextmanager
async def spawned_mock(
    profile: str = "ci",
    host: str = "127.0.0.1",
    ground_truth: str | Path | None = None,
    fabric_port: int | None = None,
    faults: FaultConfig | dict[str, Any] | Sequence[str] | None = None,
    persist_dir: str | Path | None = None,
    extra_args: Sequence[str] = (),
    *,
    startup_timeout_s: float = 30.0,
    stop_timeout_s: float = 5.0,
) -> AsyncIterator[SpawnedMock]:
    """Start the mock in a child process, yield its handle, and always stop it."""
    args = ["--profile", profile, "--host", host, "--announce", "--exit-on-stdin-eof"]
    if ground_truth is not None:
        args += ["--ground-truth", str(ground_truth)]
    if persist_dir is not None:
        args += ["--persist-dir", str(persist_dir)]
    for flag in fault_flags(faults):
        args += ["--fault", flag]
    args += list(extra_args)
    handle = SpawnedMock(args, host, fabric_port, startup_timeout_s, stop_timeout_s)
    try:
        await handle.start(0)
        yield handle
    finally:
        await handle.stop()
        handle.close()
