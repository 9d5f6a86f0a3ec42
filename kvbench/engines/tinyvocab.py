"""The tiny models' vocabulary and weight recipe, shared by both model writers.

Pure standard library: this file is imported by kvbench itself (GGUF writer) and, as a
plain module next to the script, by ``make_hf_model.py`` running inside vLLM's own venv.

Vocabulary (SentencePiece-style, like Llama 2's):
    0 <unk>, 1 <s>, 2 </s>, 3..258 the byte tokens <0x00>..<0xFF>,
    259.. "▁" (the space marker) and the printable ASCII characters '!'..'~',
    then, for each word of kvbench's prompt vocabulary (kvbench.prompts.VOCAB), "▁word" and
    every shorter "▁wor", "▁wo", "▁w" on the way to it (SentencePiece builds a token by merging
    adjacent pieces that are themselves tokens, so the chain must be there; for the HF tokenizer
    the same chain is the BPE merge list).
So a prompt of kvbench's words is exactly one token per word, as with the BPE vocabularies of
real models that kvbench's prompt builder counts on; any other text falls back to one token per
ASCII character, and to byte tokens beyond ASCII. A space is prepended to the text (like Llama 2),
so the first word is a word token too.

Random weights would happily emit <unk>, </s> or raw bytes (invalid UTF-8 stalls a
stream, </s> ends it early). The output layer is therefore biased against them through
a constant channel: hidden dimension 0 of every token embedding is CONST, no layer writes
to it (its rows in the attention output and FFN down projections are zero, its norm gains
inside the blocks are zero), so after the final norm it is a large positive constant; the
output rows of banned tokens carry -BAN on that dimension. Llama has no output bias tensor,
so this is how a bias is expressed with Llama's own tensors.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

SPACE = "\u2581"  # ▁
UNK, BOS, EOS = 0, 1, 2
N_BYTES = 256
FIRST_BYTE = 3
CONST = 1.0
BAN = 8.0
# The output layer's scale: a random head of std 0.02 gives logits a few hundredths apart, and
# greedy decoding then flips between near-tied tokens when a warm request computes the last
# prompt token alone instead of in a batch (different float rounding). Std 1.0 spreads the
# logits (std ~5) so cold and warm requests generate the same text.
HEAD_STD = 1.0
RECIPE = 3  # bump when the weights change: it is part of the model's name
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

# token types, as GGUF numbers them
TYPE_NORMAL, TYPE_UNKNOWN, TYPE_CONTROL, TYPE_BYTE = 1, 2, 3, 6


def word_pieces(words: Sequence[str]) -> list[str]:
    """ "▁w", "▁wo", ..., "▁word" for every word, each piece once, in first-seen order."""
    pieces: dict[str, None] = {}
    for word in words:
        for i in range(1, len(word) + 1):
            pieces[SPACE + word[:i]] = None
    return list(pieces)


def tokens(words: Sequence[str] = ()) -> list[str]:
    out = ["<unk>", "<s>", "</s>"]
    out += [f"<0x{b:02X}>" for b in range(N_BYTES)]
    out += [SPACE] + [chr(c) for c in range(0x21, 0x7F)]
    out += [p for p in word_pieces(words) if len(p) > 1]
    return out


def merges(words: Sequence[str]) -> list[tuple[str, str]]:
    """BPE merges that build each word piece from the one before it plus one character."""
    return [(p[:-1], p[-1]) for p in word_pieces(words) if len(p) > 1]


def token_types(words: Sequence[str] = ()) -> list[int]:
    types = [TYPE_UNKNOWN, TYPE_CONTROL, TYPE_CONTROL] + [TYPE_BYTE] * N_BYTES
    return types + [TYPE_NORMAL] * (len(tokens(words)) - len(types))


def banned_ids() -> list[int]:
    """Tokens the model must never generate: specials and raw bytes."""
    return list(range(FIRST_BYTE + N_BYTES))


def words_digest(words: Sequence[str]) -> str:
    return hashlib.sha256(" ".join(words).encode()).hexdigest()[:6]
