"""The mock's tokenizer: deterministic, fast, and the same for /tokenize and usage.

Rules (this is the whole tokenizer):

* One token per match of the regex ``\\w+|[^\\w\\s]``: a run of word characters, or a
  single punctuation character. Whitespace is not a token. ``"Hello, world!"`` is
  4 tokens: ``Hello``, ``,``, ``world``, ``!``.
* There are no special tokens outside the chat template, so ``add_special_tokens``
  changes nothing (accepted for vLLM compatibility).
* Chat requests (and /tokenize with ``messages``) apply a fixed template: each message
  becomes ``<|start|> ROLE <|message|> CONTENT... <|end|>`` (4 template tokens plus the
  content's tokens; the role counts as one token whatever its text), and the generation
  prompt ``<|start|> assistant <|message|>`` adds 3 more. So a chat prompt has
  ``sum(content tokens) + 4 * messages + 3`` tokens.
* Token ids are ``zlib.crc32(token.encode()) % VOCAB_SIZE`` (stable across processes).
  /detokenize maps ids back through a bounded id -> string memory filled by /tokenize
  and by generated text; text is rejoined with single spaces (whitespace is not kept).

Prefix-cache block keys: full blocks of ``block_tokens`` tokens; block i's key is a 64-bit
function of the prompt's tokens joined by single spaces up to the end of block i, rooted in the
model name (span_hash.py: a few numpy passes over the bytes, not a hash call per block), so a
block's key names its whole prefix (as vLLM's chained block hashes do). No token holds a space (a
chat role's spaces are escaped), so the joined bytes name the token sequence. Only the count and
the block keys of a prompt are kept, never its token list.

Plain words (kvbench's own prompts: ASCII word characters and single spaces) take a faster path
to the same count and keys (`plain_words_keys`: the text is already its tokens joined by spaces, no
bytes object per token); any other text takes the general one.

The prompt memo: a replayed prompt (a filled-cache phase sends each one again and again) is
found by its byte length and a 64-bit digest of its bytes (span_hash.SpanHash, whose one pass
over the words also gives the block keys: the blake2b it replaced cost ~0.7 ms for 700 KB of
text, plus a SipHash of the text for the memo's key), and tokenized only the first time. The
same digest seeds a text prompt's temperature-0 answer (the same text in every process); a chat
prompt's is a blake2b.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kvbench.mock import native
from kvbench.mock.span_hash import SpanHash, digest_seed, root_seed, span_keys

TOKEN_RE = re.compile(r"\w+|[^\w\s]")
VOCAB_SIZE = 100_000
TEMPLATE_TOKENS_PER_MESSAGE = 4
GENERATION_PROMPT_TOKENS = 3
START, MESSAGE, END = "<|start|>", "<|message|>", "<|end|>"


# ASCII fast path: for ASCII text, \w is [A-Za-z0-9_] and \s is [\t\n\v\f\r\x1c-\x1f ], so
# splitting the bytes on punctuation and then on whitespace gives exactly the regex tokens,
# about 3x faster than re.findall on str (bytes objects are cheap to create).
_ASCII_PUNCT = re.compile(rb"([^A-Za-z0-9_\t\n\x0b\x0c\r\x1c-\x1f ])")
_ASCII_WS = bytes.maketrans(b"\x1c\x1d\x1e\x1f", b"    ")


def split_tokens(text: str) -> list[str]:
    """The token strings of a text."""
    return TOKEN_RE.findall(text)


def split_token_bytes(text: str) -> list[bytes]:
    """The tokens of a text as UTF-8 bytes (what block keys hash); fast for ASCII text."""
    if not text.isascii():
        return [t.encode("utf-8", "surrogatepass") for t in TOKEN_RE.findall(text)]
    data = text.encode("ascii").translate(_ASCII_WS)
    pieces = _ASCII_PUNCT.split(data)
    if len(pieces) == 1:
        return data.split()
    out: list[bytes] = []
    extend, append = out.extend, out.append
    for i in range(0, len(pieces) - 1, 2):
        extend(pieces[i].split())
        append(pieces[i + 1])
    extend(pieces[-1].split())
    return out


def count_tokens(text: str) -> int:
    return len(split_token_bytes(text))


def token_id(token: str) -> int:
    return zlib.crc32(token.encode("utf-8")) % VOCAB_SIZE


def message_text(content: Any) -> str:
    """Text of an OpenAI message content: a string or a list of {"type": "text"} parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    raise ValueError("message content must be a string or a list of text parts")


