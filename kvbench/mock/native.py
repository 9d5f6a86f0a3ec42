"""The mock's per-block hot paths: the C accelerator where it was built, the same model in Python else.

A 120k-token prompt has 7,500 blocks. Before the accelerator, a cold request of that size cost the
mock ~6 ms of CPU above a 16-token one (benchmarks/mock_cpu.py): numpy passes over its 700 KB
(block ends, keys, digest) and an OrderedDict insert per block. At a fast pace (a time-scaled
profile) that is more than the modelled work, so the machine, not the model, set the results.

`_native` (kvbench/mock/_native.c, an optional extension built by `pip install`) does the same
two jobs in C:

  plain_keys(data, block_tokens, ...)   one pass over a plain-words prompt: (token count, block
                                        keys, digest) exactly as span_hash.SpanHash and
                                        tokenizer._plain_words_keys compute them; None for any
                                        other text (the caller takes the general path)
  KeyOrder()                            keys in LRU order with bulk moves: what cache.LRUTier
                                        keeps; OrderedKeys below is its Python twin

Both are checked against their Python references on random inputs (tests/unit/test_mock_native.py).
KVBENCH_MOCK_NATIVE=0 turns the accelerator off (the bench's A/B, and the references' own tests).
Nothing here imports kvbench beyond the mock.
"""

from __future__ import annotations

import importlib
import os
from collections import OrderedDict, deque
from collections.abc import Iterator, Sequence
from itertools import islice
from types import ModuleType
from typing import Any


def _load() -> ModuleType | None:
    if os.environ.get("KVBENCH_MOCK_NATIVE", "1") == "0":
        return None
    try:
        return importlib.import_module("kvbench.mock._native")
    except ImportError:  # not built here (no C compiler at install): the Python paths
        return None


_NATIVE = _load()


def available() -> bool:
    """Whether the mock runs its C accelerator (its /version says so, and a run's manifest with it)."""
    return _NATIVE is not None


def plain_keys(
    data: bytes | memoryview, block_tokens: int, root_seed: int, digest_seed: int
) -> tuple[int, tuple[int, ...], int] | None:
    """(tokens, block keys, digest) of a plain-words text in C; None for any other text, or when
    the accelerator is not here (the caller computes it in Python then)."""
    if _NATIVE is None:
        return None
    result: tuple[int, tuple[int, ...], int] | None = _NATIVE.span_plain_keys(
        data, block_tokens, root_seed, digest_seed
    )
    return result


class OrderedKeys:
    """Keys in LRU order (oldest first) with bulk moves, over an OrderedDict: the reference the C
    KeyOrder is tested against, and what runs where it was not built. Ranges [a, b) of a sequence
    are walked without copying it."""

    __slots__ = ("_d",)

    def __init__(self) -> None:
        self._d: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, key: object) -> bool:
        return key in self._d

    def __iter__(self) -> Iterator[int]:
        return iter(list(self._d))

    def keys(self) -> list[int]:
        return list(self._d)

    def held(self, keys: Sequence[int], a: int = 0, b: int | None = None) -> list[bool]:
        """Whether each of keys[a:b] is held (one C loop)."""
        return list(map(self._d.__contains__, islice(keys, a, b)))

    def all_held(self, keys: Sequence[int], a: int = 0, b: int | None = None) -> bool:
        return all(map(self._d.__contains__, islice(keys, a, b)))

    def touch(self, keys: Sequence[int], a: int = 0, b: int | None = None) -> int:
        """Each held key of keys[a:b] moved to the newest end, in order (absent keys skipped)."""
        d = self._d
        try:
            deque(map(d.move_to_end, islice(keys, a, b)), 0)  # all held (the usual case): one C loop
        except KeyError:
            # one is not held: redo key by key (moving a key to the end again leaves the same order)
            for k in islice(keys, a, b):
                if k in d:
                    d.move_to_end(k)
        return 0

    def add(self, keys: Sequence[int], a: int = 0, b: int | None = None) -> int:
        """Each of keys[a:b] moved to the newest end in order, appended where not held; how many
        were new. Appended in order first (a held key keeps its place); then, only when one was held
        already (or repeats), every key moved to the end in order: the same order as adding them
        one by one. A plain loop: OrderedDict.update(dict) copies its items first (2-3x the cost),
        a map over __setitem__ pays a wrapper call per key."""
        d = self._d
        before = len(d)
        span = keys[a:b] if (a, b) != (0, None) else keys
        for k in span:
            d[k] = None
        fresh = len(d) - before
        if fresh != len(span):
            deque(map(d.move_to_end, span), 0)
        return fresh

    def pop_oldest(self, count: int) -> list[int]:
        """The `count` oldest keys, removed."""
        d = self._d
        out = list(islice(d, max(count, 0)))
        deque(map(d.__delitem__, out), 0)
        return out

    def discard(self, key: int) -> bool:
        return self._d.pop(key, 0) is None

    def clear(self) -> None:
        self._d.clear()


def key_order() -> Any:
    """An empty ordered key set: the C KeyOrder where built, else OrderedKeys (the same methods)."""
    return _NATIVE.KeyOrder() if _NATIVE is not None else OrderedKeys()
