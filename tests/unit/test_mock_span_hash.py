"""The mock's block keys by span_hash: prefix keys, rooted, neighbouring slots, and a digest."""

from __future__ import annotations

import itertools
import random

import numpy as np

from kvbench.mock.span_hash import KEY_BITS, LOW_BITS, SpanHash, span_keys

HIGH = ~((1 << LOW_BITS) - 1)


def _ends(*offsets: int) -> np.ndarray:
    return np.array(offsets, np.int64)


def test_a_key_names_its_prefix_and_nothing_after_it() -> None:
    rng = random.Random(3)
    for _ in range(300):
        data = bytes(rng.choice(b"ab c") for _ in range(rng.randint(1, 90)))
        ends = sorted({rng.randint(1, len(data)) for _ in range(rng.randint(1, 6))})
        keys = span_keys(data, _ends(*ends), "m")
        # the same prefixes inside a longer text (the words past each end differ): the same keys
        assert span_keys(data + b"zzzzzzzzz", _ends(*ends), "m") == keys
        # each key alone (its own low bits then) agrees on the high bits
        alone = [span_keys(data[:e], _ends(e), "m")[0] for e in ends]
        assert [k & HIGH for k in keys] == [k & HIGH for k in alone]


def test_keys_differ_by_content_position_length_and_root() -> None:
    base = b"alpha beta gamma delta " * 40
    k = span_keys(base, _ends(100, 200, 300), "m")
    assert len(set(k)) == 3
    swapped = base[:150] + b"X" + base[151:]  # one byte changed: the later prefixes change
    k2 = span_keys(swapped, _ends(100, 200, 300), "m")
    assert k2[0] == k[0] and k2[1] != k[1] and k2[2] != k[2]
    assert span_keys(base, _ends(100, 200, 300), "other") != k
    assert span_keys(base, _ends(101), "m")[0] & HIGH != k[0] & HIGH  # one byte longer
    # trailing zero bytes are content, not padding
    assert span_keys(b"abc\x00", _ends(4))[0] & HIGH != span_keys(b"abc", _ends(3))[0] & HIGH


def test_a_prompts_keys_sit_in_neighbouring_slots() -> None:
    data = " ".join(f"w{i}" for i in range(5000)).encode()
    keys = span_keys(data, _ends(*range(64, len(data), 64)), "m")
    low = [k & ((1 << LOW_BITS) - 1) for k in keys]
    assert [(b - a) % (1 << LOW_BITS) for a, b in itertools.pairwise(low)] == [1] * (len(low) - 1)
    assert len({k & HIGH for k in keys}) == len(keys)  # the rest is each prefix's own
    assert max(keys) < 1 << KEY_BITS  # two machine digits: cheaper to make and to hash


def test_digest_is_the_whole_texts_and_not_the_models() -> None:
    first = SpanHash(b"the same text").digest()
    assert SpanHash(b"the same text").digest() == first != SpanHash(b"the same text!").digest()
    assert SpanHash(b"").digest() != SpanHash(b"\x00").digest()
    assert span_keys(b"", _ends()) == ()


def test_a_span_hash_is_refused_once_another_has_taken_the_scratch() -> None:
    import pytest

    old = SpanHash(b"one text")
    SpanHash(b"another text")
    with pytest.raises(RuntimeError, match="stale"):
        old.digest()
