"""`Sampler`: everything a run samples over time, each source on its own loop and connection.

Sources: the engine's /metrics (rows in metrics.jsonl, as the phase-boundary scrapes write them),
each `telemetry.exporters` entry, this host's /proc counters and, on a lab run, the lab link's
interface counters (rows in telemetry.jsonl). Every
source ticks on the run's clock (time.perf_counter_ns, the clock of the request rows) at
`telemetry.interval_s`; a scrape slower than the interval skips the ticks it overran instead of
queueing them, and delays no other source. The scrapes go over a session of their own (its own
connector and connections), so a scrape never waits for, or holds, a connection a timed request
wants. Rows are written as each answer comes: nothing accumulates in memory however long the run.

A source that fails (down, slow, garbage) becomes a row with `error` and one warning per source;
the run goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvbench.baseurl import auth_headers
from kvbench.client.control import ControlClient
from kvbench.engines.telemetry import SampleKey, Scraper
from kvbench.redact import redact
from kvbench.results import JsonlWriter
from kvbench.telemetry.exporters import ScrapeFailed, scrape_exporter
from kvbench.telemetry.host import read_host
from kvbench.telemetry.lab_link import read_link

TELEMETRY = "telemetry.jsonl"


@dataclass(frozen=True)
class Source:
    """One thing sampled into telemetry.jsonl: `name` (host, or the exporter's URL without
    credentials), `kind` (host, node, dcgm, prometheus) and how to read it once."""

    name: str
    kind: str
    read: Callable[[Any], Awaitable[dict[SampleKey, float]]]  # session -> samples, or ScrapeFailed


def exporter_source(url: str, kind: str, timeout_s: float) -> Source:
    clean, headers = auth_headers(url, {})
    clean = redact(clean)  # also a URL whose userinfo auth_headers keeps (none it can parse)

    async def read(session: Any) -> dict[SampleKey, float]:
        return await scrape_exporter(session, clean, headers, kind, timeout_s)

    return Source(clean, kind, read)


def host_source() -> Source:
    async def read(session: Any) -> dict[SampleKey, float]:
        samples = read_host()
        if not samples:
            raise ScrapeFailed("/proc/net/dev and /proc/diskstats unreadable")
        return samples

    return Source("host", "host", read)


def link_source(interfaces: Sequence[str]) -> Source:
    """The lab link's host end (kvbench.telemetry.lab_link), kind `link`."""
    names = tuple(interfaces)

    async def read(session: Any) -> dict[SampleKey, float]:
        samples = read_link(names)
        if not samples:
            raise ScrapeFailed(f"no counters under /sys/class/net for {', '.join(names)} (lab down?)")
        return samples

    return Source("lab link " + ",".join(names), "link", read)


