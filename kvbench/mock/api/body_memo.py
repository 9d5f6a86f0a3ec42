"""Validated completion requests remembered by their raw body, so a replayed body is parsed once.

A filled-cache phase sends each of its prompts again and again, byte for byte (kvbench's client
builds a prompt's body once). For a 120k-token prompt, decoding the 700 KB body as JSON and
hashing its prompt text was ~0.6 ms of the mock's ~1.6 ms per cached request: more than every
other step of the request together. So a body is looked up first among the remembered bodies of
the same length, compared byte for byte (memcmp: a different body differs early, at its salt; an
equal one costs one pass at memory speed, a quarter of hashing it), and only a body not among the
last MEMO_ENTRIES (MEMO_BYTES in all) is decoded and validated. Exact: no hash stands for a body.

What a request draws afresh each time is the caller's business (completions.py rebuilds the
answer's word source for every request, remembered or not).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

MEMO_ENTRIES = 256  # bodies remembered: more than a scenario's distinct prompts
MEMO_BYTES = 128 << 20  # and their bytes in all: the throughput scenario's 100 x ~0.7 MB fit
V = TypeVar("V")


class BodyMemo(Generic[V]):
    """The last parsed bodies (at most `entries`, `max_bytes` in all), found by length and bytes."""

    def __init__(self, entries: int = MEMO_ENTRIES, max_bytes: int = MEMO_BYTES) -> None:
        self._entries, self._max_bytes = entries, max_bytes
        self._memo: OrderedDict[int, tuple[tuple[bool, int], bytes, V]] = OrderedDict()
        self._by_len: dict[tuple[bool, int], list[int]] = {}
        self._bytes = 0
        self._ids = itertools.count()

    def get(self, chat: bool, raw: bytes, parse: Callable[[bytes], V]) -> tuple[V, bool]:
        """(what `parse(raw)` gave, whether it was remembered); parse's errors propagate and
        nothing is remembered for a body that fails."""
        size = (chat, len(raw))
        for entry in self._by_len.get(size, ()):
            if self._memo[entry][1] == raw:
                self._memo.move_to_end(entry)
                return self._memo[entry][2], True
        value = parse(raw)
        if len(raw) <= self._max_bytes:
            entry = next(self._ids)
            self._memo[entry] = (size, raw, value)
            self._by_len.setdefault(size, []).append(entry)
            self._bytes += len(raw)
            while len(self._memo) > self._entries or self._bytes > self._max_bytes:
                self._forget()
        return value, False

    def _forget(self) -> None:
        entry, (size, raw, _) = self._memo.popitem(last=False)
        same = self._by_len[size]
        same.remove(entry)
        if not same:
            del self._by_len[size]
        self._bytes -= len(raw)
