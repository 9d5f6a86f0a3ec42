"""`make bench`'s local-worker rows (#30 item 2): kvbench's load sent by 1 and 2 local worker
processes (`--set load.workers=K`, no cluster), beside the single-process path, at 256 connections.

Cases, tools interleaved, --repeats times (median):
  lw_load256     256 connections, 2,000 requests, server TTFT drawn in 0-5 ms, 16 tokens 1 ms
                 apart (the load case's 256 level): TTFT error mean / p99 and completed req/s
  lw_capacity    256 connections, 0 ms server, tokens at once: completed req/s = the client's
                 ceiling, and its CPU per request

Cores: the server on core 0, the kvbench process on core 1 (bench_common.core_plan); its worker
processes inherit that affinity, so on a 2-core machine the driver and its K workers SHARE core 1:
what this measures here is what the multi-process path costs, not how it scales (that needs a
core per worker, see docs/ray.md "Load from several local processes").

CPU per request: the kvbench child's rusage (wait4) holds its worker processes' CPU too (it reaps
them at the end of the run), less the same command doing 1 request (start-up, the K spawns); the
workers' share is what they report over the phase (`phases[].load_backend.workers[].cpu_s`), the
rest is the driver's: taking rows in and writing them. 1 / the driver's CPU per row is how many
rows per second one driver can take in, whatever the number of workers.
"""

from __future__ import annotations

from typing import Any

LOCAL_WORKERS = {"kvbench_lw1": 1, "kvbench_lw2": 2}  # tool: load.workers (--workers changes it)
TARGET_P99_MS = 3.0  # the done-when: 256 connections through 2 local workers, p99 <= 3 ms
PIN = {"on": False}  # --pin-workers: load.pin (worker i on the i-th client core)


def configure(counts: list[int], pin: bool) -> None:
    """The worker counts to compare with the single process (`--workers 1,2,4`), and whether each
    worker gets a client core of its own (`--pin-workers`: needs --client-cores with K+1 cores)."""
    LOCAL_WORKERS.clear()
    LOCAL_WORKERS.update({f"kvbench_lw{k}": k for k in sorted(set(counts))})
    PIN["on"] = pin


def local_sets(tool: str) -> dict[str, object]:
    """The scenario keys that send a kvbench run's load from this tool's local worker processes."""
    sets: dict[str, object] = {"load.workers": LOCAL_WORKERS[tool]}
    if PIN["on"]:
        sets["load.pin"] = True
    return sets


def lw_cases(bench: Any, capacity_requests: int) -> dict[str, Any]:
    """The single-process path and 1 and 2 local workers, interleaved, at 256 connections."""
    from bench_common import log, med

    for tool in LOCAL_WORKERS:
        runs = [bench.run_tool(tool, "baseline", 1, 1)[0] for _ in range(bench.args.repeats)]
        bench.base[tool] = {k: med([r[k] for r in runs]) for k in ("cpu_s", "user_s", "sys_s", "maxrss_mb")}
        log(f"baseline {tool} (1 request): cpu {bench.base[tool]['cpu_s']:.3f} s")
    tools = ("kvbench", *LOCAL_WORKERS)
    return {
        "lw_load256": bench.case(
            "lw-load-256", 2000, 256, tools, ttft_ms=0.0, ttft_ms_max=5.0, decode_ms=1.0
        ),
        "lw_capacity": bench.case(
            "lw-capacity-256", capacity_requests, 256, tools, ttft_ms=0.0, decode_ms=0.0
        ),
    }


