"""A sessions run's load in the report's Run table: users, turns planned, first-turn tokens and the
loop, read from the manifest's sessions-* load (never the probe the run starts with)."""

from __future__ import annotations

from kvbench.report.core.formats import fmt
from kvbench.results.schema import LoadShape


def sessions_load_rows(load: LoadShape | None, source: str | None = None) -> list[list[str]]:
    """A sessions run's load as its users and turns (the manifest's sessions-* load), never the probe
    the run starts with; an older manifest whose load is that probe says so."""
    if load is None or not load.kind.startswith("sessions-"):
        probe = (
            f": its load ({load.kind}, {fmt(load.prompt_count)} prompt(s)) is the run's probe" if load else ""
        )
        return [["load", f"users and turns not recorded in this manifest{probe}; see the per-turn table"]]
    users = fmt(load.prompt_count)
    if load.kind == "sessions-open":
        loop = f"users arrive at {fmt(load.rate)}/s, at most {fmt(load.concurrency)} at once (open loop)"
    else:
        loop = f"{fmt(load.concurrency)} users at once, the next starting as one finishes (closed loop)"
    lengths = load.lengths if isinstance(load.lengths, list) else [load.lengths.min]
    rows = [
        ["load", f"sessions of {users} users: {loop} (from {source or 'manifest load'})"],
        ["users", users],
        ["turns planned per phase", fmt(load.requests)],
        ["first-turn tokens", f"{lengths[0]:,} (system prompt + first message)" if lengths else "n/a"],
    ]
    if len(lengths) > 1:
        rows.append(["tokens added per later turn", f"{lengths[1]:,} plus the previous answer"])
    rows.append(["output tokens per turn (most)", fmt(load.max_tokens)])
    return rows
