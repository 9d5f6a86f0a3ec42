"""The controls of `trace synth`, as a strict pydantic model (a YAML file or `--set` gives them).

A synthetic trace is a stream of conversations. Each conversation may start with one of a few
shared system prompts, may carry one document drawn by Zipf popularity, and has one or more turns;
each turn's prompt is the whole conversation so far (system prompt, document, earlier user
messages and answers) plus a new user message, so later turns reuse the earlier turns' blocks.
Reuse distance follows from these: popular documents and short think times come back soon.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Arrival(_Strict):
    rate_per_s: float = Field(default=5.0, gt=0, description="New conversations per second (mean).")
    process: Literal["poisson", "gamma"] = Field(
        default="poisson", description="Gaps between new conversations: exponential (poisson) or gamma."
    )
    cv: float = Field(
        default=1.0,
        gt=0,
        description="Coefficient of variation of the gamma gaps: 1 is Poisson, above 1 burstier.",
    )

    @model_validator(mode="after")
    def _cv_needs_gamma(self) -> Arrival:
        if self.process == "poisson" and self.cv != 1.0:
            raise ValueError("cv: only a gamma process has a coefficient of variation other than 1")
        return self


class SystemPrompt(_Strict):
    tokens: int = Field(default=0, ge=0, description="Length of each shared system prompt (0: none).")
    variants: int = Field(default=1, ge=1, description="How many distinct system prompts, drawn uniformly.")
    share: float = Field(default=1.0, ge=0, le=1, description="Share of conversations that start with one.")


class Documents(_Strict):
    count: int = Field(default=0, ge=0, description="Distinct documents (0: none).")
    mean_tokens: float = Field(default=4000.0, gt=0, description="Mean document length (lognormal).")
    sigma: float = Field(default=0.5, ge=0, description="Lognormal sigma of document lengths.")
    zipf_s: float = Field(
        default=1.0, ge=0, description="Zipf exponent of popularity: rank r drawn as 1/r^s."
    )
    share: float = Field(default=0.5, ge=0, le=1, description="Share of conversations that carry a document.")


class Sessions(_Strict):
    share: float = Field(
        default=0.0, ge=0, le=1, description="Share of conversations with more than one turn."
    )
    mean_turns: float = Field(default=3.0, ge=2, description="Mean turns of a multi-turn conversation.")
    think_time_s: float = Field(default=30.0, ge=0, description="Mean time between turns (exponential).")


class Lengths(_Strict):
    mean_tokens: float = Field(gt=0, description="Mean length (lognormal).")
    sigma: float = Field(default=0.8, ge=0, description="Lognormal sigma.")
    max_tokens: int = Field(default=131_072, ge=1, description="Longest value drawn (clipped).")


class SynthControls(_Strict):
    rows: int = Field(
        default=1000, ge=1, description="Rows to write (the trace stops at rows or duration_s)."
    )
    duration_s: float | None = Field(default=None, gt=0, description="Stop at the first arrival after this.")
    seed: int = Field(
        default=0, ge=0, description="numpy default_rng seed: the same controls, the same file."
    )
    format: Literal["mooncake", "bailian", "weka"] = Field(
        default="mooncake", description="Trace format written."
    )
    block_tokens: int | None = Field(
        default=None, ge=1, description="Tokens per hash id; null: the format's."
    )
    max_input_tokens: int = Field(default=131_072, ge=1, description="Prompts are cut to this many tokens.")
    arrival: Arrival = Field(default_factory=Arrival, description="When new conversations arrive.")
    system_prompt: SystemPrompt = Field(default_factory=SystemPrompt, description="Shared prefixes.")
    documents: Documents = Field(default_factory=Documents, description="Shared documents, Zipf-popular.")
    sessions: Sessions = Field(default_factory=Sessions, description="Multi-turn conversations.")
    user: Lengths = Field(
        default_factory=lambda: Lengths(mean_tokens=300.0), description="New user message per turn."
    )
    output: Lengths = Field(
        default_factory=lambda: Lengths(mean_tokens=182.0, max_tokens=4096), description="Output lengths."
    )