class Sampler:
    """The run's scraper: phase-boundary scrapes of the engine, and sampling while a phase runs."""

    def __init__(
        self,
        engine: Scraper,
        sources: list[Source],
        run_path: Path | None,
        warn: Callable[[str], None] = print,
    ) -> None:
        self.engine, self.sources, self.run_path, self.warn = engine, sources, run_path, warn
        self.warned: set[str] = set()
        self.rows_written = 0
        self.errors = 0

    @property
    def writer(self) -> JsonlWriter | None:  # the runner closes metrics.jsonl at the run's end
        return self.engine.writer

    @property
    def enabled(self) -> bool:
        return self.engine.enabled

    async def scrape(self, phase: str) -> dict[SampleKey, float] | None:
        """One scrape of the engine over the run's own session (phase boundaries, cold probes)."""
        return await self.engine.scrape(phase)

    @contextlib.asynccontextmanager
    async def during(self, phase: str, interval_s: float) -> AsyncIterator[None]:
        """Sample every source every `interval_s` while the body runs, and each telemetry source
        once as it starts and once as it ends, so a phase of any length has its rows (callers take
        the phase's `ended` mark inside the body: the closing read is not phase time)."""
        import aiohttp

        if not self.engine.enabled and not self.sources:
            yield
            return
        interval_ns = max(int(interval_s * 1e9), 1)
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=len(self.sources) + 2))
        writer = JsonlWriter(self.run_path / TELEMETRY) if self.sources and self.run_path else None
        tasks = []
        if self.engine.enabled:
            http = self.engine.http
            own = ControlClient(
                session, http.base_url, dict(http.headers), timeout_s=max(2 * interval_s, 1.0)
            )
            tasks.append(self._tick(interval_ns, lambda: self.engine.scrape(phase, http=own)))
        for src in self.sources:  # read at once: a phase shorter than interval_s still has rows
            tasks.append(self._tick(interval_ns, self._one_call(src, session, writer, phase), first=0))
        running = [asyncio.create_task(t) for t in tasks]
        finished = False
        try:
            yield
            finished = True
        finally:
            for task in running:
                task.cancel()
            try:
                done = await asyncio.gather(*running, return_exceptions=True)
                failed = [
                    e
                    for e in done
                    if isinstance(e, BaseException) and not isinstance(e, asyncio.CancelledError)
                ]
                if failed:  # a row the disk refused: the run's one line about it
                    raise failed[0]
                if finished:  # each source as the phase ended (an interrupted phase is not waited on)
                    await asyncio.gather(*(self.sample(s, session, writer, phase) for s in self.sources))
            finally:
                await session.close()
                if writer is not None:
                    writer.close()

    def _one_call(
        self, src: Source, session: Any, writer: JsonlWriter | None, phase: str
    ) -> Callable[[], Awaitable[Any]]:
        async def call() -> None:
            await self.sample(src, session, writer, phase)

        return call

    @staticmethod
    async def _tick(interval_ns: int, call: Callable[[], Awaitable[Any]], first: int = 1) -> None:
        """`call` every interval; `first` 0 calls it at once (telemetry sources: the phase's start),
        1 an interval in (the engine: its phase-boundary scrape was just taken)."""
        start = time.perf_counter_ns()
        k = first
        while True:
            delay = start + k * interval_ns - time.perf_counter_ns()
            if delay > 0:
                await asyncio.sleep(delay / 1e9)
            await call()
            # ticks a slow scrape overran are skipped, never queued
            k = max(k + 1, (time.perf_counter_ns() - start) // interval_ns + 1)

    async def sample(self, src: Source, session: Any, writer: JsonlWriter | None, phase: str) -> None:
        """Read one source once and write its rows (an error row when it fails)."""
        origin = self.engine.origin_ns
        try:
            samples = await src.read(session)
        except ScrapeFailed as exc:
            exc = ScrapeFailed(redact(str(exc)))
            self.errors += 1
            self._write(
                writer,
                {
                    "t_ns": time.perf_counter_ns() - origin,
                    "phase": phase,
                    "source": src.name,
                    "kind": src.kind,
                    "error": str(exc),
                },
            )
            if src.name not in self.warned:
                self.warned.add(src.name)
                self.warn(
                    f"telemetry: {src.kind} {src.name}: {exc}; the run goes on "
                    f"({TELEMETRY} has a row per failed scrape)"
                )
            return
        t = time.perf_counter_ns() - origin
        for (name, labels), value in samples.items():
            self._write(
                writer,
                {
                    "t_ns": t,
                    "phase": phase,
                    "source": src.name,
                    "kind": src.kind,
                    "name": name,
                    "labels": dict(labels),
                    "value": value,
                },
            )

    def _write(self, writer: JsonlWriter | None, row: dict[str, Any]) -> None:
        if writer is not None:
            writer.write(row)
            self.rows_written += 1


def build_sampler(
    engine: Scraper,
    telemetry: Any,
    run_path: Path,
    warn: Callable[[str], None],
    links: Sequence[str] = (),
) -> Sampler:
    """The run's sampler from its scenario's telemetry section (exporters, this host) and `links`,
    the interfaces of a lab link the target sits behind (sampled with this host's counters)."""
    timeout = max(2 * telemetry.interval_s, 1.0)
    sources = [exporter_source(e.url, e.kind, timeout) for e in telemetry.exporters]
    if telemetry.host:
        sources.append(host_source())
        if links:
            sources.append(link_source(links))
    return Sampler(engine, sources, run_path, warn)
