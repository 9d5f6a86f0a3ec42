"""`make bench`'s summary, targets and markdown (benchmarks/results/latest.md).

The block between the `bench-table` markers is what benchmarks/readme_table.py copies into
docs/performance.md: the side-by-side table of one run, with its date, machine and versions.
"""

from __future__ import annotations

from typing import Any

from before_rule import rule_markdown, rule_met
from ray_bench import ray_table

BEGIN, END = "<!-- bench-table:begin -->", "<!-- bench-table:end -->"

# the issues' targets (#18; TTFT at 28 connections: #30, kernel-stamped sends); "today's" capacity
# and CPU are those of kvbench as it was before #30 (that commit's code, in the paired `rule` case:
# before_rule.py), or kvbench_rx's in the capacity case where that commit could not run
TARGETS: dict[str, tuple[str, float | str]] = {
    "ttft_error_mean_ms": ("<=", 0.05),
    "ttft_error_p99_ms": ("<=", 0.2),
    "capacity_error_p99_ms": ("<=", 2.0),
    "load_256_error_p99_ms": ("<=", 3.0),
    "capacity_req_s": (">=", "kvbench_rx"),
    "cpu_ms_per_request": ("<=", "kvbench_rx"),
    "peak_rss_mb": ("<=", 100.0),
    "long_prompt_extra_error_ms": ("<=", 2.0),
    "prompt_build_s": ("<=", 10.0),
    "cli_help_s": ("<=", 0.3),
}
TOOL_NAMES = {
    "kvbench": "kvbench",
    "kvbench_rx": "kvbench, kernel receive stamps only",
    "kvbench_user": "kvbench, loop stamps (before #18)",
    "kvbench_before": "kvbench before #30",
    "vllm": "vLLM bench serve",
    "aiohttp": "aiohttp client (uvloop)",
    "aiperf": "AIPerf",
}


KVBENCH = ("kvbench", "kvbench_rx", "kvbench_user")


def _m(res: dict[str, Any], case: str, tool: str) -> dict[str, Any] | None:
    c = res.get(case)
    return None if c is None or tool not in c else c[tool]["median"]


def summary(res: dict[str, Any]) -> dict[str, Any]:
    s: dict[str, Any] = {}
    if (m := _m(res, "ttft", "kvbench")) is not None:
        s.update(ttft_error_mean_ms=m["error_mean_ms"], ttft_error_p99_ms=m["error_p99_ms"])
    if (m := _m(res, "capacity", "kvbench")) is not None:
        s.update(capacity_error_p99_ms=m["error_p99_ms"], capacity_req_s=m["req_s"])
        s.update(cpu_ms_per_request=m["cpu_ms_per_request"], peak_rss_mb=m["peak_rss_mb"])
    if (m := _m(res, "ttft", "kvbench")) is not None and "peak_rss_mb" in s:
        s["peak_rss_mb"] = max(s["peak_rss_mb"], m["peak_rss_mb"])
    if "load" in res and "256" in res["load"]:
        s["load_256_error_p99_ms"] = res["load"]["256"]["kvbench"]["median"]["error_p99_ms"]
        lo = res["load"].get("1", {}).get("kvbench")
        if lo is not None:
            s["load_growth_mean_ms"] = (
                res["load"]["256"]["kvbench"]["median"]["error_mean_ms"] - (lo["median"]["error_mean_ms"])
            )
    if "seq_130k" in res:
        s["long_prompt_extra_error_ms"] = (
            res["seq_130k"]["median"]["error_mean_ms"] - res["seq_1k"]["median"]["error_mean_ms"]
        )
    if "prompt_build" in res:
        s["prompt_build_s"] = res["prompt_build"]["build_s"]
    if "cli_help" in res:
        s["cli_help_s"] = res["cli_help"]["median_s"]
    s["met"] = {k: _meets(res, k, v) for k, v in s.items() if k in TARGETS}
    if res.get("rule"):  # judged on the paired repeats' median ratio, not on two medians
        s["met"].update({k: v for k, v in rule_met(res["rule"]).items() if k in s["met"]})
    return s


def _target(res: dict[str, Any], key: str) -> float | None:
    _, target = TARGETS[key]
    if isinstance(target, float):
        return target
    field = {"capacity_req_s": "req_s", "cpu_ms_per_request": "cpu_ms_per_request"}[key]
    if res.get("rule"):  # before #30's own median in the paired case
        return float(res["rule"]["tools"]["kvbench_before"]["median"][field])
    m = _m(res, "capacity", target)
    return None if m is None else float(m[field])


def _meets(res: dict[str, Any], key: str, value: float) -> bool | None:
    target = _target(res, key)
    if target is None:
        return None
    return value <= target if TARGETS[key][0] == "<=" else value >= target


def _pair(m: dict[str, Any] | None, a: str = "error_mean_ms", b: str = "error_p99_ms") -> str:
    return "-" if m is None else f"{m[a]:.2f} / {m[b]:.2f}"


