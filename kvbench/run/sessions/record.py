"""What a sessions run's manifest says it ran (`manifest.sessions`): its users and their turns,
planned before the first phase and done as each phase ends, the message sizes, the think time and
the loop. The report's Run table reads it, so the record is the run, never the probe before it."""

from __future__ import annotations

from kvbench.load.sessions import SessionPlan
from kvbench.results.schema import SessionsDone, SessionsRecord
from kvbench.scenario import SessionsSection


def sessions_record(
    knobs: SessionsSection, plans: list[SessionPlan], max_tokens: int, cap: int
) -> SessionsRecord:
    """The plan as the run will send it (no phase done yet)."""
    per_user = [p.turns for p in plans]
    open_loop = knobs.arrival_rate_per_s is not None
    return SessionsRecord(
        users=len(plans),
        loop="open" if open_loop else "closed",
        active_users=knobs.max_active,
        arrival_rate_per_s=knobs.arrival_rate_per_s,
        arrivals=knobs.arrivals if open_loop else None,
        turns_planned=sum(per_user),
        turns_per_user_min=min(per_user, default=0),
        turns_per_user_max=max(per_user, default=0),
        system_prompt_tokens=knobs.system_prompt_tokens,
        first_message_tokens=knobs.first_message_tokens,
        first_turn_tokens=knobs.system_prompt_tokens + knobs.first_message_tokens,
        turn_tokens=knobs.turn_tokens,
        think_time=knobs.think_time.model_dump(mode="json"),
        max_context_tokens=cap,
        max_tokens=max_tokens,
        baseline=knobs.baseline,
    )


def phase_done(name: str, planned: dict[int, int], done: dict[int, int]) -> SessionsDone:
    """A phase's users against what they planned (`planned`, `done`: session id -> turns)."""
    took = [done.get(s, 0) for s in planned]
    return SessionsDone(
        phase=name,
        turns=sum(took),
        per_user_min=min(took, default=0),
        per_user_max=max(took, default=0),
        users_all_turns=sum(1 for s, n in planned.items() if done.get(s, 0) >= n),
    )
