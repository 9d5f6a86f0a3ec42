"""The SSE data decoder (kvbench.client.stream._loads) answers exactly as json.loads does: the same
value for every JSON text, the same ValueError for every other; it only skips json.loads' Python
layers for a value that starts at the first character and ends at the last."""

from __future__ import annotations

import json

import pytest

from kvbench.client.stream import _loads

SAME = [
    '{"choices":[{"index":0,"text":" hello","finish_reason":null}]}',
    '{"choices":[],"usage":{"prompt_tokens":3,"prompt_tokens_details":{"cached_tokens":0}}}',
    ' {"a": 1}',  # leading blank: the scanner declines, json.loads skips it
    '{"a": 1}\n ',  # trailing blanks
    '"text"',
    "[1, 2.5, true, null]",
    "NaN",  # json.loads takes the constants, and so must the fast path
    '{"a": Infinity}',
    '{"é": "\\u00e9\\ud83d\\ude00"}',
    "0",
]
BAD = [
    "",
    "   ",
    '{"a": 1} {"b": 2}',  # extra data after a value
    '{"a": 1',
    "{'a': 1}",
    "\ufeff{}",  # a BOM: json.loads refuses it
    "data: {}",
    "[DONE]",
]


@pytest.mark.parametrize("text", SAME)
def test_a_json_text_decodes_as_json_loads_decodes_it(text: str) -> None:
    got, want = _loads(text), json.loads(text)
    assert got == want or (got != got and want != want)  # NaN is not equal to itself
    assert type(got) is type(want)


@pytest.mark.parametrize("text", BAD)
def test_anything_else_raises_what_json_loads_raises(text: str) -> None:
    with pytest.raises(ValueError) as fast:
        _loads(text)
    with pytest.raises(ValueError) as slow:
        json.loads(text)
    assert str(fast.value) == str(slow.value)
