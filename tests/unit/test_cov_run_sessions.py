"""The sessions test's plan (kvbench.run.sessions.phases) on a Run made of fakes: a chat server that
answers each turn with a text naming it and counts messages as /tokenize does (content words plus
a template cost per message), so every turn row, history and cap is checked from what was sent."""

from __future__ import annotations

import json
import types
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from kvbench.client import ClientConfig, RequestRecord
from kvbench.results import read_jsonl, read_manifest
from kvbench.run.context import Run, RunOptions
from kvbench.run.preflight.target import TargetInfo
from kvbench.run.runner import start_manifest
from kvbench.run.sessions.phases import build_texts, messages_counter, run_sessions
from kvbench.scenario import load_scenario

TEMPLATE = 3  # tokens the fake's chat template adds per message


def count_messages(messages: list[dict[str, str]]) -> int:
    return sum(len(m["content"].split()) + TEMPLATE for m in messages)


class ChatHTTP:
    """The untimed calls: /tokenize for one text (prompt) or a chat (messages); no /metrics."""

    def __init__(self, tokenize: bool = True) -> None:
        self.tokenize = tokenize

    async def post_bytes(self, path: str, payload: dict[str, Any]) -> tuple[int, bytes]:
        if not self.tokenize:
            return 404, b"{}"
        msgs = payload.get("messages") or [{"role": "user", "content": payload.get("prompt", "")}]
        return 200, json.dumps({"count": count_messages(msgs)}).encode()

    async def request(self, method: str, path: str, payload: dict[str, Any]) -> tuple[int, Any]:
        status, raw = await self.post_bytes(path, payload)
        return status, json.loads(raw)

    async def get_text(self, path: str) -> tuple[int, str]:
        return 404, ""


class ChatClient:
    """Answers every chat turn with a text naming it; remembers each body it got."""

    def __init__(self) -> None:
        self.cfg = ClientConfig(base_url="http://fake", model="m", api="chat", max_tokens=5)
        self.bodies: dict[str, dict[str, Any]] = {}
        self.live = self.peak = 0

    def now(self) -> int:
        return 0

    async def send(self, rec: RequestRecord, body: bytes) -> RequestRecord:
        import asyncio

        self.live += 1
        self.peak = max(self.peak, self.live)
        await asyncio.sleep(0)  # other users' turns may start meanwhile
        self.live -= 1
        sent = json.loads(body)
        self.bodies[rec.request_id] = sent
        rec.sent_ns, rec.first_token_ns, rec.end_ns = 1_000, 2_000, 3_000
        rec.output_text = f"answer {rec.request_id}"
        rec.output_chars, rec.output_tokens = len(rec.output_text), 2
        rec.prompt_tokens_server, rec.cached_tokens = count_messages(sent["messages"]), 0
        return rec


class Adapter:
    engine = "fake"
    can_reset = False
    transfer_counters = ()
    tier_counter = None


def scenario(**sets: Any) -> Any:
    base = {
        "test.users": 3,
        "test.turns": 3,
        "test.system_prompt_tokens": 12,
        "test.first_message_tokens": 20,
        "test.turn_tokens": 8,
        "test.think_time": {"distribution": "fixed", "mean_s": 0.0},
        "test.active_users": 2,
        "telemetry.metrics": "off",
        "output.max_tokens": 5,
    }
    return load_scenario("sessions", {**base, **sets})[0]


def make_run(tmp_path: Path, scn: Any, http: ChatHTTP | None = None) -> tuple[Run, ChatClient]:
    target = TargetInfo(kind="server", base_url="http://fake", model="m", engine="generic", api="chat")
    conn = types.SimpleNamespace(run_path=tmp_path, run_id="20261206T000000Z-s-abc123", target=target)
    rd = start_manifest(scn, RunOptions(quiet=True), conn, 0)  # type: ignore[arg-type]
    client = ChatClient()
    run = Run(scn, RunOptions(quiet=True), rd, target, http or ChatHTTP(), client, Adapter(), 0)  # type: ignore[arg-type]
    return run, client


async def test_each_turn_resends_the_history_with_the_answers_and_is_one_row(tmp_path) -> None:
    scn = scenario()
    run, client = make_run(tmp_path, scn)
    await run_sessions(run, [])
    run.rd.close()
    turns = read_jsonl(tmp_path / "turns.jsonl")
    assert len(turns) == 9 and Counter(t["session_id"] for t in turns) == {0: 3, 1: 3, 2: 3}
    by_user: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for t in turns:
        by_user[t["session_id"]].append(t)
    for rows in by_user.values():
        rows.sort(key=lambda t: t["turn"])
        salts = set()
        for k, t in enumerate(rows):
            msgs = client.bodies[t["request_id"]]["messages"]
            assert [m["role"] for m in msgs] == ["system", *["user", "assistant"] * k, "user"]
            # the history carries this user's previous answers, in order
            assert [m["content"] for m in msgs[2::2]] == [f"answer {p['request_id']}" for p in rows[:k]]
            assert t["context_tokens"] == count_messages(msgs) == t["prompt_tokens_server"]
            assert t["new_tokens"] == t["context_tokens"] - (rows[k - 1]["context_tokens"] if k else 0)
            salts.add(" ".join(msgs[0]["content"].split()[:6]))
            assert t["tier_source"] == "unavailable" and t["tier"] == "none"  # cached 0: none served it
        assert len(salts) == 1  # the cached phase keeps one salt for the whole conversation
    # every user's first message is its own; the system prompt is everyone's
    firsts = [client.bodies[rows[0]["request_id"]]["messages"] for rows in by_user.values()]
    assert len({m[1]["content"] for m in firsts}) == 3 and len({m[0]["content"] for m in firsts}) == 1
    assert client.peak <= 2  # active users
    (phase,) = read_manifest(tmp_path)["phases"]
    assert phase["name"] == "cached" and phase["sessions"]["users"] == 3 and phase["sessions"]["turns"] == 9
    assert phase["sessions"]["max_in_flight"] <= 2 and phase["requests"] == 9
    load = read_manifest(tmp_path)["load"]
    assert (load["kind"], load["requests"], load["prompt_count"]) == ("sessions-closed", 9, 3)
    assert run.summary_lines[-1].startswith("cached: 9 turns, at most ")


