"""vLLM bench `prefix_repetition`: prompts that share one of a few prefixes, as a small JSON spec file.

The settings are vLLM's flags by name (`--prefix-repetition-prefix-len 256` is
`"prefix_repetition_prefix_len": 256`): `{"dataset_name": "prefix_repetition", "num_prompts": 100,
"prefix_repetition_prefix_len": 256, "prefix_repetition_suffix_len": 256,
"prefix_repetition_num_prefixes": 10, "prefix_repetition_output_len": 128, "seed": 0}`. As vLLM
builds them: num_prompts // num_prefixes prompts per prefix, each that prefix and a fresh suffix,
in a seeded shuffle; the prefix is whole hash ids, so the expected reuse of every prompt is exact.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from kvbench.datasets.base import DatasetFormat, Ids, Request, RowError, named, spec

DEFAULTS: dict[str, int | float] = {
    "num_prompts": 1000,
    "prefix_repetition_prefix_len": 256,
    "prefix_repetition_suffix_len": 256,
    "prefix_repetition_num_prefixes": 10,
    "prefix_repetition_output_len": 128,
    "seed": 0,
}
MAX_BLOCK = 512


def block_of(prefix_len: int, suffix_len: int) -> int:
    """Tokens per hash id: a whole number of them fills the prefix and the suffix exactly."""
    return math.gcd(math.gcd(prefix_len, suffix_len), MAX_BLOCK) or 1


def parse(value: Any, line: int, ids: Ids) -> Iterator[Request]:
    s = spec(value, DEFAULTS)
    prefix_len, suffix_len = int(s["prefix_repetition_prefix_len"]), int(s["prefix_repetition_suffix_len"])
    groups, n = int(s["prefix_repetition_num_prefixes"]), int(s["num_prompts"])
    if groups < 1:
        raise RowError("prefix_repetition_num_prefixes", "must be >= 1")
    if n < groups:
        raise RowError("num_prompts", f"{n} is fewer than prefix_repetition_num_prefixes {groups}")
    if prefix_len + suffix_len < 1:
        raise RowError("prefix_repetition_suffix_len", "prefix and suffix are both 0 tokens")
    block = block_of(prefix_len, suffix_len)
    out = int(s["prefix_repetition_output_len"])
    requests = []
    for g in range(groups):
        prefix = ids.fresh(prefix_len, block)
        for _ in range(n // groups):
            hashes = prefix + ids.fresh(suffix_len, block)
            requests.append(
                Request(
                    line,
                    input_tokens=prefix_len + suffix_len,
                    hash_ids=hashes,
                    output_tokens=out,
                    session=f"prefix-{g}",
                    block_tokens=block,
                )
            )
    order = np.random.default_rng([int(s["seed"]), 0x9F1C]).permutation(len(requests))
    yield from (requests[i] for i in order)


FORMAT = DatasetFormat(
    name="prefix_repetition",
    source="vLLM bench prefix_repetition",
    block_tokens=MAX_BLOCK,
    matches=named("prefix_repetition", "prefix_repetition_prefix_len", "prefix_repetition_num_prefixes"),
    parse=parse,
    description="JSON spec: num_prompts, prefix_repetition_prefix_len, _suffix_len, _num_prefixes, "
    "_output_len, seed",
)
