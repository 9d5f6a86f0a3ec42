"""summary.json's replay part as types: the hit table as numbers, the window's two ideals, and the
section as the report renders it (its paragraphs and tables, the hit table first), so summary.json
carries every figure the report shows and the report is rendered from it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ReplayHits(_Model):
    """One row of the hit table (a phase, or overall): shares of prompt tokens, 0..1."""

    phase: str = Field(description="phase name, or overall")
    requests: int = Field(description="requests of the phase (failed ones included)")
    prompt_tokens: int = Field(description="input_length summed over the ok requests, tokens")
    ideal: float | None = Field(description="ideal (trace): what an unbounded prefix cache reuses by the ids")
    engine_blocks: float | None = Field(
        description="engine blocks: the same in the engine's whole blocks, one token computed (null: unknown)"
    )
    reported: float | None = Field(description="reported: usage cached_tokens over the requests that said")
    mock_truth: float | None = Field(description="mock truth: the embedded mock's own log (null: no mock)")
    gap: float | None = Field(description="gap: reported - ideal")
    alignment: float | None = Field(description="of it: alignment: engine_blocks - ideal (the block rule)")
    rest: float | None = Field(
        description="of it: rest: reported - engine_blocks (eviction, requests in flight together, "
        "under-reporting)"
    )
    not_reported: int = Field(description="not reported: ok requests without a cached_tokens figure")


class ContextRecord(_Model):
    """Rows against the model's context (replay.json's `context`)."""

    policy: str = Field(description="trace.over_context: fail, skip or clip")
    max_model_len: int | None = Field(description="the context the rows were checked against")
    skipped: int = Field(description="rows left out")
    clipped: int = Field(description="rows cut to fit")
    skipped_why: dict[str, int] = Field(
        default_factory=dict,
        description="skipped rows by reason: over the context, or (clip) answer alone fills the context",
    )


class ReplayTable(_Model):
    caption: str = Field("", description="the table's caption as the report shows it (empty: none)")
    head: list[str] = Field(description="column headings")
    rows: list[list[str]] = Field(description="cells as the report shows them")


class ReplaySummary(_Model):
    hits: list[ReplayHits] = Field(description="the hit table: one row per phase, then overall")
    ideal_with_history: float | None = Field(
        description="a window with rows before it: its ideal had they been cached (manifest.trace); "
        "null otherwise"
    )
    rows_before: int | None = Field(
        description="rows of the trace before the window (0: it starts at the trace's start; null: a run "
        "written before manifest.trace)"
    )
    context: ContextRecord | None = Field(description="rows over the model's context (null: older runs)")
    paragraphs: list[str] = Field(description="the section's text as the report shows it")
    tables: list[ReplayTable] = Field(description="the section's tables as the report shows them, hits first")
