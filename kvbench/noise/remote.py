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

import os
import socket
import time
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
            factory = noise_backend_factory(kind, LOCAL)
            ctx = NoiseContext(phase=phase, writer=self, origin_ns=0)
            self.backend = factory(RemoteConfig(cfg), ctx)
            self.handle = await self.backend.start()
        except KvbenchError as exc:
            self.backend = None
            return {"error": exc.message}
        return {"started_ns": self.handle.started_ns}

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
        await backend.stop()
        summary = self.handle.summary()
        return {
            "summary": summary,
            "rows": self.rows,
            "total_bytes": self.handle.total_bytes,
            "started_ns": self.handle.started_ns,
            "stopped_ns": self.handle.stopped_ns,
        }
