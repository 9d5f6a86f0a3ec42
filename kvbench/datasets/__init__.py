"""Datasets users bring from vLLM bench and AIPerf, read into one request shape: registry, detection."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvbench.datasets import (
    aiperf_mooncake,
    aiperf_multi_turn,
    aiperf_single_turn,
    prefix_repetition,
    sharegpt,
    vllm_custom,
    vllm_random,
)
from kvbench.datasets.base import DatasetFormat, Ids, Request, RowError
from kvbench.datasets.reading import entries
from kvbench.errors import UsageError

# detection order: the synthetic specs (their own keys) before the request formats
FORMATS: dict[str, DatasetFormat] = {
    f.name: f
    for f in (
        vllm_random.FORMAT,
        prefix_repetition.FORMAT,
        aiperf_multi_turn.FORMAT,
        aiperf_mooncake.FORMAT,
        sharegpt.FORMAT,
        vllm_custom.FORMAT,
        aiperf_single_turn.FORMAT,
    )
}

__all__ = ["FORMATS", "Dataset", "DatasetFormat", "Request", "open_dataset"]


@dataclass(frozen=True)
class Dataset:
    path: Path
    format: DatasetFormat
    requests: list[Request]
    block_tokens: int  # tokens per hash id of its LENGTHS requests
    skipped: int  # entries the format skips by its own rule (ShareGPT: fewer than two turns)

    @property
    def kind(self) -> str:
        kinds = {r.kind for r in self.requests}
        return kinds.pop() if len(kinds) == 1 else "mixed"


def open_dataset(path: str | Path, format: str = "auto", limit: int | None = None) -> Dataset:
    """The dataset at `path` in the named or detected format; `limit` keeps its first requests."""
    path = Path(path).expanduser()
    found = entries(path)
    fmt = _detect(path, found[0][1]) if format == "auto" else FORMATS.get(format)
    if fmt is None:
        raise UsageError(
            f"prompts.dataset_format: unknown format {format!r}; known: auto, {', '.join(FORMATS)}"
        )
    ids = Ids()
    requests: list[Request] = []
    skipped = 0
    for line, value in found:
        try:
            made = list(fmt.parse(value, line, ids))
        except RowError as exc:
            raise UsageError(f"{path}:{line}: {exc.field}: {exc.message}") from None
        skipped += not made
        requests.extend(made)
        if limit is not None and len(requests) >= limit:
            requests = requests[:limit]
            break
    if not requests:
        raise UsageError(f"{path}: no requests in it as {fmt.name} ({fmt.description})")
    block = next((r.block_tokens for r in requests if r.block_tokens), fmt.block_tokens)
    return Dataset(path, fmt, requests, block, skipped)


def _detect(path: Path, first: Any) -> DatasetFormat:
    for fmt in FORMATS.values():
        if fmt.matches(first):
            return fmt
    seen = ", ".join(sorted(first)) if isinstance(first, dict) else type(first).__name__
    known = "; ".join(f"{f.name}: {f.description}" for f in FORMATS.values())
    raise UsageError(
        f"{path}:1: format: no dataset format matches the first entry (keys seen: {seen}); expected {known}"
    )
