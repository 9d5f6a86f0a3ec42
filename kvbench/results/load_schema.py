"""The manifest's account of what a run sent: its load shape, a replay's trace, a sessions run's
users and turns, a dataset's requests against the context; and `Record`, the base every
run-directory model shares. Split from kvbench.results.schema (which re-exports every name) so the
contract stays one model per concern; the rules of that module's docstring hold here too.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Record(BaseModel):
    """Base of every run-directory model: unknown keys are errors, instances are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class LengthRangeInfo(Record):
    min: int = Field(description="Shortest prompt, tokens.")
    max: int = Field(description="Longest prompt, tokens.")
    distribution: str = Field(
        description="uniform or fixed_mean; trace: a replayed trace's rows; dataset: a dataset's prompts "
        "as sent."
    )


class LoadShape(Record):
    """How hard the run pushed: what a reader needs to compare it with a published figure."""

    kind: str = Field(description="sequential, concurrent or rate.")
    concurrency: int = Field(description="Most requests in flight at once (concurrent: the connections).")
    rate: float | None = Field(None, description="rate load: mean arrivals per second.")
    requests: int | None = Field(None, description="Requests per phase (sequential: one per prompt).")
    prompt_count: int = Field(description="Distinct prompts in the set.")
    lengths: list[int] | LengthRangeInfo = Field(description="Prompt lengths as the scenario set them.")
    max_tokens: int = Field(description="Output tokens asked per request.")


class TraceRecord(Record):
    """A replay's trace as run: which file, which rows (and why some were left out), how fast.

    Written by kvbench.run.replay.record; absent for every other test."""

    path: str = Field(description="The trace file replayed.")
    format: str = Field(description="Its row format: mooncake, bailian or weka.")
    block_tokens: int = Field(description="Tokens per hash id in the trace.")
    rows: int = Field(description="Rows replayed (one request each), after skips.")
    skipped: int = Field(0, description="Rows left out for being longer than the model's context.")
    skipped_why: dict[str, int] = Field(
        default_factory=dict,
        description="The skipped rows by reason: `over the context`, or (clip) `answer alone fills the "
        "context`; empty when none was skipped (or in a run written before it).",
    )
    clipped: int = Field(0, description="Rows whose prompt was cut to fit the model's context.")
    over_context: Literal["fail", "skip", "clip"] = Field(
        "fail", description="trace.over_context: what a row over the model's context got."
    )
    max_model_len: int | None = Field(None, description="The context the rows were checked against.")
    schedule: str = Field(description="test.schedule: fixed (the trace's timestamps), rate or concurrent.")
    speedup: float = Field(1.0, description="trace.speedup: the trace's time ran this many times faster.")
    start_ms: float = Field(0.0, description="trace.start_ms: rows before this trace time were not sent.")
    window_ms: float | None = Field(None, description="trace.window_ms: rows after start_ms + this not sent.")
    limit: int | None = Field(None, description="trace.limit: at most this many rows.")
    rows_before: int = Field(0, description="Rows of the trace before the window (timestamp < start_ms).")
    starts_cold: bool = Field(
        False,
        description="The replayed rows start from an empty cache although the trace has rows before "
        "them: a prefix those rows shared is a miss here (compare ideal_with_history).",
    )
    ideal_with_history: float | None = Field(
        None,
        description="starts_cold: the window's ideal hit ratio (trace blocks, share of prompt tokens) had "
        "the rows before it already been cached; null otherwise.",
    )


class SessionsDone(Record):
    """What one sessions phase's users took of their planned turns."""

    phase: str = Field(description="Phase name (cached, baseline, ...).")
    turns: int = Field(description="Turns its users completed (answered; a failed turn ends its user).")
    per_user_min: int = Field(description="Fewest turns a user of the phase completed.")
    per_user_max: int = Field(description="Most turns a user of the phase completed.")
    users_all_turns: int = Field(description="Users who completed every turn they planned.")


class SessionsRecord(Record):
    """A sessions run's load as run: the users, their turns (planned and done), the sizes and pace.

    Written by kvbench.run.sessions.record; absent for every other test."""

    users: int = Field(description="Users (conversations) per phase.")
    loop: Literal["closed", "open"] = Field(
        description="closed: active_users at once, the next starting as one finishes; open: users arrive "
        "at arrival_rate_per_s, at most active_users at once."
    )
    active_users: int = Field(description="Users holding a conversation at once (the open loop's cap).")
    arrival_rate_per_s: float | None = Field(None, description="Open loop: new users per second.")
    arrivals: str | None = Field(None, description="Open loop: poisson or constant inter-arrivals.")
    turns_planned: int = Field(description="Turns planned per phase, all users together.")
    turns_per_user_min: int = Field(description="Fewest turns a user planned (test.turns).")
    turns_per_user_max: int = Field(description="Most turns a user planned.")
    done: list[SessionsDone] = Field(
        default_factory=list, description="Per phase as it ends: the turns its users completed."
    )
    system_prompt_tokens: int = Field(description="System prompt every user shares, tokens.")
    first_message_tokens: int = Field(description="The first user message, tokens.")
    first_turn_tokens: int = Field(description="system_prompt_tokens + first_message_tokens.")
    turn_tokens: int = Field(description="Each later user message, tokens (added after the previous answer).")
    think_time: dict[str, Any] = Field(
        description="test.think_time: distribution, mean_s, min_s, max_s, long_probability, long_s."
    )
    max_context_tokens: int = Field(
        description="A user stops before a turn past this (the model's context caps it)."
    )
    max_tokens: int = Field(description="Output tokens asked per turn.")
    baseline: bool = Field(description="A no-reuse baseline phase replays every conversation.")


class ContextFitRecord(Record):
    """Requests of a dataset against the model's context (prompts.over_context), counted."""

    policy: Literal["fail", "skip", "clip"] = Field(description="prompts.over_context.")
    max_model_len: int | None = Field(None, description="The context the requests were checked against.")
    skipped: int = Field(0, description="Requests left out (never sent).")
    clipped: int = Field(0, description="Requests whose prompt was cut to fit beside its answer.")
    skipped_why: dict[str, int] = Field(default_factory=dict, description="The skipped requests by reason.")
