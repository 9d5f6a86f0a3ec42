"""vLLM bench `random`: synthetic prompts of set input/output lengths, as a small JSON spec file.

vLLM draws these from its flags; kvbench reads the same settings from a file, named as the flags
are (`--random-input-len 1024` is `"random_input_len": 1024`):
`{"dataset_name": "random", "num_prompts": 50, "random_input_len": 1024, "random_output_len": 128,
"random_range_ratio": 0.0, "random_prefix_len": 0, "seed": 0}` (vLLM's defaults where absent).
Lengths are drawn as vLLM draws them, uniform in [len * (1 - ratio), len * (1 + ratio)], seeded;
every prompt is unique past an optional prefix all of them share, and each is realised token-exact.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from kvbench.datasets.base import DatasetFormat, Ids, Request, RowError, named, spec

DEFAULTS: dict[str, int | float] = {
    "num_prompts": 1000,
    "random_input_len": 1024,
    "random_output_len": 128,
    "random_range_ratio": 0.0,
    "random_prefix_len": 0,
    "seed": 0,
}
BLOCK = 16  # tokens per hash id (a shared prefix's length is rounded to this by block_of)


def block_of(prefix_len: int) -> int:
    """The block a shared prefix of this length fills exactly (so the sharing is whole ids)."""
    return math.gcd(prefix_len, BLOCK) if prefix_len else BLOCK


def parse(value: Any, line: int, ids: Ids) -> Iterator[Request]:
    s = spec(value, DEFAULTS)
    ratio = float(s["random_range_ratio"])
    if not 0 <= ratio < 1:
        raise RowError("random_range_ratio", f"must be in [0, 1), got {ratio:g}")
    n, prefix_len = int(s["num_prompts"]), int(s["random_prefix_len"])
    if n < 1:
        raise RowError("num_prompts", "must be >= 1")
    rng = np.random.default_rng([int(s["seed"]), 0x7A4D])
    ins = _draw(rng, int(s["random_input_len"]), ratio, n)
    outs = _draw(rng, int(s["random_output_len"]), ratio, n)
    block = block_of(prefix_len)
    prefix = ids.fresh(prefix_len, block)
    for i in range(n):
        tokens = prefix_len + max(1, ins[i])
        yield Request(
            line,
            input_tokens=tokens,
            hash_ids=prefix + ids.fresh(tokens - prefix_len, block),
            output_tokens=max(1, outs[i]),
            block_tokens=block,
        )


def _draw(rng: np.random.Generator, length: int, ratio: float, n: int) -> list[int]:
    lo, hi = math.floor(length * (1 - ratio)), math.ceil(length * (1 + ratio))
    return [int(x) for x in rng.integers(lo, hi + 1, n)]


FORMAT = DatasetFormat(
    name="random",
    source="vLLM bench random",
    block_tokens=BLOCK,
    matches=named("random", "random_input_len", "random_output_len"),
    parse=parse,
    description="JSON spec: num_prompts, random_input_len, random_output_len, random_range_ratio, "
    "random_prefix_len, seed",
)
