"""What a throughput run says about the server's sequence limit: its load, per request, and its gauges.

`read_load` gives each measured phase's requests in send order (prompt, cached and output tokens as
the server counted them), its connections and what was measured (req/s, TTFT p50): the step model
replays exactly that load (kvbench.twin.closedloop). `read_gauges` reads the sequence gauges the run
sampled into metrics.jsonl (kvbench.telemetry): the most requests running at once, and whether any
waited meanwhile (only then is that most a limit, not just the load). Read through kvbench.results.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvbench.results import METRICS, REQUESTS, read_jsonl
from kvbench.results.reading import load_record
from kvbench.twin.sources import THROUGHPUT_LABELS

# (running, waiting) gauges per engine family, as each server names them on /metrics:
# vLLM v1 vllm/v1/metrics/loggers.py (and kvbench's mock, kvbench/mock/metrics.py); SGLang
# python/sglang/srt/metrics/collector.py; llama.cpp tools/server/server.cpp (slots busy, deferred)
SEQUENCE_GAUGES: tuple[tuple[str, str], ...] = (
    ("vllm:num_requests_running", "vllm:num_requests_waiting"),
    ("sglang:num_running_reqs", "sglang:num_queue_reqs"),
    ("llamacpp:requests_processing", "llamacpp:requests_deferred"),
)


@dataclass(frozen=True)
class Request:
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class Load:
    """One measured phase of a closed-loop run: what was sent, how, and what came back."""

    run_dir: Path
    phase: str
    concurrency: int
    requests: tuple[Request, ...]  # in send order
    requests_per_s: float
    ttft_p50_s: float
    pace: float  # the mock's real seconds per model second (1.0 for a real server)


@dataclass(frozen=True)
class Gauges:
    """The sequence gauges over every sample of the runs."""

    name: str  # the running gauge read
    max_running: int
    # some sample had requests waiting while max_running ran: max_running is the limit. Waiting beside
    # fewer running is not (vLLM's gauges lag its steps: 1 running and 3 waiting was sampled at 8
    # connections on a server of 4 sequences that had run 2)
    saw_waiting: bool
    samples: int


def _request(row: dict[str, Any]) -> Request | None:
    n = row.get("prompt_tokens_server") or row.get("prompt_tokens")
    out = row.get("output_tokens")
    if not isinstance(n, int | float) or n <= 0:
        return None
    outputs = int(out) if isinstance(out, int) and out > 0 else 1
    return Request(int(n), int(row.get("cached_tokens") or 0), outputs)


def _median(values: list[float]) -> float:
    v = sorted(values)
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def read_load(run_dir: Path) -> list[Load]:
    """Every closed-loop measured phase of a run ([] for a run with none: a TTFT sweep, an open loop)."""
    m = load_record(run_dir).manifest
    if m.load is None or m.load.kind != "concurrent" or not m.load.concurrency:
        return []
    rows = [r for r in read_jsonl(run_dir / REQUESTS) if r.get("status") == "ok"]
    pace = float(m.target.mock_time_scale or 1.0)
    loads = []
    for p in m.phases:
        if p.label not in THROUGHPUT_LABELS or not p.requests_ok_per_s:
            continue
        mine = sorted((r for r in rows if r.get("phase") == p.name), key=lambda r: r.get("sent_ns") or 0)
        reqs = [q for q in map(_request, mine) if q is not None]
        ttfts = [float(r["ttft_ms"]) / 1e3 for r in mine if isinstance(r.get("ttft_ms"), int | float)]
        if reqs and ttfts:
            conns, rps = int(m.load.concurrency), float(p.requests_ok_per_s)
            loads.append(Load(run_dir, p.name, conns, tuple(reqs), rps, _median(ttfts), pace))
    return loads


def read_gauges(run_dirs: list[Path]) -> Gauges | None:
    """The first gauge family the runs sampled (None: no run recorded one)."""
    for running, waiting in SEQUENCE_GAUGES:
        ticks: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0.0, 0.0])
        for d in run_dirs:
            if not (d / METRICS).is_file():
                continue
            for row in read_jsonl(d / METRICS):
                name, value = row.get("name"), row.get("value")
                if name in (running, waiting) and isinstance(value, int | float):
                    # one scrape's samples share its t_ns: sum a gauge over its labels (model names)
                    ticks[(str(d), int(row.get("t_ns") or 0))][name == waiting] += float(value)
        if ticks:
            most = max(r for r, _ in ticks.values())
            return Gauges(
                name=running,
                max_running=int(most),
                saw_waiting=any(w > 0 and r >= most for r, w in ticks.values()),
                samples=len(ticks),
            )
    return None
