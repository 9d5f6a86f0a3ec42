"""The noise backend interface: what every kind of background traffic implements.

A backend is one generator for one measured phase, made by its kind's factory (see the registry
in `kvbench.noise`) from the scenario's noise section and a NoiseContext:

    backend = factory(cfg, ctx)     check the config, start nothing; a config that cannot run
                                    (no target, a missing program, a bad path) raises UsageError here
    handle = await backend.start()  begin generating for ctx.phase; returns the NoiseHandle that
                                    records rows to ctx.writer; raises (and leaves nothing running)
                                    when the generator cannot get going
    backend.sample_bytes()          bytes generated so far in this phase, while it runs (None: the
                                    generator reports only when stopped)
    await backend.stop()            stop everything it started, even when cancelled, fill in the
                                    handle's totals and clients; never leaves a process behind

`async with backend as handle:` is start() and stop(), which is how the runner uses it.

Where the bytes come from is the backend's business: today's backends run local child processes
(tcp senders, iperf3, fio); a backend whose generators live on other machines (Ray actors, next)
implements the same four steps and feeds the same handle (`handle.record(...)` once a second,
`handle.clients` and `handle.total_bytes` at the end), so the runner and the report do not change.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any

from kvbench.noise.handle import NoiseHandle, RowWriter


@dataclass(frozen=True)
class NoiseContext:
    """Where and when a backend runs: the same for every kind."""

    phase: str  # the phase label the rows carry (noisy-1, ...)
    writer: RowWriter | None  # noise.jsonl (None: no rows, only the summary)
    origin_ns: int  # the run's perf_counter_ns origin: row times are relative to it
    default_targets: tuple[str, ...] = ()  # host:port sinks when the config names none (the mock's fabric)

    def handle(self, kind: str, cfg: Any, target_bytes_per_s: float | None = None) -> NoiseHandle:
        """A fresh handle for a backend of `kind` configured by `cfg` (a pydantic noise section)."""
        return NoiseHandle(
            kind=kind,
            config=cfg.model_dump(),
            phase=self.phase,
            origin_ns=self.origin_ns,
            writer=self.writer,
            target_bytes_per_s=target_bytes_per_s,
        )


class NoiseBackend(abc.ABC):
    """One noise generator for one phase. See the module docstring for the life cycle."""

    handle: NoiseHandle

    @abc.abstractmethod
    async def start(self) -> NoiseHandle:
        """Start generating; return the handle. On failure, stop what was started, then raise."""

    def sample_bytes(self) -> int | None:
        """Bytes generated so far in this phase; None when only known after stop()."""
        return None

    @abc.abstractmethod
    async def stop(self) -> None:
        """Stop every generator, reap it, and complete the handle (totals, clients, problems)."""

    async def __aenter__(self) -> NoiseHandle:
        handle = await self.start()
        handle.live_bytes = self.sample_bytes
        return handle

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class NoNoiseBackend(NoiseBackend):
    """kind: none, a no-op: the handle says inactive, nothing runs."""

    def __init__(self, cfg: Any, ctx: NoiseContext) -> None:
        self.handle = NoiseHandle(
            kind="none", config=cfg.model_dump(), phase=ctx.phase, origin_ns=ctx.origin_ns
        )

    async def start(self) -> NoiseHandle:
        return self.handle

    def sample_bytes(self) -> int | None:
        return 0

    async def stop(self) -> None:
        return None