async def test_the_baseline_replays_the_cached_answers_with_a_fresh_salt_each_turn(tmp_path) -> None:
    run, client = make_run(tmp_path, scenario(**{"test.baseline": True, "test.users": 2}))
    await run_sessions(run, [])
    run.rd.close()
    turns = read_jsonl(tmp_path / "turns.jsonl")
    cached = {(t["session_id"], t["turn"]): t for t in turns if t["phase"] == "cached"}
    base = {(t["session_id"], t["turn"]): t for t in turns if t["phase"] == "baseline"}
    assert set(base) == set(cached) and len(base) == 6
    firsts = set()
    for key, t in base.items():
        msgs = client.bodies[t["request_id"]]["messages"]
        twin = client.bodies[cached[key]["request_id"]]["messages"]
        assert msgs[1:] == twin[1:]  # the cached phase's history and message, word for word
        assert msgs[0]["content"] != twin[0]["content"]  # re-salted: nothing reusable
        firsts.add(msgs[0]["content"])
    assert len(firsts) == 6  # a fresh salt every turn, not per user
    assert [p["name"] for p in read_manifest(tmp_path)["phases"]] == ["cached", "baseline"]


async def test_a_conversation_stops_at_the_context_cap(tmp_path) -> None:
    # turn 0: 12 + 20 words + 2 templates (+ salt); each later turn adds an answer and a message
    scn = scenario(**{"test.max_context_tokens": 80, "test.users": 1, "test.turns": 6})
    run, client = make_run(tmp_path, scn)
    await run_sessions(run, [])
    run.rd.close()
    turns = sorted(read_jsonl(tmp_path / "turns.jsonl"), key=lambda t: t["turn"])
    assert all(t["context_tokens"] + 5 <= 80 for t in turns)  # every sent turn fit with its answer
    last = client.bodies[turns[-1]["request_id"]]["messages"]
    grown = count_messages(last) + len(["answer", "x-cached-1"]) + TEMPLATE + 8 + TEMPLATE
    assert grown + 5 > 80  # the next turn could not have fit
    assert 1 <= len(turns) < 6
    (phase,) = read_manifest(tmp_path)["phases"]
    assert phase["sessions"]["stopped_at_context_cap"] == 1
    assert "1 stopped at the context cap" in run.summary_lines[-1]


async def test_without_a_messages_counter_the_context_is_estimated(tmp_path) -> None:
    run, _ = make_run(tmp_path, scenario(**{"test.users": 1, "test.turns": 2}), ChatHTTP(tokenize=False))
    await run_sessions(run, [])
    run.rd.close()
    turns = sorted(read_jsonl(tmp_path / "turns.jsonl"), key=lambda t: t["turn"])
    assert len(turns) == 2 and all(t["context_tokens"] is None and t["new_tokens"] is None for t in turns)
    assert all(t["user_tokens"] is None for t in turns)  # nothing counted them either


async def test_the_messages_counter_reads_count_or_tokens_and_refuses_a_bad_answer() -> None:
    class Answers:
        def __init__(self, status: int, body: Any) -> None:
            self.status, self.body = status, body

        async def request(self, method: str, path: str, payload: dict[str, Any]) -> tuple[int, Any]:
            assert path == "/tokenize" and "messages" in payload
            return self.status, self.body

    def run_with(status: int, body: Any) -> Any:
        return types.SimpleNamespace(http=Answers(status, body), target=types.SimpleNamespace(model="m"))

    count = await messages_counter(run_with(200, {"count": 17}))
    assert count is not None and await count([{"role": "user", "content": "x"}]) == 17
    tokens = await messages_counter(run_with(200, {"tokens": [1, 2, 3, 4]}))
    assert tokens is not None and await tokens([]) == 4
    assert await messages_counter(run_with(404, {"detail": "no"})) is None
    assert await messages_counter(run_with(200, ["not", "a", "dict"])) is None
    assert await messages_counter(run_with(200, {"count": 0})) is None  # counts nothing: not relied on


async def test_every_message_is_built_at_its_token_target() -> None:
    scn = scenario(**{"test.turns": 3})
    from kvbench.load.sessions import content_counter, plan_sessions

    async def count_one(text: str) -> int:
        return count_messages([{"role": "user", "content": text}])

    plans = plan_sessions(scn.test)
    texts = await build_texts(scn.test, plans, content_counter(count_one))
    assert len(texts.system.split()) == 12
    assert [[len(t.split()) for t in u] for u in texts.users] == [[20, 8, 8]] * 3
    assert texts.user_tokens == [[20, 8, 8]] * 3
    unsized = await build_texts(scn.test, plans, None)
    assert unsized.user_tokens == [[None] * 3] * 3 and unsized.users == texts.users