def lw_summary(res: dict[str, Any]) -> dict[str, Any]:
    """The issue's target (2 workers, 256 connections: p99 error <= 3 ms) and capacity vs the local path."""
    load, cap = res.get("lw_load256"), res.get("lw_capacity")
    if not load or "kvbench_lw2" not in load:
        return {}
    out: dict[str, Any] = {"p99_ms_2_workers": load["kvbench_lw2"]["median"]["error_p99_ms"]}
    out["met_p99"] = out["p99_ms_2_workers"] <= TARGET_P99_MS
    out["pinned"] = PIN["on"]
    if cap:
        local = cap["kvbench"]["median"]["req_s"]
        out["capacity_ratio"] = {t: cap[t]["median"]["req_s"] / local for t in LOCAL_WORKERS if t in cap}
        driver = cap.get("kvbench_lw2", {}).get("median", {}).get("driver_cpu_ms_per_request")
        if driver:
            out["driver_rows_per_s_ceiling"] = 1e3 / driver
    return out


def lw_markdown(res: dict[str, Any]) -> str:
    """The markdown rows: the single-process path and 1 and 2 local workers side by side."""
    s = res.get("lw_summary") or {}
    if not s:
        return ""
    load, cap = res["lw_load256"], res.get("lw_capacity") or {}
    machine = res.get("machine") or {}
    cores, server = machine.get("client_cores"), machine.get("server_cores")
    workers = [t for t in load if t != "kvbench"]
    shared = (
        "each worker pinned to a client core of its own"
        if s.get("pinned")
        else ("the workers share the client cores (on a 2-core machine, the driver's one core)")
    )
    heads = [f"{load_workers(t)} local worker{'s' * (load_workers(t) > 1)}" for t in workers]
    lines = [
        "",
        "## Load from local worker processes (`--set load.workers=K`, no cluster)",
        "",
        f"256 connections; {machine.get('nproc', '?')} CPUs; the server on core(s) {server}, kvbench "
        f"and its workers on client core(s) {cores}, {shared}:",
        "",
        "| measure | kvbench (one process) | " + " | ".join(heads) + " | target | met |",
        "|---" * (len(heads) + 4) + "|",
    ]
    med = {t: load[t]["median"] for t in ("kvbench", *workers)}
    cells = [
        ("TTFT error mean / p99, ms (0-5 ms server)", *(_pair(med[t]) for t in med),
         f"p99 ≤ {TARGET_P99_MS:g} ms (2 workers)", "yes" if s["met_p99"] else "NO"),
        ("completed req/s (0-5 ms server)", *(f"{med[t]['req_s']:,.0f}" for t in med), "", ""),
    ]  # fmt: skip
    if cap:
        cmed = {t: cap[t]["median"] for t in med}
        cells += [
            ("capacity: completed req/s (0 ms server)", *(f"{cmed[t]['req_s']:,.0f}" for t in cmed), "", ""),
            ("client CPU per request, ms (0 ms server; workers: driver + workers)",
             *(_cpu(cmed[t]) for t in cmed), "", ""),
            ("TTFT error mean / p99 at capacity, ms", *(_pair(cmed[t]) for t in cmed), "", ""),
        ]  # fmt: skip
    lines += ["| " + " | ".join(c) + " |" for c in cells]
    if s.get("driver_rows_per_s_ceiling"):
        row = ["-"] * (len(heads) + 1)
        row[1 + workers.index("kvbench_lw2")] = f"{s['driver_rows_per_s_ceiling']:,.0f}"
        lines.append(
            "| driver (2 workers): rows/s it can take in (1 / its CPU per row) | "
            + " | ".join(row)
            + " |  |  |"
        )
    return "\n".join(lines) + "\n"


def load_workers(tool: str) -> int:
    return int(tool.removeprefix("kvbench_lw"))


def _cpu(m: dict[str, Any]) -> str:
    if "driver_cpu_ms_per_request" not in m:
        return f"{m['cpu_ms_per_request']:.3f}"
    total, driver = m["cpu_ms_per_request"], m["driver_cpu_ms_per_request"]
    return f"{total:.3f} ({driver:.3f} + {m['worker_cpu_ms_per_request']:.3f})"


def _pair(m: dict[str, Any]) -> str:
    return f"{m['error_mean_ms']:.2f} / {m['error_p99_ms']:.2f}"
