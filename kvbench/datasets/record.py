"""One row per request a phase sends from a dataset (dataset.jsonl in the run directory), in its
order: where the prompt came from and what a prefix cache may reuse of it, the same expected-reuse
record a replay writes (replay.jsonl).

Every phase of the throughput test sends the same order (its load's seeded order), each from a
reset and a fresh salt, so the figures hold for each phase: LENGTHS prompts by their hash ids
(kvbench.traces), TEXT prompts have none (null: a text's blocks are the server's tokenizer's).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

DATASET_ROWS = "dataset.jsonl"


class DatasetRow(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int = Field(description="Position in the phase's order of requests, 0-based.")
    prompt_id: int = Field(description="Index into prompts.jsonl (the dataset's order).")
    format: str = Field(description="The dataset format (kvbench.datasets.FORMATS).")
    line: int = Field(description="Line of the dataset file the request came from (1-based).")
    kind: Literal["text", "lengths"] = Field(description="text: sent as written; lengths: realised.")
    session: str | None = Field(description="Conversation or prefix group where the format has one.")
    turn: int | None = Field(description="Turn number within the conversation (multi_turn).")
    input_tokens: int | None = Field(description="lengths: the tokens the dataset asks for; text: null.")
    prompt_tokens: int | None = Field(
        description="Tokens of the prompt as sent (salt included), as the server counts them; "
        "null: not counted."
    )
    count_source: str = Field(description="server (its /tokenize) or estimate (one token per word).")
    output_tokens: int | None = Field(description="Answer tokens asked for; null: output.max_tokens.")
    blocks: int = Field(description="Hash ids of a lengths prompt (0 for text).")
    block_tokens: int = Field(description="Tokens per hash id.")
    expected_blocks: int | None = Field(
        description="Leading blocks an unbounded prefix cache holds after the requests before it."
    )
    expected_cached_tokens: int | None = Field(
        description="expected_blocks * block_tokens, capped at input_tokens: the dataset's ideal reuse."
    )
    engine_expected_tokens: int | None = Field(
        description="The same in the engine's own blocks; null when unknown or not a divisor of block_tokens."
    )
