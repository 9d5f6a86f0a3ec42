"""One row per conversation turn (turns.jsonl) and the per-turn table built from those rows.

A turn's timed request is also a row of requests.jsonl (same `request_id`); turns.jsonl adds
what only a conversation has: which user and turn, how long the history is, how much of it the
server reused, from which tier, and how long the user paused. Pure (no pandas): the console
table at the end of a run and the report (kvbench.report.sessions.turns) read the same functions.

Serving tier: the tier that served most of the turn's cached tokens (`tokens_by_tier`), or
`none` when nothing was reused. Its source, `tier_source`, says how it is known: the mock's
ground truth (exact, per request), the engine's per-tier counters around a turn that had the
server to itself (exact), or nothing (`overlapped`: counters moved for several requests at
once, so they cannot be split; `unavailable`: the engine has no per-tier counter).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

TURNS = "turns.jsonl"
TIER_ORDER = ("G1", "G2", "G3", "G4")
# sources that are not a cache tier (vLLM's prompt_tokens_by_source counts computed tokens too)
COMPUTED = frozenset({"local_compute", "compute"})
TierSource = Literal["mock_ground_truth", "counters", "overlapped", "unavailable"]


class TurnRow(BaseModel):
    """One turn of one user's conversation (a line of turns.jsonl)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    phase: str = Field(description="Phase name (cached, baseline, with -rN when repeated).")
    label: str = Field(description="cached: history reusable; baseline: a fresh salt every turn.")
    session_id: int = Field(description="The user (conversation), 0-based.")
    turn: int = Field(description="Turn index within the conversation, 0-based.")
    request_id: str = Field(description="The timed request's id in requests.jsonl.")
    ok: bool = Field(description="The request succeeded.")
    context_tokens: int | None = Field(
        description="Prompt tokens of the turn (whole history + new message, chat template applied), "
        "counted by the server's /tokenize before sending; null where it has none."
    )
    prompt_tokens_server: int | None = Field(description="usage.prompt_tokens the server reported.")
    new_tokens: int | None = Field(
        description="Tokens the previous turn's prompt did not contain: the previous answer, the new "
        "user message and their template tokens (the whole prompt on turn 0)."
    )
    user_tokens: int | None = Field(description="Content tokens of this turn's user message.")
    cached_tokens: int | None = Field(description="usage.prompt_tokens_details.cached_tokens.")
    output_tokens: int | None = Field(description="Answer tokens.")
    ttft_ms: float | None = Field(description="Time to first content token, ms.")
    e2e_ms: float | None = Field(description="Whole request, ms.")
    tier: str | None = Field(
        description="Tier that served most cached tokens (G1..G4, or an engine's source name); "
        "`none` when nothing was reused; null when unknown."
    )
    tokens_by_tier: dict[str, float] = Field(
        default_factory=dict, description="Cached tokens by tier (or source) for this turn."
    )
    tier_source: TierSource = Field(
        description="How the tier is known: mock_ground_truth (exact), counters (the engine's per-tier "
        "counter around a turn alone on the server), overlapped (other turns ran meanwhile: not split), "
        "unavailable (no per-tier counter)."
    )
    think_s: float = Field(description="Planned pause before this turn, s (0 on turn 0).")
    since_prev_turn_s: float | None = Field(
        description="From the end of this user's previous answer to this request's send, s."
    )
    in_flight: int = Field(
        description="Timed requests of the phase in flight when this one was sent (itself included)."
    )
    sent_ns: int | None = Field(description="Send time on the run's clock (see requests.jsonl).")
    answer_truncated: bool = Field(
        False, description="The answer kept for the history is shorter than what the server sent."
    )


def serving_tier(tokens_by_tier: Mapping[str, float], cached: int | None) -> str | None:
    """The tier that served most cached tokens (ties: the slower tier); `none` for no reuse."""
    if cached == 0:
        return "none"
    positive = {k: v for k, v in tokens_by_tier.items() if v > 0 and k not in COMPUTED}
    if not positive:
        return None
    order = {t: i for i, t in enumerate(TIER_ORDER)}
    return max(positive, key=lambda k: (positive[k], order.get(k, -1)))