def _one(m: dict[str, Any] | None, key: str, spec: str = ".2f") -> str:
    return "-" if m is None else format(m[key], spec)


def main_table(res: dict[str, Any]) -> list[str]:
    tools = [t for t in TOOL_NAMES if t in res.get("tools", [])]
    ver = res["machine"]["versions"]
    names = [TOOL_NAMES[t] + (f" {ver[t]}" if t in ("vllm", "aiperf") and t in ver else "") for t in tools]
    s = res["summary"]
    lines = ["| measure | " + " | ".join(names) + " | target (kvbench) | met |"]
    lines.append("|---" * (len(tools) + 3) + "|")

    def row(label: str, cells: list[str], *keys: str) -> None:
        tgts, mets = [], []
        for key in (k for k in keys if k in s):
            t = _target(res, key)
            if t is None:
                continue
            num = f"{t:,.0f}" if t >= 100 else f"{t:.3g}"
            tgts.append(num if tgts else f"{TARGETS[key][0]} {num}".replace("<=", "≤").replace(">=", "≥"))
            mets.append(s["met"].get(key))
        met = "" if not mets else ("yes" if all(mets) else "NO")
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {' / '.join(tgts)} | {met} |")

    if "ttft" in res:
        cells = [_pair(_m(res, "ttft", t)) for t in tools]
        row(
            "TTFT error mean / p99, ms (28 conn, 50 ms server)",
            cells,
            "ttft_error_mean_ms",
            "ttft_error_p99_ms",
        )
        cells = [_pair(_m(res, "ttft", t), "error_all_mean_ms", "error_all_p99_ms") for t in tools]
        row("… counting each connection's first request (TCP connect), ms", cells)
        cells = [_pair(_m(res, "ttft", t), "error_first_mean_ms", "error_first_p99_ms") for t in tools]
        row("… each connection's first request alone (connect and first write), ms", cells)
    if "itl10" in res:
        cells = [_pair(_m(res, "itl10", t)) for t in tools]
        row("TTFT error mean / p99, ms (28 conn, 50 ms server, tokens 10 ms apart)", cells)
    if "capacity" in res:
        cap = [_m(res, "capacity", t) for t in tools]
        row(
            "TTFT error mean / p99 at capacity, ms (64 conn, 0 ms)",
            [_pair(m) for m in cap],
            "capacity_error_p99_ms",
        )
        cells = [_pair(m, "error_all_mean_ms", "error_all_p99_ms") for m in cap]
        row("… counting each connection's first request (TCP connect), ms", cells)
        row("capacity, req/s (64 conn, 0 ms)", [_one(m, "req_s", ",.0f") for m in cap], "capacity_req_s")
        cells = [_one(m, "cpu_ms_per_request", ".3f") for m in cap]
        row("client CPU per request at capacity, ms", cells, "cpu_ms_per_request")
        cells = [_one(m, "peak_rss_mb", ".0f") for m in cap]
        row("peak RSS, MB (capacity run, whole process)", cells, "peak_rss_mb")
    for level, case in res.get("load", {}).items():
        cells = [_pair(case[t]["median"]) if t in case else "-" for t in tools]
        row(f"TTFT error mean / p99, ms ({level} conn, 0–5 ms server)", cells,
            *(["load_256_error_p99_ms"] if level == "256" else []))  # fmt: skip
    if "load_burst" in res:
        cells = [_pair(_m(res, "load_burst", t)) for t in tools]
        row("… 256 conn, each response's tokens written at once, ms", cells)
    return lines


