"""What `kvbench fit` reads from a run directory: TTFT points, inter-token times, throughput phases.

Through `kvbench.results` only (load_record for the manifest, read_jsonl for requests.jsonl); a
directory that is missing or is not a run is one UsageError line naming it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvbench.errors import UsageError
from kvbench.results import REQUESTS, read_jsonl
from kvbench.results.reading import load_record

WARM_LABELS = ("warm", "evicted-warm")  # a TTFT test's second request of the same prompt
THROUGHPUT_LABELS = ("cached", "baseline", "quiet")  # quiet phases only: noise is not fitted


@dataclass(frozen=True)
class TtftPoint:
    tokens: int  # prompt tokens as the server counted them (the client's count when it did not say)
    cached: int  # tokens the server reported cached
    ttft_s: float


@dataclass(frozen=True)
class ThroughputPoint:
    label: str
    concurrency: int
    requests_per_s: float
    ttft_p50_s: float | None
    requests: int
    run: str = ""
    phase: str = ""


@dataclass(frozen=True)
class Source:
    """What system a run measured, and how: the twin records it so a prediction can say where it came from."""

    engine: str  # the adapter name the run used (llamacpp, vllm, mock, generic, ...)
    kind: str  # mock (kvbench's own) or server
    mock_profile: str | None  # the mock profile a mock run served
    pace: float  # real seconds per modelled second (1.0 for a real server)
    machine: str  # the client host: hostname, CPUs, platform
    max_model_len: int | None = None  # the server's context, where /v1/models said it
    server: str | None = None  # the base URL measured: which runs shared a server (not in the profile)

    def as_dict(self) -> dict[str, str | float | None]:
        return {
            "engine": self.engine,
            "kind": self.kind,
            "mock_profile": self.mock_profile,
            "pace": self.pace,
            "machine": self.machine,
        }


@dataclass
class RunData:
    run_dir: Path
    model: str | None
    source: Source | None = None
    cold: list[TtftPoint] = field(default_factory=list)
    warm: list[TtftPoint] = field(default_factory=list)
    itl: list[tuple[int, float]] = field(default_factory=list)  # (context tokens, mean step s)
    throughput: list[ThroughputPoint] = field(default_factory=list)


def _tokens(row: dict[str, Any]) -> int | None:
    n = row.get("prompt_tokens_server") or row.get("prompt_tokens")
    return int(n) if isinstance(n, int | float) and n > 0 else None


def _point(row: dict[str, Any]) -> TtftPoint | None:
    n, ttft = _tokens(row), row.get("ttft_ms")
    if n is None or not isinstance(ttft, int | float) or ttft <= 0:
        return None
    return TtftPoint(tokens=n, cached=int(row.get("cached_tokens") or 0), ttft_s=float(ttft) / 1e3)


def _rate(rows: list[dict[str, Any]]) -> float | None:
    """ok requests per second over the rows' span (a manifest older than requests_ok_per_s)."""
    sent = [r["sent_ns"] for r in rows if isinstance(r.get("sent_ns"), int)]
    ends = [r["end_ns"] for r in rows if isinstance(r.get("end_ns"), int)]
    span = (max(ends) - min(sent)) / 1e9 if sent and ends else 0.0
    return len(rows) / span if span > 0 else None


def read_run(run_dir: Path | str) -> RunData:
    """One run directory's fit inputs (UsageError: missing, not a run, or nothing to fit)."""
    path = Path(run_dir)
    if not path.is_dir():
        raise UsageError(f"{path}: no such run directory")
    record = load_record(path)
    m = record.manifest
    env = m.environment
    machine = f"{env.hostname}, {env.cpu_count or '?'} CPUs, {env.platform}"
    source = Source(
        engine=m.target.engine,
        kind=m.target.kind,
        mock_profile=m.target.mock_profile,
        pace=float(m.target.mock_time_scale or 1.0),
        machine=machine,
        max_model_len=m.target.max_model_len,
        server=m.target.base_url,
    )
    data = RunData(run_dir=path, model=m.target.model, source=source)
    rows = [r for r in read_jsonl(path / REQUESTS) if r.get("status") == "ok"]
    ttft_phases = {p.name for p in m.phases if p.label == "ttft"}
    for r in rows:
        if r.get("phase") not in ttft_phases:
            continue
        point = _point(r)
        if point is None:
            continue
        if r.get("label") == "cold" and point.cached == 0:
            data.cold.append(point)
        elif r.get("label") in WARM_LABELS and point.cached > 0:
            data.warm.append(point)
        itl, out = r.get("itl_ms_mean"), r.get("output_tokens")
        if isinstance(itl, int | float) and itl > 0 and isinstance(out, int) and out > 1:
            data.itl.append((point.tokens + out // 2, float(itl) / 1e3))
    concurrency = m.load.concurrency if m.load is not None else 1
    for p in m.phases:
        mine = [r for r in rows if r.get("phase") == p.name]
        rate = p.requests_ok_per_s or _rate(mine)
        if p.label in THROUGHPUT_LABELS and rate:
            ttfts = sorted(
                float(r["ttft_ms"]) / 1e3 for r in mine if isinstance(r.get("ttft_ms"), int | float)
            )
            p50 = ttfts[len(ttfts) // 2] if ttfts else None
            label = str(getattr(p.label, "value", p.label))
            phase = ThroughputPoint(label, concurrency, float(rate), p50, len(mine), str(path), p.name)
            data.throughput.append(phase)
    return data


def read_runs(run_dirs: list[Path]) -> list[RunData]:
    """Every run's inputs; UsageError when none of them has cold TTFT rows to fit the prefill to."""
    if not run_dirs:
        raise UsageError("kvbench fit: name at least one run directory")
    runs = [read_run(d) for d in run_dirs]
    if not any(r.cold for r in runs):
        names = ", ".join(str(r.run_dir) for r in runs)
        raise UsageError(f"{names}: no cold TTFT rows (run `kvbench run ttft` against the system first)")
    return runs
