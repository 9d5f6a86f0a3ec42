"""The sessions workload: who talks, how many turns, how long they pause, and what they say.

Pure and seeded (numpy default_rng), testable without a network:
- `plan_sessions` draws each user's turn count, the pauses before its later turns and, for an
  open loop, when the user arrives;
- `message_words` gives the text of the shared system prompt and of every user message: a
  seeded stream of common words (one token each in current BPE vocabularies, as in
  kvbench.load prompts), so a message of n tokens is about n words;
- `fit_message` adjusts a message's word count until the server's own tokenizer counts it at
  its target (token-exact, as kvbench's prompts are), through a counter of CONTENT tokens
  (`content_counter`: a chat message's count minus the count of an empty one);
- `Conversation` holds a user's history (system, user, assistant, user, ...) and serialises
  the chat body from per-message JSON pieces kept as they are added, so a 130k-token history
  is not re-escaped at every turn on the event loop that stamps other requests' chunks.

Cold by construction: the run's salt opens the system prompt, so nothing of an earlier run
can match (the shared system prompt is still shared by the users of this run). The baseline
puts a FRESH salt there at every turn: the same messages, nothing reusable from the first
block on.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvbench.load.prompts import VOCAB
from kvbench.scenario import SessionsSection
from kvbench.scenario.sessions import ThinkTime

_VOCAB_ARR = np.array(VOCAB, dtype=object)
_SYSTEM = 0x5E55  # stream ids: the system prompt, and (user, turn) messages below
_USER = 0x05E2

ContentCounter = Callable[[str], Awaitable[int]]


@dataclass(frozen=True, slots=True)
class SessionPlan:
    """One user's conversation, drawn before the phase starts (the baseline replays it)."""

    session_id: int
    turns: int
    think_s: tuple[float, ...]  # pause before turn k (k >= 1); think_s[0] is 0.0
    arrival_s: float = 0.0  # open loop: when the user arrives, from phase start

    def __post_init__(self) -> None:
        if len(self.think_s) != self.turns:
            raise ValueError("think_s needs one entry per turn")


def draw_think_times(spec: ThinkTime, n: int, rng: np.random.Generator) -> list[float]:
    """n pauses from the think-time distribution (seconds)."""
    if n <= 0:
        return []
    if spec.distribution == "fixed":
        out = np.full(n, spec.mean_s)
    elif spec.distribution == "uniform":
        assert spec.max_s is not None
        out = rng.uniform(spec.min_s, spec.max_s, n)
    else:
        out = rng.exponential(spec.mean_s, n) if spec.mean_s > 0 else np.zeros(n)
    out = np.maximum(out, spec.min_s)
    if spec.max_s is not None:
        out = np.minimum(out, spec.max_s)
    if spec.long_probability > 0:
        long = rng.random(n) < spec.long_probability
        out = np.where(long, spec.long_s, out)
    return [float(x) for x in out]


def arrival_offsets(rate: float, n: int, kind: str, rng: np.random.Generator) -> list[float]:
    """When each of n users arrives (seconds from phase start); the first at 0."""
    if n <= 0:
        return []
    if kind == "constant":
        return [i / rate for i in range(n)]
    gaps = rng.exponential(1.0 / rate, n)
    gaps[0] = 0.0
    return np.cumsum(gaps).tolist()


def plan_sessions(knobs: SessionsSection) -> list[SessionPlan]:
    """Every user's turn count and pauses (and arrival, open loop), from knobs.seed alone."""
    rng = np.random.default_rng([knobs.seed, 0x5E5510])
    n = knobs.users
    if isinstance(knobs.turns, int):
        turns = [knobs.turns] * n
    else:
        turns = rng.integers(knobs.turns.min, knobs.turns.max + 1, n).tolist()
    arrivals = [0.0] * n
    if knobs.arrival_rate_per_s:
        arrival_rng = np.random.default_rng([knobs.seed, 0xA77])
        arrivals = arrival_offsets(knobs.arrival_rate_per_s, n, knobs.arrivals, arrival_rng)
    think_rng = np.random.default_rng([knobs.seed, 0x7117])
    plans = []
    for s in range(n):
        pauses = [0.0, *draw_think_times(knobs.think_time, turns[s] - 1, think_rng)]
        plans.append(SessionPlan(s, int(turns[s]), tuple(pauses), float(arrivals[s])))
    return plans


