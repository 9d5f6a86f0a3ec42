"""The `sessions` test's knobs (SessionsSection in testtypes.py; its parts here): multi-turn
conversations, each turn resending the whole history.

    test:
      kind: sessions
      users: 16                  # conversations in the phase
      turns: {min: 3, max: 6}    # per user: fixed (an int) or a seeded uniform draw
      system_prompt_tokens: 2000 # shared by every user (cached once, reused by all)
      first_message_tokens: 1000 # the opening user message
      turn_tokens: 200           # each later user message (the answer is appended before it)
      think_time: {distribution: exponential, mean_s: 5, max_s: 60}
      active_users: 8            # closed loop: users holding a conversation at once
      arrival_rate_per_s: null   # open loop instead: new users per second (active_users caps them)
      max_context_tokens: 130000 # a user stops before a turn that would pass this
      baseline: false            # --baseline: replay every turn with a fresh salt (no reuse)

The answer length is `output.max_tokens` (with ignore_eos, every answer has exactly that many
tokens on servers that honour it). The knobs are the union of what the multi-turn anchors offer:

- LMCache multi-round QA: users (--num-users), fixed turns (--num-rounds), shared system prompt
  (--shared-system-prompt), first message (--user-history-prompt), answer length (--answer-len),
  open loop and pacing through --qps.
- vLLM benchmarks/multi_turn: users (num_conversations), turns as a distribution (num_turns),
  shared prefix (common_prefix_num_tokens), first message (prefix_num_tokens), tokens per turn
  and answer length as distributions, closed loop (--num-clients, --max-active-conversations),
  open loop (--request-rate, Poisson per client).
- AIPerf multi-turn: users (--conversation-num), turns (--conversation-turn-mean/stddev), think
  time (--conversation-turn-delay-mean/stddev), shared system prompt
  (--shared-system-prompt-length), input and output tokens (means), --concurrency or
  --request-rate.
- SGLang bench_multiturn: users (--num-clients), turns (--num-rounds), first message
  (--request-length), tokens per turn (--sub-question-input-length), answer (--output-length),
  closed loop (--max-parallel), open loop (--request-rate, --distribution).
From the flags read (briefly, in their docs and code), none of them resets and verifies a cold
cache, attributes a turn to the tier that served it, or replays the same turns with nothing
reusable; this test does all three.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from kvbench.scenario.sections import Strict


class TurnsRange(Strict):
    min: int = Field(..., ge=1, le=10_000, description="Fewest turns a user takes.")
    max: int = Field(..., ge=1, le=10_000, description="Most turns a user takes.")

    @model_validator(mode="after")
    def _order(self) -> TurnsRange:
        if self.min > self.max:
            raise ValueError("min must not exceed max")
        return self


class ThinkTime(Strict):
    distribution: Literal["fixed", "uniform", "exponential"] = Field(
        "exponential",
        description="fixed: always mean_s; uniform: in [min_s, max_s]; exponential: mean_s, "
        "clipped to [min_s, max_s]. Seeded: the same seed gives the same pauses.",
    )
    mean_s: float = Field(2.0, ge=0, description="Pause between an answer and the user's next turn, seconds.")
    min_s: float = Field(0.0, ge=0, description="Shortest pause, seconds.")
    max_s: float | None = Field(
        None, ge=0, description="Longest pause, seconds (required for uniform; a cap for exponential)."
    )
    long_probability: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Share of pauses that are long instead (a user who leaves and comes back): "
        "the returning-user reading, where other users' traffic has pushed the history out of "
        "the fast tiers.",
    )
    long_s: float = Field(0.0, ge=0, description="Length of a long pause, seconds.")

    @model_validator(mode="after")
    def _bounds(self) -> ThinkTime:
        if self.distribution == "uniform" and self.max_s is None:
            raise ValueError("max_s: required for a uniform think time")
        if self.max_s is not None and self.max_s < self.min_s:
            raise ValueError("max_s: must not be below min_s")
        if self.long_probability > 0 and self.long_s <= 0:
            raise ValueError("long_s: must be > 0 when long_probability is set")
        return self