def _median(xs: Iterable[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return statistics.median(vals) if vals else None


def per_turn(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One line per turn index: context, TTFT cached vs baseline (medians), paired speedup
    (median over users of baseline/cached for the same user and turn), hit ratio (cached over
    context tokens, summed), and the most common serving tier of the cached turns."""
    cached: dict[int, list[Mapping[str, Any]]] = {}
    base: dict[tuple[int, int], float] = {}
    base_by_turn: dict[int, list[float]] = {}
    for r in rows:
        if not r.get("ok"):
            continue
        if r["label"] == "baseline":
            if r.get("ttft_ms") is not None:
                base[(r["session_id"], r["turn"])] = r["ttft_ms"]
                base_by_turn.setdefault(r["turn"], []).append(r["ttft_ms"])
        else:
            cached.setdefault(r["turn"], []).append(r)
    out = []
    for turn in sorted(set(cached) | set(base_by_turn)):
        rs = cached.get(turn, [])
        ctx = [_context(r) for r in rs]
        ratios = [
            base[(r["session_id"], turn)] / r["ttft_ms"]
            for r in rs
            if (r["session_id"], turn) in base and r.get("ttft_ms")
        ]
        hit_num = sum(r.get("cached_tokens") or 0 for r in rs)
        hit_den = sum(c or 0 for c in ctx)
        tiers = Counter(r.get("tier") for r in rs if r.get("tier"))
        out.append(
            {
                "turn": turn,
                "users": len(rs),
                "context_tokens": _median(ctx),
                "ttft_cached_ms": _median(r.get("ttft_ms") for r in rs),
                "ttft_baseline_ms": _median(base_by_turn.get(turn, [])),
                "speedup": _median(ratios),
                "hit_ratio": hit_num / hit_den if hit_den else None,
                "tier": tiers.most_common(1)[0][0] if tiers else None,
                "tiers": dict(tiers),
            }
        )
    return out


def _context(r: Mapping[str, Any]) -> int | None:
    c = r.get("context_tokens")
    return c if c is not None else r.get("prompt_tokens_server")


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def turn_table_lines(table: list[dict[str, Any]]) -> list[str]:
    """The per-turn table as fixed-width console lines."""
    lines = [
        f"{'turn':>4} {'users':>5} {'context':>8} {'TTFT cached ms':>14} {'baseline ms':>11} "
        f"{'speedup':>7} {'hit':>6}  {'tier'}"
    ]
    for t in table:
        lines.append(
            f"{t['turn']:>4} {t['users']:>5} {_fmt(t['context_tokens'], ',.0f'):>8} "
            f"{_fmt(t['ttft_cached_ms'], ',.1f'):>14} {_fmt(t['ttft_baseline_ms'], ',.1f'):>11} "
            f"{_fmt(t['speedup'], '.1f'):>7} {_fmt(t['hit_ratio'], '.1%'):>6}  {t['tier'] or '-'}"
        )
    return lines


def per_tier(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Cached-phase turns grouped by serving tier: how many, median TTFT, context and pause.

    This is the returning-user reading: turns served from G3/G4 after a long pause set beside
    the immediate follow-ups served from G1, and beside the recomputed (`none`) turns."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        if r.get("ok") and r["label"] != "baseline" and r.get("turn", 0) > 0:
            groups.setdefault(str(r.get("tier") or "unknown"), []).append(r)
    order = {t: i for i, t in enumerate((*TIER_ORDER, "none", "unknown"))}
    return [
        {
            "tier": tier,
            "turns": len(rs),
            "ttft_ms": _median(r.get("ttft_ms") for r in rs),
            "context_tokens": _median(_context(r) for r in rs),
            "since_prev_turn_s": _median(r.get("since_prev_turn_s") for r in rs),
        }
        for tier, rs in sorted(groups.items(), key=lambda kv: order.get(kv[0], -1))
    ]