def chat_tokens(messages: Sequence[Any], add_generation_prompt: bool = True) -> list[str]:
    """Token strings of a chat prompt after the fixed template (see module docstring)."""
    out: list[str] = []
    for m in messages:
        if not isinstance(m, dict):
            raise ValueError("each message must be an object with 'role' and 'content'")
        role = str(m.get("role", "user"))
        out.append(START)
        out.append(role)
        out.append(MESSAGE)
        out.extend(split_tokens(message_text(m.get("content"))))
        out.append(END)
    if add_generation_prompt:
        out.extend((START, "assistant", MESSAGE))
    return out


def chat_token_bytes(messages: Sequence[Any], add_generation_prompt: bool = True) -> list[bytes]:
    """Like chat_tokens, as bytes, using the fast path for message contents."""
    out: list[bytes] = []
    for m in messages:
        if not isinstance(m, dict):
            raise ValueError("each message must be an object with 'role' and 'content'")
        out.append(START.encode())
        out.append(_role_bytes(str(m.get("role", "user"))))
        out.append(MESSAGE.encode())
        out.extend(split_token_bytes(message_text(m.get("content"))))
        out.append(END.encode())
    if add_generation_prompt:
        out.extend((START.encode(), b"assistant", MESSAGE.encode()))
    return out


def _role_bytes(role: str) -> bytes:
    """A role as one token: its spaces escaped (percent-style, so still one-to-one), so that the
    prompt's tokens joined by spaces name its token sequence."""
    return role.encode("utf-8", "surrogatepass").replace(b"%", b"%25").replace(b" ", b"%20")


def block_keys(tokens: Sequence[bytes], block_tokens: int, root: str = "") -> tuple[int, ...]:
    """Chained 64-bit keys of every full block of `tokens` (see module docstring)."""
    n_full = len(tokens) // block_tokens
    if n_full == 0:
        return ()
    import numpy as np  # a dependency of kvbench; the mock imports it at start (app.py)

    # byte offset just past each token in the space-joined text
    ends = np.cumsum(np.fromiter(map(len, tokens), np.int64, len(tokens)) + 1) - 1
    return span_keys(b" ".join(tokens), ends[block_tokens - 1 :: block_tokens][:n_full], root)


# Plain words (kvbench's own prompts): ASCII word characters and single spaces, nothing else.
PLAIN_BYTES = bytes(range(48, 58)) + bytes(range(65, 91)) + bytes(range(97, 123)) + b"_ "


def plain_words_keys(text: str, block_tokens: int, root: str = "") -> tuple[int, tuple[int, ...]] | None:
    """(token count, block keys) of a text of plain words, the same as block_keys(split_token_bytes)
    gives, without a bytes object per token; None for any other text.

    Such a text is its tokens joined by single spaces already: one translate to check it, one
    numpy pass for its spaces (every block_tokens-th ends a block), then span_keys on the text.
    """
    if not text.isascii():
        return None
    data = text.encode("ascii")
    return _plain_words_keys(data, block_tokens, root, SpanHash(data))


def _plain_words_keys(
    data: bytes, block_tokens: int, root: str, words: SpanHash, checked: bool = False
) -> tuple[int, tuple[int, ...]] | None:
    """plain_words_keys of a text's ASCII bytes, `words` its SpanHash; `checked`: known to hold
    PLAIN_BYTES only."""
    if not data or data[0] == 32 or data[-1] == 32:
        return None
    if not checked and data.translate(None, PLAIN_BYTES):
        return None
    import numpy as np  # a dependency of kvbench; the mock imports it at start (app.py)

    is_space = np.frombuffer(data, np.uint8) == 32
    if np.logical_and(is_space[1:], is_space[:-1]).any():
        return None  # two spaces in a row
    spaces = np.flatnonzero(is_space)
    n = len(spaces) + 1
    n_full = n // block_tokens
    ends = spaces[block_tokens - 1 :: block_tokens][:n_full]
    if len(ends) < n_full:  # the last full block ends the text
        ends = np.append(ends, len(data))
    return n, words.keys(ends, root)


@dataclass(frozen=True)
class PromptInfo:
    """What the server keeps about a prompt: its size, block keys and a digest."""

    digest: bytes
    num_tokens: int
    block_keys: tuple[int, ...]

    @property
    def seed(self) -> int:
        return int.from_bytes(self.digest[:8], "little")


