"""plain_body.split_prompt: json.loads's answer without decoding a plain prompt, or None."""

from __future__ import annotations

import json
import random

import pytest

from kvbench.mock import native
from kvbench.mock.api.plain_body import split_prompt
from kvbench.mock.tokenizer import Tokenizer


def _agrees(raw: bytes) -> bool:
    """split_prompt's answer, when it gives one, is json.loads's; returns whether it gave one."""
    got = split_prompt(raw)
    if got is None:
        return False
    rest, prompt = got
    assert {**rest, "prompt": prompt.decode()} == json.loads(raw.decode()), raw[:120]
    return True


def test_kvbench_bodies_are_split_and_agree() -> None:
    text = " ".join(random.Random(1).choice(["alpha", "x_1", "Zed", "9"]) for _ in range(5000))
    for body in (
        {"model": "m", "prompt": text, "max_tokens": 16, "temperature": 0, "stream": True},
        {"prompt": text, "stream_options": {"include_usage": True}, "seed": 3},
        {"model": "m", "max_tokens": 4, "temperature": 0, "prompt": text},
    ):
        assert _agrees(json.dumps(body).encode())
        assert _agrees(json.dumps(body, separators=(",", ":")).encode())
        assert _agrees(json.dumps(body, indent=2).encode())


@pytest.mark.parametrize(
    "raw",
    [
        b'{"prompt": "a, b"}',  # punctuation: not plain
        b'{"prompt": "caf\xc3\xa9"}',  # non-ASCII
        b'{"prompt": "tab\there"}',  # a control character json refuses
        b'{"prompt": "a \\u0062"}',  # an escape in the prompt
        b'{"model": "m\\"x", "prompt": "a b"}',  # an escape before it
        b'{"prompt": "a b", "model": "\\n"}',  # and after it
        b'{"x": {"prompt": "a b"}, "prompt": "c d"}',  # the first one nested
        b'{"x": {"prompt": "a b"}, "pro\\u006dpt": ""}',  # nested, and an escaped top-level key
        b'{"prompt": "a b", "prompt": "c d"}',  # duplicates: json keeps the last
        b'{"y\\"prompt": "a b", "prompt": ""}',  # the key text inside another key
        b'{"x": ["prompt", "a b"]}',  # a value, not a key
        b'{"prompt": ["a b"]}',  # a list of one (the general path reads it)
        b'{"prompt": "a b"',  # not JSON
        b'["prompt", "a b"]',  # not an object
        b'{"prompt" "a b"}',
    ],
)
def test_anything_else_is_left_to_json(raw: bytes) -> None:
    assert split_prompt(raw) is None


def test_random_bodies_never_disagree_with_json() -> None:
    rng = random.Random(7)
    pieces = ['"prompt"', '"a b"', '"x"', ":", ",", " ", "{", "}", "[", "]", '"\\u0070rompt"', "1", '"c\\"d"']
    split = 0
    for _ in range(4000):
        raw = "{" + "".join(rng.choice(pieces) for _ in range(rng.randint(1, 9))) + "}"
        try:
            json.loads(raw)
        except ValueError:
            assert split_prompt(raw.encode()) is None  # never answers for bad JSON
            continue
        split += _agrees(raw.encode())
    assert split > 0  # some were split, and agreed


def test_plain_prompt_is_prompt_of_the_decoded_text() -> None:
    text = " ".join(f"w{i % 97}" for i in range(3000))
    a, b = Tokenizer(16, "m"), Tokenizer(16, "m")
    assert a.plain_prompt(text.encode()) == b.prompt(text)
    # "" is no plain words: the C path says so (the caller decodes the body), the Python path's
    # caller checked it and gets the general path's answer
    assert a.plain_prompt(b"") == (None if native.available() else b.prompt(""))


@pytest.mark.parametrize("check", [True, False])
def test_unchecked_splits_plus_the_tokenizer_agree_with_json(check: bool) -> None:
    # what completions.py does with the C accelerator (check=False: the tokenizer checks the words)
    if not check and not native.available():
        pytest.skip("check=False is for the C accelerator's tokenizer")
    rng = random.Random(3)
    words = ["alpha", "x_1", "Zed", "9", "a,b", "caf\u00e9", "tab\there", "two  ", ""]
    for _ in range(400):
        prompt = " ".join(rng.choice(words) for _ in range(rng.randint(0, 40)))
        raw = json.dumps(
            {"model": "m", "prompt": prompt, "max_tokens": 3}, ensure_ascii=rng.random() < 0.5
        ).encode()
        got = split_prompt(raw, check=check)
        info = Tokenizer(16, "m").plain_prompt(got[1]) if got else None
        if info is not None:
            assert info == Tokenizer(16, "m").prompt(json.loads(raw)["prompt"]), raw[:80]
            assert {**got[0], "prompt": prompt} == json.loads(raw)
