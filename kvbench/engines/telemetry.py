"""Scrape a server's Prometheus /metrics and turn cumulative counters into per-phase deltas.

Counters are cumulative since the server started: a raw value says nothing
about a run, so only deltas (end of phase minus start) are ever reported.
Parsing uses prometheus-client's own text parser. Which families are kept is the union of
the registered engine adapters' `metric_prefixes` (kvbench.engines.adapters). Sampling while a
phase runs is kvbench.telemetry.sampler's: it calls `Scraper.scrape` over a session of its own.
"""

from __future__ import annotations

import time
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
    # lines of other families, and histogram buckets and _created samples (never kept), never reach
    # the parser: a scrape every 0.1 s of a /metrics full of histograms stays cheap
    text = "\n".join(
        line
        for line in text.splitlines()
        if (line.startswith(("# HELP ", "# TYPE ")) and line[7:].startswith(keep or ""))
        or (
            not line.startswith("#")
            and line.startswith(keep or "")
            and not line.partition("{")[0].partition(" ")[0].endswith(("_bucket", "_created"))
        )
    )
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

    async def scrape(self, phase: str, http: ControlClient | None = None) -> dict[SampleKey, float] | None:
        """Samples now, written as rows; `http`: a client of its own (the sampler's, during a phase)."""
        if not self.enabled:
            return None
        try:
            status, text = await (http or self.http).get_text("/metrics")
        except (aiohttp.ClientError, TimeoutError):
            return None
        if status != 200:
            # a refusal that asking again cannot cure (404: no /metrics, 401/403): stop asking; a busy
            # server's 5xx, 408 or 429 under load is only this sample missing
            if 400 <= status < 500 and status not in (408, 429):
                self.enabled = False
            return None
        try:
            samples = parse_metrics(text)
        except Exception:  # garbage from the server: no sample this time (the parser raises several types)
            return None
        if self.writer is not None:
            t = time.perf_counter_ns() - self.origin_ns
            for (name, labels), value in samples.items():
                self.writer.write(
                    {"t_ns": t, "phase": phase, "name": name, "labels": dict(labels), "value": value}
                )
                self.samples_written += 1
        return samples