def markdown(res: dict[str, Any]) -> str:
    m = res["machine"]
    v = m["versions"]
    s = res["summary"]
    vers = ", ".join(f"{k} {val}" for k, val in v.items())
    lines = [
        "# kvbench harness overhead, peers side by side (`make bench`)",
        "",
        BEGIN,
        f"Measured {res['date']} in one `make bench` run (peers: {res['peers']}); {m['nproc']} CPUs, "
        f"{m['cpu_model']}, {m['platform']}; {vers}. Ground-truth server (benchmarks/gt_server.py) on "
        f"core {m['server_cores']}, the client on {m['client_cores']}; median of {res['repeats']} runs, "
        f"tools interleaved; whole bench {res['bench_wall_s']:.0f} s."
        + (f" {res['note']}" if res.get("note") else ""),
        "",
        *main_table(res),
        "",
        "TTFT error = client TTFT − server TTFT (first token written − request received, the server "
        "kernel's receive stamp), per request id; each connection's first request, which also waited "
        "for its TCP connect (the same for every tool), is left out except in the rows that say so. "
        "kvbench's start is the kernel's TX stamp of the request's last byte (send_clock_source "
        "kernel_tx), its first token the kernel's RX stamp, so its first-request rows hold no TCP "
        "connect (the request had not left), the other tools' do. `kernel receive stamps only` is "
        "KVBENCH_TX_STAMPS=0 (the send stamped by the loop before connect and write, as before #30)."
        + (
            " The capacity and CPU targets are kvbench's own before #30 (the paired table below)."
            if res.get("rule")
            else " The capacity and CPU targets are that column's figures."
        )
        + " `loop stamps` is KVBENCH_KERNEL_STAMPS=0.",
        *rule_markdown(res),
        *([f"AIPerf: not in this run: {res['aiperf']}"] if res.get("aiperf", "ran") != "ran" else []),
        *ray_table(res),
        END,
        "",
    ]
    if "load_growth_mean_ms" in s:
        lines.append(
            f"kvbench's mean error from 1 to 256 connections moved by {s['load_growth_mean_ms']:+.2f} ms."
        )
    extra = [
        ("130k-token prompt: extra TTFT error (one at a time), ms", "long_prompt_extra_error_ms"),
        ("build + verify 100 x 130k-token prompts, s", "prompt_build_s"),
        ("`kvbench --help`, s", "cli_help_s"),
    ]
    rows = [(label, k) for label, k in extra if k in s]
    if rows:
        lines += ["", "| kvbench only | value | target | met |", "|---|---|---|---|"]
        for label, k in rows:
            op, t = TARGETS[k]
            lines.append(f"| {label} | {s[k]:.2f} | {op} {t:g} | {'yes' if s['met'][k] else 'NO'} |")
    lines += ["", "kvbench's error split (ms; mean / p50 / p99; lag = loop stamp − kernel stamp):", ""]
    lines += [
        "| run | n | error | send | return | lag | first read held later tokens | in flight | kernel sends |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in _split_rows(res):
        lines.append(
            f"| {name} | {r['n']:.0f} | " + " | ".join(
                f"{r[f'{k}_mean_ms']:.2f} / {r[f'{k}_p50_ms']:.2f} / {r[f'{k}_p99_ms']:.2f}"
                for k in ("error", "send", "return", "lag")
            ) + f" | {_merged(r)} | {r['in_flight_mean']:.1f} | {_frac(r.get('send_kernel_frac'))} |"
        )  # fmt: skip
    for key, who in (("cpu", "kvbench"), ("cpu_user", "kvbench with loop stamps")):
        if key in res:
            c = res[key]["median"]
            lines.append(
                f"\n{who}: CPU per request at 28 connections ({res['cpu']['runs'][0]['n']} requests): "
                f"{c['cpu_ms_per_request']:.3f} ms ({c['user_ms_per_request']:.3f} user + "
                f"{c['sys_ms_per_request']:.3f} system)."
            )
    if "floor" in res and "ttft" in res:
        fl, t = res["floor"], res["ttft"]["kvbench"]["median"]
        lines.append(
            f"In flight at 28 connections (server's count at each arrival / averaged over time): kvbench "
            f"{t['in_flight_mean']:.1f} / {t['in_flight_time_avg']:.1f}; a raw-socket client with no parsing "
            f"(benchmarks/min_client.py) {fl['in_flight_mean']:.1f} / {fl['in_flight_time_avg']:.1f}."
        )
    lines.append("")
    return "\n".join(lines)


def _split_rows(res: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    rows = []
    for case, label in (
        ("ttft", "28 conn, 50 ms server"),
        ("itl10", "28 conn, 50 ms server, ITL 10 ms"),
        ("capacity", "64 conn, 0 ms server"),
    ):
        for tool in KVBENCH:
            if (m := _m(res, case, tool)) is not None:
                rows.append((f"{label}, {TOOL_NAMES[tool]}", m))
    for level, case in res.get("load", {}).items():
        for tool in KVBENCH:
            if tool in case:
                rows.append((f"{level} conn, 0–5 ms server, {TOOL_NAMES[tool]}", case[tool]["median"]))
    for tool in KVBENCH:
        if (m := _m(res, "load_burst", tool)) is not None:
            rows.append((f"256 conn, 0–5 ms server, tokens at once, {TOOL_NAMES[tool]}", m))
    for key, label in (
        ("cpu", "28 conn, 2,000 requests"),
        ("long_prompt", "130k-token prompts, 28 conn"),
        ("seq_1k", "1k, one at a time"),
        ("seq_130k", "130k, one at a time"),
    ):
        if key in res:
            rows.append((label, res[key]["median"]))
    if "mock_crosscheck" in res:
        rows.append(("kvbench mock fixed-delay (1 run)", res["mock_crosscheck"]))
    return rows


def _merged(r: dict[str, Any]) -> str:
    frac = r.get("first_read_merged_frac")
    if frac is None or frac != frac:  # nan: tokens not paced apart, nothing to see
        return "-"
    return f"{frac:.0%} (+{r['first_read_merged_tokens_mean']:.1f} tokens)"


def _frac(x: float | None) -> str:
    return "-" if x is None or x != x else f"{x:.0%}"
