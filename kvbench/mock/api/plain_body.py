"""A completion body whose prompt is plain words, read without decoding the prompt as JSON.

kvbench's own prompts are plain words (ASCII word characters and spaces), sent as
``{"model": ..., "prompt": "...700 KB...", ...}``. json.loads scans and copies those 700 KB into
a str (~0.5 ms a cold request) that the tokenizer only encodes back into bytes. `split_prompt`
instead finds the prompt's bytes in the raw body and decodes the rest (a few hundred bytes) with
json; the answer is exactly json.loads(raw) (with its prompt as bytes) or None, and None sends
the caller to the full decode. It answers only where that is certain:

* no backslash anywhere in the body, so there are no escapes: every ``"`` delimits a string and
  every key is written as itself;
* ``"prompt"`` occurs once, as a key (after ``{`` or ``,``), followed by ``: "``; its value up to
  the next ``"`` is plain words (so it is the string's exact UTF-8, with no control characters);
* the rest, with that value emptied, decodes to an object whose only "prompt" key, at any depth,
  is its own, with the value "" (so the key found was that top-level one).
"""

from __future__ import annotations

import json
from typing import Any

from kvbench.mock.tokenizer import PLAIN_BYTES

_KEY = b'"prompt"'
_WS = b" \t\n\r"


def split_prompt(raw: bytes, check: bool = True) -> tuple[dict[str, Any], bytes | memoryview] | None:
    """(the body with "prompt": "", the prompt's bytes) when its prompt is plain words, else None.

    `check=False`: the prompt's bytes are not checked here for plain words, and come as a view of
    `raw` (no copy): for a caller whose tokenizer checks them in its own pass (native.plain_keys)
    and decodes the whole body when they are not plain."""
    at = raw.find(_KEY)
    if at < 0 or raw.find(b"\\", 0, at) >= 0:
        return None
    before = raw[:at].rstrip(_WS)
    if not before or before[-1:] not in (b"{", b","):
        return None
    i = _skip_ws(raw, at + len(_KEY))
    if raw[i : i + 1] != b":":
        return None
    i = _skip_ws(raw, i + 1)
    if raw[i : i + 1] != b'"':
        return None
    start = i + 1
    end = raw.find(b'"', start)
    if end < 0:
        return None
    tail = raw[end:]
    if tail.find(b"\\") >= 0 or raw.find(_KEY, end) >= 0:
        return None
    prompt: bytes | memoryview
    if check:
        prompt = raw[start:end]
        if prompt.translate(None, PLAIN_BYTES):
            return None
    else:
        prompt = memoryview(raw)[start:end]
    try:
        rest = json.loads((raw[:start] + tail).decode("utf-8"))  # as json_object decodes a body
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(rest, dict) or rest.get("prompt") != "" or _prompt_keys(rest) != 1:
        return None
    return rest, prompt


def _skip_ws(raw: bytes, i: int) -> int:
    while raw[i : i + 1] in (b" ", b"\t", b"\n", b"\r"):
        i += 1
    return i


def _prompt_keys(value: Any) -> int:
    """How many "prompt" keys the decoded value holds, at any depth."""
    if isinstance(value, dict):
        return ("prompt" in value) + sum(map(_prompt_keys, value.values()))
    if isinstance(value, list):
        return sum(map(_prompt_keys, value))
    return 0
