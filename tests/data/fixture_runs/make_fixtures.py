"""Regenerate the hand-built fixture runs (deterministic): python tests/data/fixture_runs/make_fixtures.py

Each folder follows results/README.md exactly: manifest.json, scenario.yaml,
requests.jsonl, prompts.jsonl and, for the noisy run, noise.jsonl. Latencies
follow a simple prefill model (TTFT cold = a*n + c*n^2, warm = fixed + KV bytes
/ bandwidth for gpt-oss-120b) so that fits and plots look like real runs.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORIGIN = 5_000_000_000_000
A, C = 3.806e-5, 1.609e-9  # s/token, s/token^2 (fits 2.59 s @ 30k and 32.14 s @ 130k)
KV_B_PER_TOKEN = 36_864  # gpt-oss-120b, full-attention layers, FP16
WARM_FIXED_S, WARM_BW = 0.12, 12e9
ITL_S = 0.02


def manifest(
    run_id: str,
    test: str,
    status: str,
    phases: list[dict],
    scenario: str,
    started: str,
    ended: str | None,
    error_counts: dict | None = None,
    simulated: bool = True,
) -> dict:
    return {
        "kvbench_version": "0.1.0",
        "run_id": run_id,
        "run_dir": f"results/{run_id}",
        "scenario_name": scenario,
        "test": test,
        "status": status,
        "started_at": started,
        "ended_at": ended,
        "clock_origin_ns": ORIGIN,
        "target": {
            "kind": "mock" if simulated else "server",
            "base_url": "http://127.0.0.1:0/v1" if simulated else "http://gpu-node:8000/v1",
            "model": "openai/gpt-oss-120b",
            "engine": "kvbench-mock" if simulated else "vllm",
            "api": "chat",
            "mock_profile": "g4" if simulated else None,
            "server_version": "0.1.0" if simulated else "0.14.1",
        },
        "simulated": simulated,
        "reference": "ibm-g4",
        "environment": {
            "python": "3.11.9",
            "platform": "Linux-x86_64",
            "cpu_count": 16,
            "hostname": "fixture",
            "git_commit": "0000000",
        },
        "options": {"allow_unverified_cold": False, "retries": 0},
        "phases": phases,
        "error_counts": error_counts or {},
    }


def row(
    i: int,
    phase: str,
    label: str,
    rep: int,
    prompt_id: int,
    tokens: int,
    sent_s: float,
    ttft_s: float,
    out_tokens: int,
    *,
    status: str = "ok",
    error_type: str | None = None,
    cached: int | None = None,
    noise: bool = False,
    dispatch_s: float = 0.0005,
) -> dict:
    sent = ORIGIN * 0 + int(sent_s * 1e9)
    scheduled = sent - int(dispatch_s * 1e9)
    first = sent + int(ttft_s * 1e9)
    token_ns = [first + int(k * ITL_S * 1e9) for k in range(out_tokens)] if status == "ok" else []
    end = token_ns[-1] + 1_000_000 if token_ns else first
    text = "lorem " * out_tokens if status == "ok" else ""
    return {
        "request_id": f"r{i:05d}",
        "phase": phase,
        "label": label,
        "repetition": rep,
        "prompt_id": prompt_id,
        "prompt_tokens_requested": tokens,
        "prompt_tokens": tokens,
        "prompt_tokens_server": tokens + 7 if status == "ok" else None,
        "cached_tokens": cached,
        "output_tokens": out_tokens if status == "ok" else None,
        "scheduled_ns": scheduled,
        "sent_ns": sent,
        "headers_ns": sent + 2_000_000,
        "first_token_ns": first if status == "ok" else None,
        "end_ns": end,
        "token_ns": token_ns,
        "ttft_ms": (first - sent) / 1e6 if status == "ok" else None,
        "e2e_ms": (end - sent) / 1e6,
        "dispatch_delay_ms": (sent - scheduled) / 1e6,
        "itl_ms_mean": ITL_S * 1000 if status == "ok" and out_tokens > 1 else None,
        "status": status,
        "http_status": 200 if status == "ok" else 503,
        "error_type": error_type,
        "error_message": None if status == "ok" else "server busy",
        "output_chars": len(text),
        "output_text": text[:4096],
        "noise_active": noise,
        "attempt": 1,
    }


def write(
    run_id: str,
    man: dict,
    rows: list[dict],
    prompts: list[dict],
    extra: dict[str, list[dict]] | None = None,
    torn: str | None = None,
) -> None:
    d = HERE / run_id
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps(man, indent=2) + "\n")
    (d / "scenario.yaml").write_text(f"name: {man['scenario_name']}\ntest: {man['test']}\n")
    with (d / "requests.jsonl").open("w") as fh:
        for r in rows:
            fh.write(json.dumps(r, separators=(",", ":")) + "\n")
        if torn:
            fh.write(torn)
    with (d / "prompts.jsonl").open("w") as fh:
        for p in prompts:
            fh.write(json.dumps(p) + "\n")
    for name, data in (extra or {}).items():
        with (d / name).open("w") as fh:
            for r in data:
                fh.write(json.dumps(r, separators=(",", ":")) + "\n")


def prompt_rows(lengths: list[int]) -> list[dict]:
    return [
        {"prompt_id": i, "requested_tokens": n, "actual_tokens": n, "chars": n * 4, "sha256": f"{i:064x}"}
        for i, n in enumerate(lengths)
    ]


def ttft_run(rng: random.Random) -> None:
    lengths = [30_000, 60_000, 100_000, 130_000]
    rows: list[dict] = []
    t = 1.0
    i = 0
    pid = 0
    plens = []
    for rep in range(3):
        for n in lengths:
            cold = (A * n + C * n * n) * rng.uniform(0.97, 1.03)
            warm = (WARM_FIXED_S + n * KV_B_PER_TOKEN / WARM_BW) * rng.uniform(0.95, 1.05)
            rows.append(row(i, "ttft", "cold", rep, pid, n, t, cold, 16, cached=0))
            i += 1
            t += cold + 16 * ITL_S + 0.5
            rows.append(row(i, "ttft", "warm", rep, pid, n, t, warm, 16, cached=n - n % 16))
            i += 1
            t += warm + 16 * ITL_S + 0.5
            plens.append(n)
            pid += 1
    phases = [
        {
            "name": "ttft",
            "label": "cold+warm",
            "repetition": 0,
            "started_ns": 500_000_000,
            "ended_ns": int(t * 1e9),
            "duration_s": t - 0.5,
            "requests": len(rows),
            "errors": 0,
            "cold_verified": True,
            "noise": None,
        }
    ]
    man = manifest(
        "20261130T140312Z-ttft-3f9a1c",
        "ttft",
        "complete",
        phases,
        "ttft",
        "2026-11-30T14:03:12.000Z",
        "2026-11-30T14:09:40.000Z",
    )
    write(man["run_id"], man, rows, prompt_rows(plens))


def closed_loop(
    rng: random.Random,
    jobs: list[tuple[int, int, float, bool]],
    concurrency: int,
    start_s: float,
    first_id: int,
    phase: str,
    label: str,
    noise: bool = False,
    slow: float = 1.0,
    errors_at: tuple[int, ...] = (),
) -> tuple[list[dict], float]:
    free = [start_s + 0.01 * k for k in range(concurrency)]
    rows = []
    for k, (pid, n, ttft, hit) in enumerate(jobs):
        w = min(range(concurrency), key=lambda j: free[j])
        sent = free[w] + 0.001
        ttft_s = ttft * slow * rng.uniform(0.9, 1.1)
        if k in errors_at:
            r = row(
                first_id + k,
                phase,
                label,
                0,
                pid,
                n,
                sent,
                ttft_s,
                0,
                status="error",
                error_type="http_503",
                noise=noise,
            )
        else:
            r = row(
                first_id + k, phase, label, 0, pid, n, sent, ttft_s, 32, cached=(n if hit else 0), noise=noise
            )
        rows.append(r)
        free[w] = r["end_ns"] / 1e9
    return rows, max(free)


def throughput_run(rng: random.Random) -> None:
    n_prompts, n = 20, 20_000
    order = list(range(n_prompts)) + list(range(n_prompts))
    prefill = (A * n + C * n * n) * 8  # 8 requests share the GPU
    hit = WARM_FIXED_S + n * KV_B_PER_TOKEN / WARM_BW * 4
    base_jobs = [(p, n, prefill, False) for p in order]
    rows_b, end_b = closed_loop(rng, base_jobs, 8, 1.0, 0, "baseline", "baseline")
    seen: set[int] = set()
    cached_jobs = []
    for p in order:
        cached_jobs.append((p, n, hit if p in seen else prefill, p in seen))
        seen.add(p)
    rows_c, end_c = closed_loop(
        rng, cached_jobs, 8, end_b + 2.0, len(rows_b), "cached", "cached", errors_at=(33,)
    )
    phases = [
        {
            "name": "baseline",
            "label": "baseline",
            "repetition": 0,
            "started_ns": int(1e9),
            "ended_ns": int(end_b * 1e9),
            "duration_s": end_b - 1.0,
            "requests": 40,
            "errors": 0,
            "cold_verified": True,
            "noise": None,
        },
        {
            "name": "cached",
            "label": "cached",
            "repetition": 0,
            "started_ns": int((end_b + 2) * 1e9),
            "ended_ns": int(end_c * 1e9),
            "duration_s": end_c - end_b - 2.0,
            "requests": 40,
            "errors": 1,
            "cold_verified": True,
            "noise": None,
        },
    ]
    man = manifest(
        "20261130T141500Z-throughput-7b2e90",
        "throughput",
        "complete",
        phases,
        "throughput",
        "2026-11-30T14:15:00.000Z",
        "2026-11-30T14:17:10.000Z",
        {"http_503": 1},
    )
    write(man["run_id"], man, rows_b + rows_c, prompt_rows([n] * n_prompts))


def noisy_run(rng: random.Random) -> None:
    n_prompts, n = 20, 20_000
    hit = WARM_FIXED_S + n * KV_B_PER_TOKEN / WARM_BW * 4
    jobs = [(p, n, hit, True) for p in list(range(n_prompts)) * 2]
    rows_q, end_q = closed_loop(rng, jobs, 8, 1.0, 0, "quiet-1", "quiet")
    rows_n, end_n = closed_loop(
        rng, jobs, 8, end_q + 2.0, len(rows_q), "noisy-1", "noisy", noise=True, slow=1.25
    )
    start_n = end_q + 2.0
    noise_rows = []
    t = start_n - 0.5
    while t < end_n + 0.5:
        for client in ("noise-0", "noise-1"):
            bps = 1.2e9 * rng.uniform(0.85, 1.0)
            noise_rows.append(
                {
                    "t_ns": int(t * 1e9),
                    "phase": "noisy-1",
                    "client": client,
                    "bytes": int(bps),
                    "bytes_per_s": bps,
                }
            )
        t += 1.0
    mean = sum(r["bytes_per_s"] for r in noise_rows) / (len(noise_rows) / 2)
    peak = max(r["bytes_per_s"] for r in noise_rows) * 2
    phases = [
        {
            "name": "quiet-1",
            "label": "quiet",
            "repetition": 0,
            "started_ns": int(1e9),
            "ended_ns": int(end_q * 1e9),
            "duration_s": end_q - 1.0,
            "requests": 40,
            "errors": 0,
            "cold_verified": None,
            "noise": None,
        },
        {
            "name": "noisy-1",
            "label": "noisy",
            "repetition": 0,
            "started_ns": int(start_n * 1e9),
            "ended_ns": int(end_n * 1e9),
            "duration_s": end_n - start_n,
            "requests": 40,
            "errors": 0,
            "cold_verified": None,
            "noise": {
                "kind": "http_flood",
                "config": {"clients": 2, "target_bytes_per_s": 2.5e9},
                "mean_bytes_per_s": mean,
                "peak_bytes_per_s": peak,
                "target_bytes_per_s": 2.5e9,
                "reached_target": False,
            },
        },
    ]
    man = manifest(
        "20261130T142000Z-noisy-neighbour-c41d07",
        "throughput",
        "complete",
        phases,
        "noisy-neighbour",
        "2026-11-30T14:20:00.000Z",
        "2026-11-30T14:21:30.000Z",
    )
    write(man["run_id"], man, rows_q + rows_n, prompt_rows([n] * n_prompts), {"noise.jsonl": noise_rows})


def interrupted_run(rng: random.Random) -> None:
    n_prompts, n = 10, 20_000
    prefill = (A * n + C * n * n) * 4
    jobs = [(p, n, prefill, False) for p in range(n_prompts)] * 2
    rows, end = closed_loop(rng, jobs[:13], 4, 1.0, 0, "baseline", "baseline")
    phases = [
        {
            "name": "baseline",
            "label": "baseline",
            "repetition": 0,
            "started_ns": int(1e9),
            "ended_ns": None,
            "duration_s": None,
            "requests": 13,
            "errors": 0,
            "cold_verified": True,
            "noise": None,
        }
    ]
    man = manifest(
        "20261130T143000Z-throughput-interrupted-a1b2c3",
        "throughput",
        "interrupted",
        phases,
        "throughput",
        "2026-11-30T14:30:00.000Z",
        "2026-11-30T14:30:40.000Z",
    )
    torn = json.dumps(row(99, "baseline", "baseline", 0, 3, n, end, prefill, 32))[:57]  # killed mid-write
    write(man["run_id"], man, rows, prompt_rows([n] * n_prompts), torn=torn)


def killed_empty_run() -> None:
    phases = [
        {
            "name": "ttft",
            "label": "cold+warm",
            "repetition": 0,
            "started_ns": 400_000_000,
            "ended_ns": None,
            "duration_s": None,
            "requests": 0,
            "errors": 0,
            "cold_verified": None,
            "noise": None,
        }
    ]
    man = manifest(
        "20261130T144000Z-ttft-dead01", "ttft", "running", phases, "ttft", "2026-11-30T14:40:00.000Z", None
    )
    write(man["run_id"], man, [], [])


def main() -> None:
    rng = random.Random(7)
    ttft_run(rng)
    throughput_run(rng)
    noisy_run(rng)
    interrupted_run(rng)
    killed_empty_run()


if __name__ == "__main__":
    main()
