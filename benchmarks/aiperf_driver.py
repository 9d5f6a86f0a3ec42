"""AIPerf (NVIDIA's multi-process benchmark, PyPI `aiperf`) as a peer in `make bench`.

AIPerf lives in its own venv, keyed by its version, made on first use:
~/.cache/kvbench/bench/aiperf-<AIPERF_VERSION>/venv (KVBENCH_BENCH_CACHE moves the parent), as
the vLLM peer lives in the vLLM CPU venv: its pins (pydantic, aiohttp, zmq, transformers) must
not meet kvbench's. Each run is one `aiperf profile` child through the bench's spawner, so CPU is
the wait4() rusage of its whole process tree (its services are its waited-for children) and peak
RSS is the largest single process's (ru_maxrss; the tree's sum is not measured).

What it runs: the completions endpoint, streaming, a fixed concurrency and request count, a
synthetic 1,000-token prompt and 16 output tokens (as vLLM's bench here), with the bench's
word-level tokenizer (peers.write_tokenizer, no download). AIPerf sends an X-Request-ID per
request and exports it per record (profile_export.jsonl: metadata.x_request_id,
request_start_ns and request_end_ns on the wall clock, metrics.time_to_first_token in ms), so
its TTFT error is matched per request id against the ground-truth server like every tool's.
Its wall-clock starts are mapped onto CLOCK_MONOTONIC with one offset sampled here (the
send/return split depends on it; the TTFT error does not).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench_common import pinned, read_jsonl, spawn

AIPERF_VERSION = "0.13.0"
INSTALL_TIMEOUT_S = 900


def venv_dir() -> Path:
    base = Path(os.environ.get("KVBENCH_BENCH_CACHE", Path.home() / ".cache" / "kvbench" / "bench"))
    return base / f"aiperf-{AIPERF_VERSION}" / "venv"


def aiperf_bin() -> tuple[Path | None, str]:
    """AIPerf's executable, installing it on first use; else None and one line saying why."""
    venv = venv_dir()
    exe = venv / "bin" / "aiperf"
    if exe.exists():
        return exe, str(exe)
    log = venv.parent / "install.log"
    try:
        venv.parent.mkdir(parents=True, exist_ok=True)
        with log.open("wb") as fh:
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, stdout=fh, stderr=fh)
            pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", f"aiperf=={AIPERF_VERSION}"]
            subprocess.run(pip, check=True, stdout=fh, stderr=fh, timeout=INSTALL_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
        why = tail[0][:160] if tail else str(exc)[:160]
        return None, f"AIPerf {AIPERF_VERSION} did not install into {venv} ({why}; log: {log})"
    if not exe.exists():
        return None, f"AIPerf {AIPERF_VERSION} installed without an `aiperf` executable in {venv}"
    return exe, str(exe)


def realtime_offset_ns() -> int:
    """CLOCK_REALTIME - CLOCK_MONOTONIC (perf_counter_ns), the tightest of 64 bracketed reads."""
    best = (1 << 62, 0)
    for _ in range(64):
        a = time.perf_counter_ns()
        r = time.time_ns()
        b = time.perf_counter_ns()
        best = min(best, (b - a, r - (a + b) // 2))
    return best[1]


def command(
    exe: Path, base_url: str, requests: int, concurrency: int, out: Path, tokenizer: Path
) -> list[str]:
    return [
        str(exe), "profile", "--url", base_url, "--endpoint-type", "completions", "--streaming",
        "--model", "kvbench-bench-gt", "--tokenizer", str(tokenizer),
        "--concurrency", str(concurrency), "--request-count", str(requests),
        "--random-seed", "0",
        "--prompt-input-tokens-mean", "1000", "--prompt-input-tokens-stddev", "0",
        "--prompt-output-tokens-mean", "16", "--prompt-output-tokens-stddev", "0",
        "--extra-inputs", "ignore_eos:true", "--ui-type", "none", "--no-server-metrics",
        "--no-gpu-telemetry", "--output-artifact-dir", str(out),
    ]  # fmt: skip


def rows_of(records: list[dict[str, Any]], offset_ns: int) -> list[dict[str, Any]]:
    """profile_export.jsonl records as the bench's common rows (CLOCK_MONOTONIC ns)."""
    rows = []
    for i, rec in enumerate(records):
        meta = rec.get("metadata") or {}
        ttft = (rec.get("metrics") or {}).get("time_to_first_token") or {}
        start = meta.get("request_start_ns")
        end = meta.get("request_end_ns")
        sent = None if start is None else int(start) - offset_ns
        ms = ttft.get("value") if ttft.get("unit", "ms") == "ms" else None
        ok = rec.get("error") is None and ms is not None and sent is not None
        rows.append(
            {
                "request_id": meta.get("x_request_id") or f"aiperf-{i}",
                "ok": ok,
                "sent_ns": sent,
                "first_ns": sent + round(float(ms) * 1e6) if ok and sent is not None else None,
                "end_ns": None if end is None else int(end) - offset_ns,
            }
        )
    return rows


def run_aiperf(
    exe: Path,
    base_url: str,
    requests: int,
    concurrency: int,
    d: Path,
    cores: list[int] | None,
    tokenizer: Path,
) -> dict[str, Any]:
    """One `aiperf profile` child (its process tree's rusage); the common rows."""
    d.mkdir(parents=True, exist_ok=True)
    out = d / "aiperf"
    # not HF_HUB_OFFLINE: AIPerf 0.13 then resolves even a local tokenizer folder as a hub repo id
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    offset = realtime_offset_ns()
    ru = spawn(
        pinned(command(exe, base_url, requests, concurrency, out, tokenizer), cores), d / "aiperf.log", env
    )
    found = sorted(out.rglob("profile_export.jsonl"))
    if ru["rc"] != 0 or not found:
        tail = (d / "aiperf.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"aiperf profile failed (rc {ru['rc']}):\n{tail}")
    return {
        "rows": rows_of(read_jsonl(found[-1]), offset),
        "cpu_s": ru["user_s"] + ru["sys_s"],
        "maxrss_mb": ru["maxrss_kb"] / 1024.0,
        "wall_s": ru["wall_s"],
    }


def version_line(exe: Path) -> str:
    r = subprocess.run([str(exe.parent / "python"), "-c", "import aiperf; print(aiperf.__version__)"],
                       capture_output=True, text=True)  # fmt: skip
    return r.stdout.strip() or AIPERF_VERSION


def main() -> int:
    """By hand: one run against a running server. python benchmarks/aiperf_driver.py URL N CONC OUT."""
    from peers import write_tokenizer

    exe, note = aiperf_bin()
    if exe is None:
        print(note)
        return 2
    url, n, conc, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    res = run_aiperf(exe, url, n, conc, out, None, write_tokenizer(out / "tokenizer"))
    ok = [r for r in res["rows"] if r["ok"]]
    print(
        json.dumps({"rows": len(res["rows"]), "ok": len(ok), "cpu_s": res["cpu_s"], "wall_s": res["wall_s"]})
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