def message_words(seed: int, session: int | None, turn: int, n_words: int) -> list[str]:
    """The seeded word stream of one message: the system prompt (session None) or (session, turn)."""
    key = [seed, _SYSTEM] if session is None else [seed, _USER, session, turn]
    rng = np.random.default_rng(key)
    return _VOCAB_ARR[rng.integers(0, len(VOCAB), n_words)].tolist()


async def fit_message(
    target: int,
    words: Callable[[int], list[str]],
    count: ContentCounter | None,
    max_rounds: int = 6,
) -> tuple[str, int | None]:
    """A message of `target` content tokens: (text, tokens as the server counts them, or None).

    `words(n)` returns the first n words of the message's stream (a longer draw keeps the
    shorter one as its prefix). Without a counter, one token per word is assumed.
    """
    n = max(1, target)
    text = " ".join(words(n))
    if count is None:
        return text, None
    got = await count(text)
    for _ in range(max_rounds):
        if got == target:
            break
        step = target - got
        ratio = got / max(n, 1)
        n = max(1, n + (round(step / ratio) if abs(step) > 8 and ratio > 0 else step))
        text = " ".join(words(n))
        got = await count(text)
    return text, got


def content_counter(count_message: Callable[[str], Awaitable[int]]) -> ContentCounter:
    """Content tokens of a message: its count minus the count of an empty one (the template,
    BOS), measured once; `count_message` counts a text as the server would see it."""
    overhead: list[int] = []

    async def count(text: str) -> int:
        if not overhead:
            overhead.append(await count_message(""))
        return await count_message(text) - overhead[0]

    return count


def stream_of(seed: int, session: int | None, turn: int) -> Callable[[int], list[str]]:
    """words(n) for one message; draws a longer stream only when asked for more words."""
    cache: list[list[str]] = [[]]

    def words(n: int) -> list[str]:
        if len(cache[0]) < n:
            cache[0] = message_words(seed, session, turn, n + n // 4 + 64)
        return cache[0][:n]

    return words


def salted(salt: str, text: str) -> str:
    """The salt opens the system prompt (or, with no system prompt, the first user message)."""
    return f"{salt} {text}" if salt else text


def _piece(role: str, content: str) -> bytes:
    return json.dumps({"role": role, "content": content}, ensure_ascii=False).encode("utf-8")


@dataclass
class Conversation:
    """One user's history: raw messages (the first one unsalted) and their JSON pieces, each
    serialised once; the salt is applied to the first message when a body is made, so the
    baseline re-salts a turn by re-encoding one message, not the history."""

    salt: str = ""
    messages: list[dict[str, str]] = field(default_factory=list)
    _pieces: list[bytes] = field(default_factory=list)
    _first: tuple[str, bytes] | None = None  # (salt, piece of the salted first message)

    def add(self, role: str, content: str) -> None:
        self.messages.append({"role": role, "content": content})
        self._pieces.append(_piece(role, content))

    def _first_piece(self, salt: str) -> bytes:
        if self._first is None or self._first[0] != salt:
            m = self.messages[0]
            self._first = (salt, _piece(m["role"], salted(salt, m["content"])))
        return self._first[1]

    def turn(
        self, user: str, salt: str | None = None, upto: int | None = None
    ) -> tuple[list[dict[str, str]], list[bytes]]:
        """The next turn's messages and their JSON pieces: the history (its first `upto` messages,
        default all) plus this user message, the first message salted with `salt` (default the
        conversation's). The history itself is not changed."""
        salt = self.salt if salt is None else salt
        n = len(self.messages) if upto is None else upto
        raw = [*self.messages[:n], {"role": "user", "content": user}]
        msgs = [{"role": raw[0]["role"], "content": salted(salt, raw[0]["content"])}, *raw[1:]]
        if n == 0:  # the user message is the first one
            return msgs, [_piece("user", salted(salt, user))]
        return msgs, [self._first_piece(salt), *self._pieces[1:n], _piece("user", user)]


def chat_body(base: dict[str, Any], pieces: Sequence[bytes]) -> bytes:
    """The chat request body: `base` (model, max_tokens, stream, ...) plus `messages` spliced in
    from already-serialised pieces. Equal to json.dumps({**base, "messages": [...]})."""
    if "messages" in base:
        raise ValueError("base must not carry messages")
    head = json.dumps(base, ensure_ascii=False)
    assert head.endswith("}")
    sep = ", " if len(head) > 2 else ""
    return b"".join((head[:-1].encode("utf-8"), f'{sep}"messages": ['.encode(), b", ".join(pieces), b"]}"))
