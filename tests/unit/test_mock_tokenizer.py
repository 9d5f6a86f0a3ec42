"""The mock's tokenizer: regex semantics, fast path, chat template, speed."""

import random
import time

from kvbench.mock.tokenizer import (
    GENERATION_PROMPT_TOKENS,
    TEMPLATE_TOKENS_PER_MESSAGE,
    TOKEN_RE,
    Tokenizer,
    block_keys,
    chat_token_bytes,
    chat_tokens,
    split_token_bytes,
    split_tokens,
)


def test_one_token_per_word_or_punctuation():
    assert split_tokens("Hello, world!") == ["Hello", ",", "world", "!"]
    assert split_tokens("  a_b\tc-d\n") == ["a_b", "c", "-", "d"]


def test_fast_path_matches_regex_on_odd_text():
    rng = random.Random(3)
    alphabet = "ab Z_9 ,.-!\t\n\x0b\x0c\r\x1c\x1f\u00a0é日(\x00"
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        expected = [t.encode() for t in TOKEN_RE.findall(text)]
        assert split_token_bytes(text) == expected, repr(text)


def test_chat_template_adds_a_constant():
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Hi, you!"}]
    toks = chat_tokens(msgs)
    assert len(toks) == 2 + 4 + 2 * TEMPLATE_TOKENS_PER_MESSAGE + GENERATION_PROMPT_TOKENS
    assert [t.encode() for t in toks] == chat_token_bytes(msgs)
    parts = [{"role": "user", "content": [{"type": "text", "text": "Hi, you!"}]}]
    assert len(chat_tokens(parts)) == 4 + TEMPLATE_TOKENS_PER_MESSAGE + GENERATION_PROMPT_TOKENS


def test_block_keys_are_chained_prefix_keys():
    a = split_token_bytes("x " * 64)
    b = split_token_bytes("y " + "x " * 63)
    ka, kb = block_keys(a, 16, "m"), block_keys(b, 16, "m")
    assert len(ka) == 4
    assert all(x != y for x, y in zip(ka, kb, strict=True))  # a different first block changes every key
    assert block_keys(a[:40], 16, "m") == ka[:2]
    assert block_keys(a, 16, "other-model") != ka


def test_ids_and_detokenize_round_trip():
    tk = Tokenizer(16)
    toks = split_tokens("cache hit, cache miss")
    ids = tk.ids(toks)
    assert ids[0] == ids[3] and all(0 <= i < 100_000 for i in ids)
    assert tk.detokenize(ids) == "cache hit , cache miss"


def test_130k_token_prompt_tokenizes_and_hashes_fast():
    text = "salt-7f3a " + "lorem " * 130_000
    tk = Tokenizer(16, root="m")
    best = float("inf")
    for i in range(5):
        t0 = time.perf_counter()
        info = Tokenizer(16, root=str(i)).prompt(text)
        best = min(best, time.perf_counter() - t0)
    assert info.num_tokens == 130_003
    assert len(info.block_keys) == 130_003 // 16
    print(f"130k-token prompt: tokenize + block keys {best * 1e3:.1f} ms")
    assert best < 0.1
    t0 = time.perf_counter()
    tk.prompt(text)
    tk.prompt(text)  # second time: from the prompt cache
    assert time.perf_counter() - t0 < 0.2


def test_plain_words_fast_path_gives_the_same_count_and_keys() -> None:
    """The plain-words path (kvbench's prompts) is the general tokenizer's result, exactly; any
    text it does not cover (punctuation, other whitespace, double or edge spaces, non-ASCII) is
    left to the general path."""
    import random

    from kvbench.mock.tokenizer import block_keys, plain_words_keys, split_token_bytes

    rng = random.Random(3)
    pieces = ["a", "bc", "x_1", "Zed", "9", " ", " ", " ", "  ", ",", "\t", "é", "\x1f"]
    covered = 0
    for trial in range(400):
        plain = trial % 2 == 0
        pool = pieces[:6] if plain else pieces
        text = "".join(rng.choice(pool) for _ in range(rng.randint(1, 120)))
        for bt in (1, 4, 16):
            fast = plain_words_keys(text, bt, "root")
            toks = split_token_bytes(text)
            if fast is not None:
                covered += 1
                assert fast == (len(toks), block_keys(toks, bt, "root")), (text, bt)
    assert covered > 100  # the path is taken, not only refused
    words = " ".join(rng.choice(["the", "of", "cache"]) for _ in range(16 * 40))
    assert plain_words_keys(words, 16, "m") is not None
    assert plain_words_keys(words + " ", 16, "m") is None and plain_words_keys("a, b", 16, "m") is None
