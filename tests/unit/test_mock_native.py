"""The mock's C accelerator (kvbench/mock/_native.c) computes what its Python references compute.

span_plain_keys against span_hash.SpanHash + tokenizer._plain_words_keys on random texts, plain and
not; KeyOrder against native.OrderedKeys (an OrderedDict) over random sequences of operations,
compared after every step. The accelerator is optional, so these skip where it was not built;
where a C compiler is on the PATH it must have been (or the mock silently runs the slow path).
"""

from __future__ import annotations

import random
import shutil
import sysconfig

import pytest

from kvbench.load.prompts import VOCAB
from kvbench.mock import native
from kvbench.mock.span_hash import SpanHash, digest_seed, root_seed
from kvbench.mock.tokenizer import Tokenizer, _plain_words_keys

needs_native = pytest.mark.skipif(not native.available(), reason="the mock's C accelerator is not built here")
ROOT = "openai/gpt-oss-120b"


def test_the_accelerator_is_built_where_a_compiler_is() -> None:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}) on this machine: the mock runs its Python paths")
    assert native.available(), "pip install -e . should have built kvbench/mock/_native.c (see `make setup`)"


def _reference(data: bytes, block_tokens: int) -> tuple[int, tuple[int, ...], int] | None:
    words = SpanHash(data)
    digest = words.digest()
    got = _plain_words_keys(data, block_tokens, ROOT, words)
    return None if got is None else (got[0], tuple(got[1]), digest)


def _plain_text(rng: random.Random, tokens: int) -> bytes:
    return " ".join(rng.choice(VOCAB) for _ in range(tokens)).encode()


@needs_native
@pytest.mark.parametrize("block_tokens", [1, 2, 3, 16, 17])
def test_plain_keys_match_the_numpy_reference(block_tokens: int) -> None:
    rng = random.Random(block_tokens)
    for tokens in [1, 2, 15, 16, 17, 31, 32, 33, 100, 257, *rng.sample(range(1, 3000), 12)]:
        data = _plain_text(rng, tokens)
        want = _reference(data, block_tokens)
        got = native.plain_keys(data, block_tokens, root_seed(ROOT), digest_seed())
        assert got == want, (block_tokens, tokens)
        assert got is not None and got[0] == tokens and len(got[1]) == tokens // block_tokens


@needs_native
def test_words_of_every_length_and_byte_class() -> None:
    # word lengths 1..20 put block ends at every offset within a 64-bit word
    rng = random.Random(7)
    alphabet = "abcXYZ019_"
    for _ in range(300):
        n = rng.randrange(1, 80)
        data = " ".join("".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 21))) for _ in range(n))
        b = rng.choice([1, 2, 4, 16])
        raw = data.encode()
        assert native.plain_keys(raw, b, root_seed(ROOT), digest_seed()) == _reference(raw, b)


@needs_native
@pytest.mark.parametrize(
    "text",
    [
        b"",
        b" lead",
        b"trail ",
        b"two  spaces",
        b"a,b",
        b"tab\there",
        b"new\nline",
        b"caf\xc3\xa9",
        b"x\x00y",
        b" ",
    ],
)
def test_anything_but_plain_words_is_left_to_the_general_path(text: bytes) -> None:
    assert _reference(text, 16) is None
    assert native.plain_keys(text, 16, root_seed(ROOT), digest_seed()) is None


@needs_native
def test_one_bad_byte_or_double_space_anywhere_in_a_long_text_is_found() -> None:
    # at every offset modulo 16 (the C scan's block) and in the last, partial block
    rng = random.Random(13)
    base = bytearray(_plain_text(rng, 400))
    for at in [
        *range(1, 40),
        *range(len(base) - 40, len(base) - 1),
        *rng.sample(range(1, len(base) - 1), 60),
    ]:
        for bad in (b",", b"\xc3", b"\t", b"\x00", b" "):
            text = bytearray(base)
            text[at : at + 1] = bad if bad != b" " or text[at] == 32 else b" "
            if bad == b" ":  # a second space next to one: double it in place
                sp = text.find(b" ", at)
                if sp < 0:
                    continue
                text[sp:sp] = b" "
            raw = bytes(text)
            assert native.plain_keys(raw, 16, root_seed(ROOT), digest_seed()) == _reference(raw, 16), (
                at,
                bad,
            )


@needs_native
def test_the_tokenizer_gives_the_same_prompt_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _plain_text(random.Random(11), 5000)
    fast = Tokenizer(16, ROOT).plain_prompt(data)
    monkeypatch.setattr(native, "_NATIVE", None)
    assert Tokenizer(16, ROOT).plain_prompt(data) == fast


@needs_native
def test_key_order_matches_the_ordered_dict_reference() -> None:
    rng = random.Random(5)
    for trial in range(40):
        fast, slow = native.key_order(), native.OrderedKeys()
        assert type(fast) is not native.OrderedKeys
        universe = list(range(rng.choice([5, 40, 400])))
        for _ in range(300):
            op = rng.random()
            keys = tuple(rng.choice(universe) for _ in range(rng.randrange(0, 30)))
            a = rng.randrange(0, len(keys) + 1)
            b = rng.choice([None, rng.randrange(a, len(keys) + 1)])
            if op < 0.35:
                assert fast.add(keys, a, *([] if b is None else [b])) == slow.add(keys, a, b), trial
            elif op < 0.6:
                fast.touch(keys, a, *([] if b is None else [b]))
                slow.touch(keys, a, b)
            elif op < 0.75:
                n = rng.randrange(0, 12)
                assert fast.pop_oldest(n) == slow.pop_oldest(n), trial
            elif op < 0.85:
                assert fast.held(keys) == slow.held(keys)
                assert fast.all_held(keys) == slow.all_held(keys)
            elif op < 0.95:
                k = rng.choice(universe)
                assert fast.discard(k) == slow.discard(k)
            elif op < 0.97:
                fast.clear()
                slow.clear()
            assert len(fast) == len(slow) and list(fast) == list(slow) == fast.keys(), trial
            k = rng.choice(universe)
            assert (k in fast) == (k in slow)


@needs_native
def test_key_order_grows_past_its_tables_and_keeps_60_bit_keys() -> None:
    fast, slow = native.key_order(), native.OrderedKeys()
    rng = random.Random(9)
    keys = [rng.getrandbits(60) for _ in range(50_000)] + [0, 2**64 - 1]
    assert fast.add(keys) == slow.add(keys) == len(set(keys))
    assert list(fast) == list(slow)
    assert fast.pop_oldest(40_000) == slow.pop_oldest(40_000)
    assert fast.add(keys[::-1]) == slow.add(keys[::-1])
    assert list(fast) == list(slow)
    assert "text" not in fast and -1 not in fast and 2**64 not in fast
    with pytest.raises(TypeError):
        fast.add([-1])
