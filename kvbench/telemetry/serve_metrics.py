"""`kvbench run --serve-metrics PORT`: kvbench's own progress as Prometheus metrics, so a Grafana
beside the server's dashboards can show the run.

One private CollectorRegistry per run (never the process-wide default, which would carry whatever
else the process registered), served by prometheus-client's own HTTP server on a daemon thread:
a scrape is answered off the event loop and over its own socket, never a timed request's.
Updated once per written row (a counter, a histogram bucket), never per chunk.

    kvbench_requests_total{phase,status}   rows written (the final attempt of each request)
    kvbench_ttft_seconds{phase}            TTFT of the ok rows (histogram)
    kvbench_prompt_tokens_total{phase}     prompt tokens of the ok rows that report a cached count
    kvbench_cached_tokens_total{phase}     of which the server served from cache: the hit ratio
    kvbench_requests_in_flight             requests sent and not yet answered
    kvbench_phase_requests{phase}          requests the phase was planned to send
    kvbench_phase_info{phase}              1: the phase running now (its last value once it ends)
    kvbench_noise_bytes_total{phase}       noise bytes sent (read from each noisy phase's handle at
                                           scrape time; a generator that counts only at its stop
                                           shows its total once stopped)
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from kvbench.errors import UsageError
from kvbench.redact import redact_text

# TTFT from a cached short prompt (ms) to a cold long one behind a queue (a minute)
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


# every label served goes through the one redaction; a run has few phases, so each is masked once
_label = functools.lru_cache(maxsize=256)(redact_text)


class RunMetrics:
    """The run's metrics in a registry of their own; `serve()` exposes them over HTTP."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "kvbench_requests", "Rows written, by phase and status.", ["phase", "status"], registry=r
        )
        self.ttft = Histogram(
            "kvbench_ttft_seconds", "TTFT of the ok rows.", ["phase"], buckets=TTFT_BUCKETS, registry=r
        )
        self.prompt_tokens = Counter(
            "kvbench_prompt_tokens", "Prompt tokens of ok rows with a cached count.", ["phase"], registry=r
        )
        self.cached_tokens = Counter(
            "kvbench_cached_tokens", "Of those, tokens the server served from cache.", ["phase"], registry=r
        )
        self.in_flight = Gauge("kvbench_requests_in_flight", "Requests sent, not yet answered.", registry=r)
        self.planned = Gauge("kvbench_phase_requests", "Requests the phase will send.", ["phase"], registry=r)
        self.phase = Info("kvbench_phase", "The phase running now.", registry=r)
        self.noise = NoiseBytes()
        r.register(self.noise)

    def add_noise(self, handle: Any) -> None:
        self.noise.handles.append(handle)

    def start_phase(self, phase: str, total: int) -> None:
        phase = _label(phase)
        self.phase.info({"phase": phase})
        self.planned.labels(phase).set(total)

    def row(
        self, phase: str, status: str, ttft_s: float | None, prompt_tokens: int, cached_tokens: int | None
    ) -> None:
        phase = _label(phase)
        self.requests.labels(phase, status).inc()
        if status == "ok" and ttft_s is not None:
            self.ttft.labels(phase).observe(ttft_s)
        if status == "ok" and cached_tokens is not None:
            self.prompt_tokens.labels(phase).inc(prompt_tokens)
            self.cached_tokens.labels(phase).inc(cached_tokens)

    @contextlib.contextmanager
    def serve(self, host: str, port: int) -> Iterator[str]:
        """Serve /metrics on host:port (0: a free port) while the body runs; yields the URL."""
        from prometheus_client import start_http_server

        try:
            server, thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise UsageError(
                f"--serve-metrics {port}: cannot listen on {host}:{port} ({exc.strerror})"
            ) from None
        try:
            shown = f"[{host}]" if ":" in host else host
            yield f"http://{shown}:{server.server_port}/metrics"
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)


class NoiseBytes(Collector):
    """kvbench_noise_bytes_total{phase}: each noisy phase's handle, read when scraped (nothing is
    counted on the run's loop): its final total once stopped, else what it has sent so far."""

    def __init__(self) -> None:
        self.handles: list[Any] = []  # NoiseHandle, one per noisy phase

    def describe(self) -> list[CounterMetricFamily]:
        return [CounterMetricFamily("kvbench_noise_bytes", "Noise bytes sent.", labels=["phase"])]

    def collect(self) -> Iterator[CounterMetricFamily]:
        fam = CounterMetricFamily("kvbench_noise_bytes", "Noise bytes sent.", labels=["phase"])
        for h in list(self.handles):
            live = h.live_bytes() if h.stopped_ns is None and h.live_bytes is not None else None
            fam.add_metric([h.phase], float(h.total_bytes if live is None else live))
        yield fam
