"""vLLM bench `custom`: JSONL, one `{"prompt": TEXT, "output_tokens": N}` a line (output_tokens optional).

Field names as vLLM's benchmarks document `--dataset-name custom` (`vllm bench serve`); a line's
`output_tokens` becomes that request's max_tokens, else output.max_tokens applies.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kvbench.datasets.base import DatasetFormat, Ids, Request, obj, optional_length, text


def parse(value: Any, line: int, _ids: Ids) -> Iterator[Request]:
    row = obj(value)
    yield Request(line, text=text(row, "prompt"), output_tokens=optional_length(row, "output_tokens"))


FORMAT = DatasetFormat(
    name="custom",
    source="vLLM bench custom",
    block_tokens=16,
    matches=lambda v: isinstance(v, dict) and "prompt" in v,
    parse=parse,
    description='JSONL: {"prompt": text, "output_tokens": n (optional)}',
)
