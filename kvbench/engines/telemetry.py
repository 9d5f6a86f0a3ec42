"""Scrape a server's Prometheus /metrics and turn cumulative counters into per-phase deltas.

Counters are cumulative since the server started: a raw value says nothing
about a run, so only deltas (end of phase minus start) are ever reported.
Parsing uses prometheus-client's own text parser. Which families are kept is the union of
the registered engine adapters' `metric_prefixes` (kvbench.engines.adapters).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp

from kvbench.client.control import ControlClient
from kvbench.engines.adapters import first_present_sum, metric_prefixes
from kvbench.results import JsonlWriter

SampleKey = tuple[str, tuple[tuple[str, str], ...]]


def parse_metrics(text: str, keep: tuple[str, ...] | None = None) -> dict[SampleKey, float]:
    """Samples of counter and gauge families whose names start with one of `keep`.

    `keep` None: every registered engine's prefixes (read at call time, so an adapter registered
    after this module was imported counts); () keeps everything.
    """
    from prometheus_client.parser import text_string_to_metric_families

    if keep is None:
        keep = metric_prefixes()
    out: dict[SampleKey, float] = {}
    for family in text_string_to_metric_families(text):
        if keep and not family.name.startswith(keep):
            continue
        for s in family.samples:
            if s.name.endswith(("_created", "_bucket")):
                continue
            out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return out


def counter_deltas(before: dict[SampleKey, float], after: dict[SampleKey, float]) -> dict[str, float]:
    """Per metric name+labels, after minus before, for samples that look cumulative."""
    deltas: dict[str, float] = {}
    for key, value in after.items():
        name, labels = key
        if not (name.endswith(("_total", "_count", "_sum")) or (":" in name and name.endswith("_tokens"))):
            continue
        label_txt = ",".join(f'{k}="{v}"' for k, v in labels if k not in ("model_name", "engine"))
        deltas[f"{name}{{{label_txt}}}" if label_txt else name] = value - before.get(key, 0.0)
    return deltas


def sum_delta(deltas: dict[str, float], names: tuple[str, ...]) -> float | None:
    """Total delta of the first of `names` present (any labels)."""
    return first_present_sum(deltas, names)


@dataclass
class Scraper:
    http: ControlClient
    writer: JsonlWriter | None
    origin_ns: int
    enabled: bool = True
    samples_written: int = field(default=0)

    async def scrape(self, phase: str) -> dict[SampleKey, float] | None:
        if not self.enabled:
            return None
        try:
            status, text = await self.http.get_text("/metrics")
        except (aiohttp.ClientError, TimeoutError):
            return None
        if status != 200:
            self.enabled = False  # the server has no /metrics: stop asking
            return None
        try:
            samples = parse_metrics(text)
        except ValueError:
            return None
        if self.writer is not None:
            t = time.perf_counter_ns() - self.origin_ns
            for (name, labels), value in samples.items():
                self.writer.write(
                    {"t_ns": t, "phase": phase, "name": name, "labels": dict(labels), "value": value}
                )
                self.samples_written += 1
        return samples

    @contextlib.asynccontextmanager
    async def during(self, phase: str, interval_s: float) -> AsyncIterator[None]:
        """Scrape every `interval_s` while the body runs."""

        async def loop() -> None:
            while True:
                await asyncio.sleep(interval_s)
                await self.scrape(phase)

        task = asyncio.create_task(loop()) if self.enabled else None
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
