"""A sessions run's load in the report's Run table: users, turns planned and done, message sizes,
think time and the loop, read from manifest.sessions (never the probe the run starts with); an
older manifest falls back to its sessions-* load, and one older still says its load is the probe."""

from __future__ import annotations

from kvbench.report.core.formats import fmt
from kvbench.results.schema import LoadShape, SessionsRecord


def sessions_load_rows(
    load: LoadShape | None, source: str | None = None, sessions: SessionsRecord | None = None
) -> list[list[str]]:
    """A sessions run's load as its users and turns, from the record when the manifest has one."""
    if sessions is not None:
        return record_rows(sessions)
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


def record_rows(s: SessionsRecord) -> list[list[str]]:
    """manifest.sessions as Run-table rows."""
    users = fmt(s.users)
    if s.loop == "open":
        loop = (
            f"users arrive at {fmt(s.arrival_rate_per_s)}/s ({s.arrivals}), at most {fmt(s.active_users)} "
            "at once (open loop)"
        )
    else:
        loop = f"{fmt(s.active_users)} users at once, the next starting as one finishes (closed loop)"
    per_user = (
        fmt(s.turns_per_user_min)
        if s.turns_per_user_min == s.turns_per_user_max
        else f"{fmt(s.turns_per_user_min)}-{fmt(s.turns_per_user_max)}"
    )
    rows = [
        ["load", f"sessions of {users} users: {loop} (from manifest sessions)"],
        ["users", users],
        ["turns planned per phase", f"{fmt(s.turns_planned)} ({per_user} per user)"],
    ]
    rows += [
        [
            f"turns done: {d.phase}",
            _done_text(d.turns, d.per_user_min, d.per_user_max, d.users_all_turns, s.users),
        ]
        for d in s.done
    ]
    rows += [
        [
            "first-turn tokens",
            f"{s.first_turn_tokens:,} (system prompt {s.system_prompt_tokens:,} + first message "
            f"{s.first_message_tokens:,})",
        ],
        ["tokens added per later turn", f"{s.turn_tokens:,} plus the previous answer"],
        ["think time", _think_text(s.think_time)],
        ["context cap", f"{s.max_context_tokens:,} tokens (a user stops before a turn past it)"],
        ["output tokens per turn (most)", fmt(s.max_tokens)],
    ]
    return rows


def _done_text(turns: int, lo: int, hi: int, finished: int, users: int) -> str:
    per_user = fmt(lo) if lo == hi else f"{fmt(lo)}-{fmt(hi)}"
    return (
        f"{fmt(turns)} ({per_user} per user; {fmt(finished)} of {fmt(users)} users took every planned turn)"
    )


def _think_text(t: dict[str, object]) -> str:
    kind = t.get("distribution", "?")
    if kind == "fixed":
        text = f"fixed {t.get('mean_s')} s"
    elif kind == "uniform":
        text = f"uniform {t.get('min_s')}-{t.get('max_s')} s"
    else:
        cap = f", max {t.get('max_s')} s" if t.get("max_s") is not None else ""
        text = f"{kind}, mean {t.get('mean_s')} s (min {t.get('min_s')} s{cap})"
    if t.get("long_probability"):
        text += f"; {t.get('long_probability')} of pauses long ({t.get('long_s')} s)"
    return text
