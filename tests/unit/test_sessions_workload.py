"""The sessions workload: seeded plans, token-exact messages, salts, and the chat body."""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic import ValidationError

from kvbench.load.sessions import (
    Conversation,
    chat_body,
    content_counter,
    draw_think_times,
    fit_message,
    plan_sessions,
    stream_of,
)
from kvbench.mock.tokenizer import chat_tokens
from kvbench.scenario import SessionsSection as SessionsKnobs
from kvbench.scenario.sessions import ThinkTime


def test_plan_is_seeded_and_shaped():
    knobs = SessionsKnobs(users=20, turns={"min": 2, "max": 6}, think_time={"mean_s": 3.0}, seed=7)
    a, b = plan_sessions(knobs), plan_sessions(knobs)
    assert a == b
    assert [p.session_id for p in a] == list(range(20))
    assert all(2 <= p.turns <= 6 for p in a)
    assert len({p.turns for p in a}) > 1  # a distribution, not one value
    assert all(p.think_s[0] == 0.0 and len(p.think_s) == p.turns for p in a)
    assert plan_sessions(knobs.model_copy(update={"seed": 8})) != a


def test_fixed_turns_and_closed_loop_arrivals():
    plans = plan_sessions(SessionsKnobs(users=3, turns=5))
    assert [p.turns for p in plans] == [5, 5, 5]
    assert [p.arrival_s for p in plans] == [0.0, 0.0, 0.0]


def test_open_loop_arrivals():
    plans = plan_sessions(SessionsKnobs(users=50, arrival_rate_per_s=10.0, seed=1))
    arr = [p.arrival_s for p in plans]
    assert arr[0] == 0.0 and arr == sorted(arr)
    assert 2.0 < arr[-1] < 10.0  # ~49 gaps of mean 0.1 s
    const = plan_sessions(SessionsKnobs(users=4, arrival_rate_per_s=2.0, arrivals="constant"))
    assert [p.arrival_s for p in const] == [0.0, 0.5, 1.0, 1.5]


def test_think_time_distributions():
    import numpy as np

    rng = np.random.default_rng(0)
    assert draw_think_times(ThinkTime(distribution="fixed", mean_s=1.5), 3, rng) == [1.5] * 3
    u = draw_think_times(ThinkTime(distribution="uniform", min_s=1, max_s=2), 500, rng)
    assert all(1 <= x <= 2 for x in u)
    e = draw_think_times(ThinkTime(mean_s=2.0, max_s=5.0), 2000, rng)
    assert max(e) <= 5.0 and 1.5 < sum(e) / len(e) < 2.2
    mixed = draw_think_times(
        ThinkTime(distribution="fixed", mean_s=0.1, long_probability=0.3, long_s=9), 1000, rng
    )
    share = sum(x == 9 for x in mixed) / 1000
    assert 0.25 < share < 0.35 and set(mixed) == {0.1, 9.0}


def test_knob_validation():
    with pytest.raises(ValidationError, match="max_s"):
        ThinkTime(distribution="uniform")
    with pytest.raises(ValidationError, match="long_s"):
        ThinkTime(long_probability=0.5)
    with pytest.raises(ValidationError, match="min must not exceed max"):
        SessionsKnobs(turns={"min": 5, "max": 2})
    with pytest.raises(ValidationError):
        SessionsKnobs(userz=3)
    assert SessionsKnobs(users=4, active_users=10).max_active == 4


def _mock_count(text: str) -> int:
    # what the mock's /tokenize answers for one user message
    return len(chat_tokens([{"role": "user", "content": text}]))


async def _count(text: str) -> int:
    return _mock_count(text)


def test_fit_message_is_token_exact_against_the_mock_tokenizer():
    counter = content_counter(_count)
    for n in (1, 17, 500, 4096):
        text, got = asyncio.run(fit_message(n, stream_of(3, 1, 2), counter))
        assert got == n
        assert _mock_count(text) - _mock_count("") == n


def test_fit_message_converges_when_words_are_worth_more():
    # a tokenizer that splits every word in two: the word count must halve
    async def two_per_word(text: str) -> int:
        return 2 * len(text.split())

    text, got = asyncio.run(fit_message(300, stream_of(0, 0, 0), two_per_word))
    assert got == 300 and len(text.split()) == 150


def test_fit_message_without_counter_is_an_estimate():
    text, got = asyncio.run(fit_message(40, stream_of(0, None, 0), None))
    assert got is None and len(text.split()) == 40


def test_streams_differ_by_user_and_turn_and_keep_prefixes():
    s = stream_of(0, 1, 1)
    assert s(10) == s(100)[:10]
    assert stream_of(0, 1, 1)(20) != stream_of(0, 1, 2)(20) != stream_of(0, 2, 1)(20)
    assert stream_of(0, None, 0)(20) == stream_of(0, None, 5)(20)  # the system prompt is shared


def test_conversation_history_and_salts():
    c = Conversation(salt="s1 s2")
    c.add("system", "you are terse")
    msgs, pieces = c.turn("hello there")
    assert msgs == [
        {"role": "system", "content": "s1 s2 you are terse"},
        {"role": "user", "content": "hello there"},
    ]
    assert c.messages == [{"role": "system", "content": "you are terse"}]  # turn() keeps nothing
    c.add("user", "hello there")
    c.add("assistant", "alpha bravo")
    msgs2, _ = c.turn("more")
    assert [m["role"] for m in msgs2] == ["system", "user", "assistant", "user"]
    assert msgs2[:2] == msgs  # the previous prompt is a prefix of the next one
    fresh, _ = c.turn("more", salt="x9 y9")
    assert fresh[0]["content"] == "x9 y9 you are terse" and fresh[1:] == msgs2[1:]
    assert json.loads(chat_body({}, pieces))["messages"] == msgs


def test_salt_opens_the_first_user_message_without_a_system_prompt():
    c = Conversation(salt="zz")
    msgs, pieces = c.turn("hi")
    assert msgs == [{"role": "user", "content": "zz hi"}]
    assert json.loads(chat_body({"model": "m"}, pieces))["messages"] == msgs


def test_chat_body_equals_json_dumps():
    c = Conversation(salt="a b")
    c.add("system", 'quotes " and \\ and ü')
    c.add("user", "x")
    c.add("assistant", "y\nz")
    base = {"model": "m", "max_tokens": 8, "stream": True, "stream_options": {"include_usage": True}}
    msgs, pieces = c.turn("w")
    assert chat_body(base, pieces) == json.dumps({**base, "messages": msgs}, ensure_ascii=False).encode()
    with pytest.raises(ValueError):
        chat_body({"messages": []}, pieces)
