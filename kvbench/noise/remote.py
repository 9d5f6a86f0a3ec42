"""The noise client that runs ON a cluster node: a Ray actor around one local noise generator.

The driver's Ray backend (ray_backend.py) makes one actor of this class per client, pinned to its
node, and drives it: where() and clock() first, then start(), sample() once a second, stop().
The generator is the local backend of the same kind (tcp senders, iperf3, fio), unchanged: the
actor only carries it to another machine. So the stop is the local one (EOF, the tool's signal,
SIGTERM, SIGKILL, always reaped), run on the node.

It imports only the standard library and kvbench's noise modules: no pydantic, no scenario. The
driver validated the config; the actor gets it as a dict (`RemoteConfig` gives the generator the
attributes and `model_dump()` it reads). Ray itself is imported only inside where(), on the node.
Expected failures (no program, an unreachable sink) come back as {"error": "..."} rather than as
a remote traceback, so the manifest can say them in one line.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from pathlib import Path
from typing import Any

from kvbench.errors import KvbenchError
from kvbench.noise import LOCAL, noise_backend_factory
from kvbench.noise.backend import NoiseBackend, NoiseContext
from kvbench.noise.handle import NoiseHandle

MAX_KEPT_ROWS = 100_000  # rows kept for a generator that reports only at the end (iperf3)


class RemoteConfig:
    """A validated noise section rebuilt from its dict: attributes, and model_dump() for the handle."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = dict(data)
        for key, value in data.items():
            setattr(self, key, value)

    def model_dump(self) -> dict[str, Any]:
        return dict(self._data)


class NoiseClient:
    """One noise client (an actor on its node): a local generator started and stopped on command."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.backend: NoiseBackend | None = None
        self.handle: NoiseHandle | None = None
        self.rows: list[dict[str, Any]] = []
        self.workdir: Path | None = None  # fio in a directory: this client's own subdirectory

    def write(self, row: dict[str, Any]) -> None:
        """The local generator's rows (this actor is its RowWriter); kept for end-only kinds."""
        if len(self.rows) < MAX_KEPT_ROWS and row.get("client") != "total":
            self.rows.append(row)

    def where(self) -> dict[str, Any]:
        import ray

        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "hostname": socket.gethostname(),
            "ip": ray.util.get_node_ip_address(),
            "pid": os.getpid(),
        }

    def clock(self) -> int:
        return time.perf_counter_ns()

    async def start(self, kind: str, cfg: dict[str, Any], phase: str) -> dict[str, Any]:
        """Start the generator; {"started_ns": ...} (this node's clock) or {"error": "..."}."""
        try:
            cfg = self._own_directory(kind, cfg)
            factory = noise_backend_factory(kind, LOCAL)
            ctx = NoiseContext(phase=phase, writer=self, origin_ns=0)
            self.backend = factory(RemoteConfig(cfg), ctx)
            self.handle = await self.backend.start()
        except (KvbenchError, OSError) as exc:
            self.backend = None
            self._remove_workdir()
            return {"error": exc.message if isinstance(exc, KvbenchError) else str(exc)}
        return {"started_ns": self.handle.started_ns}

    def _own_directory(self, kind: str, cfg: dict[str, Any]) -> dict[str, Any]:
        """fio on a directory: a subdirectory per client, so that clients on one shared file
        system do not read, write and unlink each other's files (fio names them by job only)."""
        path = Path(str(cfg.get("path", ""))).expanduser()
        if kind != "fio" or not path.is_dir():
            return cfg
        self.workdir = path / f"kvbench-noise-{self.name}-{socket.gethostname()}-{os.getpid()}"
        self.workdir.mkdir(exist_ok=True)
        return {**cfg, "path": str(self.workdir)}

    def _remove_workdir(self) -> None:
        if self.workdir is not None:
            with contextlib.suppress(OSError):  # fio unlinked its files (--unlink=1); left if not
                self.workdir.rmdir()

    async def sample(self) -> dict[str, Any]:
        """Bytes so far (None: the kind reports only when stopped) and whether it still runs."""
        if self.backend is None or self.handle is None:
            return {"bytes": 0, "active": False, "t_ns": time.perf_counter_ns()}
        return {
            "bytes": self.backend.sample_bytes(),
            "active": self.handle.active,
            "t_ns": time.perf_counter_ns(),
        }

    async def stop(self) -> dict[str, Any]:
        """Stop and reap the generator; its summary, and its rows when the kind reports at the end."""
        if self.backend is None or self.handle is None:
            return {"summary": None, "rows": [], "total_bytes": 0}
        backend, self.backend = self.backend, None
        try:
            await backend.stop()
        finally:
            self._remove_workdir()
        summary = self.handle.summary()
        return {
            "summary": summary,
            "rows": self.rows,
            "total_bytes": self.handle.total_bytes,
            "started_ns": self.handle.started_ns,
            "stopped_ns": self.handle.stopped_ns,
        }
