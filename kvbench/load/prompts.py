"""Deterministic, token-exact, salted prompt sets.

A prompt is `salt + " " + body`:
- the body is a seeded stream of common English words (each one token in the
  BPE vocabularies of current models, and exactly one in the mock's tokenizer),
  optionally starting with a document shared by every prompt;
- the salt is a few words drawn fresh for each run (or each request), placed at
  the VERY START so that no block of a prompt can match anything an earlier run
  cached: cold by construction, not by hope (vllm issue #54227). Salts always
  have the same number of words, so re-salting keeps a prompt's length.

Lengths are hit exactly by counting with the target's own tokenizer (its
/tokenize endpoint) and adjusting the word count; where a server has no such
endpoint, one token per word is assumed and the server's usage.prompt_tokens
is recorded per request to show the real figure.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import numpy as np

from kvbench.scenario import LengthRange

# Common words that are single tokens (with a leading space) in GPT-2/Llama/o200k-style vocabularies.
_WORDS = """
the of and to in is was for on that with as by at from his her are be this an which or have had not
but were they one all their there been has when who will more no if out so said what up its about
into than them can only other new some could time these two may then do first any my now such like
our over man me even most made after also did many before must through back years where much your
way well down should because each just those people how too little state good very make world still
own see men work long get here between both life being under never day same another know while last
might us great old year off come since against go came right used take three states himself few
house use during without again place around however home small found thought went say part once
general high upon school every does got united left number course war until always away something
fact though water less public put think almost hand enough far took head yet government system
better set told nothing night end why called didn find look asked later knew point next city give
group toward young let room side social present given several order national second possible rather
per face among form important often things looked early white case john become large big need four
within felt along children saw best church ever least power development light thought family
interest want members mind country area others done turned although open god service problem certain
kind different thus began door help means sense whole matter perhaps itself york times law human
line above name example action company hands local show whether five history gave today either act
feet across taken past quite anything seen having death week experience body word half really field
car words already themselves information tell together college shall money period held keep sure
probably free seems real behind cannot miss political air question making office brought whose
special major heard problems federal became study ago moment available known result street economic
boy position reason change south board individual job areas society west close turn love community
true court force full seem am front art care policy simply nature business period
""".split()  # noqa: SIM905 (a word list reads better as prose)
VOCAB: tuple[str, ...] = tuple(dict.fromkeys(w for w in _WORDS if w.isalpha()))
_VOCAB_ARR = np.array(VOCAB, dtype=object)
SALT_WORDS = 6

TokenCounter = Callable[[list[str]], Awaitable[list[int]]]


@dataclass(slots=True)
class Prompt:
    prompt_id: int
    requested_tokens: int
    body: str
    actual_tokens: int | None = None  # salt + body, as the target counts it (None: not counted)
    count_source: str = "estimate"

    def with_salt(self, salt: str) -> str:
        return f"{salt} {self.body}" if salt else self.body

    def row(self, salt: str) -> dict[str, object]:
        text = self.with_salt(salt)
        return {
            "prompt_id": self.prompt_id,
            "requested_tokens": self.requested_tokens,
            "actual_tokens": self.actual_tokens,
            "count_source": self.count_source,
            "chars": len(text),
            "sha256": hashlib.sha256(text.encode()).hexdigest()[:16],
        }


def make_salt(rng: np.random.Generator) -> str:
    """Six random vocabulary words: 6 tokens, ~10^16 combinations."""
    return " ".join(_VOCAB_ARR[rng.integers(0, len(VOCAB), SALT_WORDS)].tolist())


def word_stream(seed: int, stream: int, n_words: int) -> list[str]:
    rng = np.random.default_rng([seed, stream])
    return _VOCAB_ARR[rng.integers(0, len(VOCAB), n_words)].tolist()


def resolve_lengths(spec: Sequence[int] | LengthRange, count: int, seed: int) -> list[int]:
    """Per-prompt lengths: a list cycles; a range is drawn (uniform) or evenly spaced (fixed_mean)."""
    if isinstance(spec, LengthRange):
        lo, hi = spec.min, spec.max
        if spec.distribution == "fixed_mean" or count == 1:
            return [round(x) for x in np.linspace(lo, hi, count)] if count > 1 else [round((lo + hi) / 2)]
        rng = np.random.default_rng([seed, 0xC0FFEE])
        return rng.integers(lo, hi + 1, count).tolist()
    lengths = list(spec)
    return [lengths[i % len(lengths)] for i in range(count)]


def _compose(words: list[str], shared: list[str], n: int) -> str:
    if n <= len(shared):
        return " ".join(shared[:n])
    return " ".join(shared + words[: n - len(shared)]) if shared else " ".join(words[:n])


async def build_prompts(
    lengths: list[int],
    *,
    seed: int,
    shared_prefix_tokens: int = 0,
    counter: TokenCounter | None = None,
    sample_salt: str = "",
    tolerance: int = 0,
    max_rounds: int = 6,
) -> list[Prompt]:
    """Build one prompt per entry of `lengths`, each `sample_salt + body` hitting its length.

    `counter` counts tokens as the target does (e.g. the server's /tokenize); with
    none, one token per word is assumed and the prompts are marked as estimates.
    """
    shared = word_stream(seed, 0x5EED, shared_prefix_tokens) if shared_prefix_tokens else []
    salt_words = len(sample_salt.split())
    streams = [word_stream(seed, i + 1, n + n // 4 + 64) for i, n in enumerate(lengths)]
    n_words = [max(1, n - salt_words) for n in lengths]
    bodies = [_compose(streams[i], shared, n_words[i]) for i in range(len(lengths))]
    if counter is None:
        return [
            Prompt(i, lengths[i], bodies[i], lengths[i] if salt_words else n_words[i], "estimate")
            for i in range(len(lengths))
        ]
    counts = await counter([_salted(sample_salt, b) for b in bodies])
    seen: list[dict[int, int]] = [{} for _ in lengths]  # per prompt: words -> tokens counted
    for _ in range(max_rounds):
        pending = [i for i, c in enumerate(counts) if abs(c - lengths[i]) > tolerance]
        if not pending:
            break
        for i in pending:
            seen[i][n_words[i]] = counts[i]
            n_words[i] = _next_words(streams[i], len(shared), seen[i], n_words[i], lengths[i])
            if n_words[i] > len(streams[i]):
                streams[i] = word_stream(seed, i + 1, n_words[i] + n_words[i] // 4 + 64)
            bodies[i] = _compose(streams[i], shared, n_words[i])
        new = await counter([_salted(sample_salt, bodies[i]) for i in pending])
        for i, c in zip(pending, new, strict=True):
            counts[i] = c
    return [Prompt(i, lengths[i], bodies[i], counts[i], "server") for i in range(len(lengths))]


def _next_words(words: list[str], shared: int, seen: dict[int, int], n: int, target: int) -> int:
    """The word count to try next; may put a shorter word at the boundary (edits `words`).

    Most words are one token: step by the token difference, scaled by the tokens per word so far
    (a tokenizer of two tokens a word would otherwise overshoot by as much as it undershot, forever).
    Where n words count under and n + 1 over, the boundary word costs more than the gap: the stream's
    shortest word takes its place (words after the shared prefix only; that prefix is every prompt's).
    """
    step = target - seen[n]
    low = n if step > 0 else n - 1
    below, above = seen.get(low), seen.get(low + 1)
    if below is not None and above is not None and below < target < above and low >= shared:
        k = low - shared  # the boundary word's place in this prompt's own stream
        if k < len(words):
            shortest = min(words[: max(k, 1)], key=len)
            if len(shortest) < len(words[k]):
                words[k] = shortest
                seen.pop(low + 1, None)
                return low + 1
    delta = round(step / max(seen[n] / max(n, 1), 1e-9))
    return max(1, n + (delta or (1 if step > 0 else -1)))


def _salted(salt: str, body: str) -> str:
    return f"{salt} {body}" if salt else body


def bounded_counter(count_one: Callable[[str], Awaitable[int]], parallel: int = 4) -> TokenCounter:
    """Turn a one-text counter into a list counter with bounded parallelism."""
    sem = asyncio.Semaphore(parallel)

    async def one(text: str) -> int:
        async with sem:
            return await count_one(text)

    async def many(texts: list[str]) -> list[int]:
        return list(await asyncio.gather(*(one(t) for t in texts)))

    return many
