"""`make bench`'s case `rule` (#30): capacity and CPU per request must not get worse than kvbench's own
before #30, judged on pairs measured side by side.

Three kvbench builds at capacity (64 connections, 0 ms server, tokens at once, RULE_REQUESTS
requests): today's (kernel send and receive stamps), today's with send stamps off (KVBENCH_TX_STAMPS=0:
what the send stamps cost on their own), and the code as it was before #30 (git archive of
--before-rev). A shared 2-core machine moves a run's capacity by tens of percent from one minute to
the next (a repeat of every tool slowed together is common), more than the few percent the rule is
about; so each repeat runs the three back to back, in alternating order, and the verdict is the median
of the repeats' ratios (today / before), each ratio taken within one repeat. RULE_REQUESTS is large so
that a child's start-up, subtracted as the bench's baseline run, is a small part of its CPU.
"""

from __future__ import annotations

from typing import Any

RULE_TOOLS = ("kvbench", "kvbench_before", "kvbench_rx")
RULE_REQUESTS = 6000
RULE_REPEATS = 7


def rule_case(bench: Any, repeats: int) -> dict[str, Any]:
    """The three builds, `repeats` times interleaved; per tool its runs, and the paired ratios."""
    from bench_common import completed_rate, log, med, median_dict

    reps: dict[str, list[dict[str, float]]] = {t: [] for t in RULE_TOOLS}
    for i in range(repeats):
        for tool in RULE_TOOLS if i % 2 == 0 else RULE_TOOLS[::-1]:  # alternating: drift cancels
            run, _ = bench.run_tool(tool, "rule", RULE_REQUESTS, 64, ttft_ms=0.0, decode_ms=0.0)
            reps[tool].append(
                {
                    "req_s": completed_rate(run["common"]),
                    "cpu_ms_per_request": bench.cpu_per_request(tool, run, RULE_REQUESTS),
                }
            )
    out: dict[str, Any] = {
        "requests": RULE_REQUESTS,
        "repeats": repeats,
        "tools": {t: {"median": median_dict(r), "runs": r} for t, r in reps.items()},
    }
    for key, field in (("capacity", "req_s"), ("cpu", "cpu_ms_per_request")):
        for other in ("kvbench_before", "kvbench_rx"):
            ratios = [
                a[field] / b[field] for a, b in zip(reps["kvbench"], reps[other], strict=True) if b[field] > 0
            ]
            out[f"{key}_ratio_{other}"] = {"median": med(ratios), "runs": ratios}
    log(
        f"rule: capacity today/before {out['capacity_ratio_kvbench_before']['median']:.3f}, "
        f"CPU today/before {out['cpu_ratio_kvbench_before']['median']:.3f} (median of {repeats} pairs)"
    )
    return out


def rule_met(rule: dict[str, Any]) -> dict[str, bool]:
    """The rule's verdicts: today's capacity at least, and its CPU per request at most, before #30's."""
    return {
        "capacity_req_s": rule["capacity_ratio_kvbench_before"]["median"] >= 1.0,
        "cpu_ms_per_request": rule["cpu_ratio_kvbench_before"]["median"] <= 1.0,
    }


def rule_markdown(res: dict[str, Any]) -> list[str]:
    """The rule's table (docs/performance.md bench-table block): medians per build, paired ratios."""
    rule = res.get("rule")
    if not rule:
        return []
    rev = (res.get("before") or {}).get("rev", "?")
    t = rule["tools"]
    names = ("kvbench", "kvbench, send stamps off", f"kvbench at {rev} (before #30)")
    order = ("kvbench", "kvbench_rx", "kvbench_before")
    met = rule_met(rule)

    def ratio(key: str, other: str) -> str:
        r = rule[f"{key}_ratio_{other}"]
        return f"{r['median']:.3f} ({min(r['runs']):.2f}–{max(r['runs']):.2f})"

    return [
        "",
        f"#30's rule, capacity and CPU per request not worse than kvbench before #30: {rule['repeats']} "
        f"repeats of the three builds back to back (alternating order), {rule['requests']:,} requests each, "
        "64 connections, 0 ms server; the verdict is the median of the repeats' ratios:",
        "",
        "| 64 conn, 0 ms server | "
        + " | ".join(names)
        + " | today / before (range) | today / send stamps off | met |",
        "|---" * 7 + "|",
        "| capacity, req/s (median) | "
        + " | ".join(f"{t[k]['median']['req_s']:,.0f}" for k in order)
        + f" | {ratio('capacity', 'kvbench_before')} | {ratio('capacity', 'kvbench_rx')} | "
        + ("yes" if met["capacity_req_s"] else "NO")
        + " |",
        "| client CPU per request, ms (median) | "
        + " | ".join(f"{t[k]['median']['cpu_ms_per_request']:.3f}" for k in order)
        + f" | {ratio('cpu', 'kvbench_before')} | {ratio('cpu', 'kvbench_rx')} | "
        + ("yes" if met["cpu_ms_per_request"] else "NO")
        + " |",
    ]