class Tokenizer:
    """Tokenizes prompts and remembers the last few (by a digest of their text)."""

    def __init__(self, block_tokens: int, root: str = "", cache_entries: int = 256, id_memory: int = 200_000):
        self.block_tokens = block_tokens
        self.root = root
        self._root_seed, self._digest_seed = root_seed(root), digest_seed()
        self._cache: OrderedDict[Hashable, PromptInfo] = OrderedDict()
        self._cache_entries = cache_entries
        self._ids: OrderedDict[int, str] = OrderedDict()
        self._id_memory = id_memory

    def _cached(
        self, key: Hashable, digest: Callable[[], bytes], build: Callable[[], tuple[int, tuple[int, ...]]]
    ) -> PromptInfo:
        info = self._cache.get(key)
        if info is not None:
            self._cache.move_to_end(key)
            return info
        info = PromptInfo(digest(), *build())
        self._cache[key] = info
        if len(self._cache) > self._cache_entries:
            self._cache.popitem(last=False)
        return info

    def prompt(self, text: str) -> PromptInfo:
        return self._prompt(text.encode("utf-8", "surrogatepass"), text.isascii(), False, lambda: text)

    def plain_prompt(self, data: bytes | memoryview) -> PromptInfo | None:
        """prompt() of a text of plain words given as its bytes. With the C accelerator the words are
        checked here (None: not plain words, the caller decodes the body); without it the caller
        has checked them (plain_body.split_prompt)."""
        if native.available():
            return self._native_prompt(data)
        raw = bytes(data)
        return self._prompt(raw, True, True, lambda: raw.decode("ascii"))

    def _prompt(self, data: bytes, ascii: bool, checked: bool, text: Callable[[], str]) -> PromptInfo:
        if ascii and native.available():  # plain words in C, else the general path below
            fast = self._native_prompt(data)
            if fast is not None:
                return fast
        words = SpanHash(data)  # one pass: the memo's key and the answer's seed, and the blocks' keys
        digest = words.digest()

        def build() -> tuple[int, tuple[int, ...]]:
            plain = _plain_words_keys(data, self.block_tokens, self.root, words, checked) if ascii else None
            return plain or self._count_and_keys(split_token_bytes(text()))

        return self._cached(("p", len(data), digest), lambda: digest.to_bytes(8, "little"), build)

    def _native_prompt(self, data: bytes | memoryview) -> PromptInfo | None:
        """prompt() of plain words through the C accelerator (native.py); None for other text.

        One call checks the words and gives the count, keys and digest (a prompt the tokenizer
        remembers is rare here: the body memo catches a replayed body first); a remembered prompt
        keeps its first key tuple, whose identity the cache's lookup memo follows. The same memo
        key as the general path's: both give the same PromptInfo for the same text."""
        got = native.plain_keys(data, self.block_tokens, self._root_seed, self._digest_seed)
        if got is None:
            return None
        n, keys, digest = got
        return self._cached(("p", len(data), digest), lambda: digest.to_bytes(8, "little"), lambda: (n, keys))

    def _count_and_keys(self, tokens: list[bytes]) -> tuple[int, tuple[int, ...]]:
        return len(tokens), block_keys(tokens, self.block_tokens, self.root)

    def chat(self, messages: Sequence[Any], add_generation_prompt: bool = True) -> PromptInfo:
        parts: list[str] = []
        for m in messages:
            if not isinstance(m, dict):
                raise ValueError("each message must be an object with 'role' and 'content'")
            parts += (str(m.get("role", "user")), message_text(m.get("content")))

        def digest() -> bytes:
            h = hashlib.blake2b(b"c" if add_generation_prompt else b"C", digest_size=16)
            for role, content in zip(parts[::2], parts[1::2], strict=True):
                h.update(role.encode() + b"\x00")
                h.update(content.encode("utf-8", "surrogatepass") + b"\x01")
            return h.digest()

        key = ("c", add_generation_prompt, tuple(map(len, parts)), hash(tuple(parts)))
        return self._cached(
            key, digest, lambda: self._count_and_keys(chat_token_bytes(messages, add_generation_prompt))
        )

    def ids(self, tokens: Iterable[str]) -> list[int]:
        """Token ids, remembering id -> string for /detokenize (bounded memory)."""
        out = []
        memo = self._ids
        for t in tokens:
            i = token_id(t)
            if i not in memo:
                memo[i] = t
                if len(memo) > self._id_memory:
                    memo.popitem(last=False)
            out.append(i)
        return out

    def detokenize(self, ids: Iterable[int]) -> str:
        return " ".join(self._ids.get(int(i), f"<unk:{int(i)}>") for i in ids)
