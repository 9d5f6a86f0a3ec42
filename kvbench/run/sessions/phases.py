"""The sessions test: multi-turn conversations, each turn resending the whole history.

Phases: `cached` (the run's salt opens every conversation, so a turn can reuse the history the
server kept from the user's previous turn, and the system prompt all users share) and, with
`--baseline`, `baseline`: the same conversations replayed turn by turn (the cached phase's own
answers as the history) with a FRESH salt per turn, so nothing can be reused. The cache is
reset before each phase; the cold start is verified before the first, as for every test.

A user is one task: a closed loop keeps `active_users` conversations going (a finished user is
replaced by the next), an open loop lets users arrive at `arrival_rate_per_s`, at most
`active_users` at once, so never more requests are in flight than that. A user sends a turn,
waits for the answer, appends it as the assistant message, builds and counts the next turn
with the server's /tokenize while it "thinks", then sleeps the rest of its pause. Each turn is
a row of requests.jsonl and of turns.jsonl (kvbench.results.turns).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp

from kvbench.engines.token_count import server_token_counter
from kvbench.load.prompts import Prompt, make_salt
from kvbench.load.schedule import WorkItem, run_closed_loop, run_open_loop
from kvbench.load.sessions import (
    ContentCounter,
    Conversation,
    SessionPlan,
    chat_body,
    content_counter,
    fit_message,
    plan_sessions,
    stream_of,
)
from kvbench.results.schema import Label, LoadShape, SessionsPhase
from kvbench.results.turns import TURNS, TurnRow, per_turn, serving_tier, turn_table_lines
from kvbench.run.context import phase_entry
from kvbench.run.sessions.record import phase_done, sessions_record
from kvbench.run.sessions.tiers import CounterWindow, GroundTruthTail, SendCounter
from kvbench.scenario import SessionsSection

if TYPE_CHECKING:
    from kvbench.client import RequestRecord
    from kvbench.results.files import JsonlWriter
    from kvbench.run.context import Run

MESSAGE_COUNT_PARALLEL = 8
GROUND_TRUTH = "mock_ground_truth.jsonl"
_COUNT_ERRORS = (aiohttp.ClientError, OSError, TimeoutError, LookupError, ValueError, TypeError)
MessagesCounter = Callable[[list[dict[str, str]]], Awaitable[int]]


@dataclass
class SessionTexts:
    """What every user says, built token-exact before the first phase (the baseline reuses it)."""

    system: str
    users: list[list[str]]
    user_tokens: list[list[int | None]]


async def build_texts(
    knobs: SessionsSection, plans: list[SessionPlan], count: ContentCounter | None
) -> SessionTexts:
    """The system prompt and every user message, each at its token target (server-counted)."""
    sem = asyncio.Semaphore(MESSAGE_COUNT_PARALLEL)

    async def one(target: int, session: int | None, turn: int) -> tuple[str, int | None]:
        async with sem:
            return await fit_message(target, stream_of(knobs.seed, session, turn), count)

    system = (await one(knobs.system_prompt_tokens, None, 0))[0] if knobs.system_prompt_tokens else ""
    users: list[list[str]] = []
    tokens: list[list[int | None]] = []
    for p in plans:
        sizes = [knobs.first_message_tokens if k == 0 else knobs.turn_tokens for k in range(p.turns)]
        done = await asyncio.gather(*(one(n, p.session_id, k) for k, n in enumerate(sizes)))
        users.append([t for t, _ in done])
        tokens.append([n for _, n in done])
    return SessionTexts(system, users, tokens)


async def messages_counter(run: Run) -> MessagesCounter | None:
    """count(messages): prompt tokens with the chat template, by /tokenize with `messages`
    (vLLM, SGLang, the mock); None where the server cannot (llama.cpp: usage then says)."""

    async def count(messages: list[dict[str, str]]) -> int:
        status, body = await run.http.request(
            "POST", "/tokenize", {"model": run.target.model, "messages": messages}
        )
        if status != 200 or not isinstance(body, dict):
            raise LookupError(f"/tokenize answered {status}")
        if isinstance(body.get("count"), int):
            return int(body["count"])
        return len(body["tokens"])

    try:
        if await count([{"role": "user", "content": "hello world"}]) > 0:
            return count
    except _COUNT_ERRORS:  # any of these means: no messages counter to rely on
        pass
    return None


@dataclass
class Phase:
    """One phase of the sessions test: what its users share while they talk."""

    run: Run
    plans: list[SessionPlan]
    texts: SessionTexts
    name: str
    label: Label
    rep: int
    writer: JsonlWriter
    count_messages: MessagesCounter | None
    gt: GroundTruthTail | None
    cap: int
    salt: str = ""
    replay: dict[int, Conversation] | None = None  # baseline: the cached phase's conversations
    replay_turns: dict[int, int] = field(default_factory=dict)
    convs: dict[int, Conversation] = field(default_factory=dict)
    turns_done: dict[int, int] = field(default_factory=dict)
    sends: SendCounter = field(default_factory=SendCounter)
    rows: list[dict[str, Any]] = field(default_factory=list)
    stopped_at_cap: int = 0

    def __post_init__(self) -> None:
        cfg = self.run.client.cfg
        base: dict[str, Any] = {
            "model": cfg.model,
            "max_tokens": cfg.max_tokens,
            "temperature": cfg.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if cfg.ignore_eos:
            base["ignore_eos"] = True
        base.update({k: v for k, v in cfg.extra_body.items() if k != "messages"})
        self.base = base

    async def user(self, item: WorkItem, scheduled_ns: int) -> None:
        """One user's whole conversation, turn after turn."""
        plan = self.plans[item.prompt_id]
        s = plan.session_id
        conv = Conversation(salt=self.salt)
        if self.texts.system:
            conv.add("system", self.texts.system)
        self.convs[s] = conv
        n_turns = plan.turns if self.replay is None else self.replay_turns.get(s, 0)
        prev_end: int | None = None
        prev_ctx: int | None = None
        prev_out = 0
        for k in range(n_turns):
            user = self.texts.users[s][k]
            if self.replay is not None:  # the cached phase's history, a fresh salt every turn
                upto = (1 if self.texts.system else 0) + 2 * k
                msgs, pieces = self.replay[s].turn(user, salt=make_salt(self.run.salt_rng), upto=upto)
            else:
                msgs, pieces = conv.turn(user)
            ctx = await self._count(msgs)  # during the user's pause: off the timed path
            # uncounted (no messages /tokenize): the last prompt, its answer and the new message
            need = (
                ctx if ctx is not None else (prev_ctx or 0) + prev_out + (self.texts.user_tokens[s][k] or 0)
            )
            if need + self.run.client.cfg.max_tokens > self.cap:
                self.stopped_at_cap += 1
                break
            if prev_end is not None:
                wait = prev_end + int(plan.think_s[k] * 1e9) - time.perf_counter_ns()
                if wait > 0:
                    await asyncio.sleep(wait / 1e9)
            rec, row = await self._turn(plan, k, pieces, ctx, prev_ctx, prev_end)
            prev_end = time.perf_counter_ns()
            if not rec.ok:
                break
            prev_ctx = row["context_tokens"] or row["prompt_tokens_server"]
            prev_out = rec.output_tokens or 0
            conv.add("user", user)
            conv.add("assistant", rec.output_text)
            self.turns_done[s] = k + 1

    async def _count(self, msgs: list[dict[str, str]]) -> int | None:
        if self.count_messages is None:
            return None
        try:
            return int(await self.count_messages(msgs))
        except _COUNT_ERRORS:  # an uncounted turn is still sent; usage.prompt_tokens gives its size
            return None

    async def _turn(
        self,
        plan: SessionPlan,
        k: int,
        pieces: list[bytes],
        ctx: int | None,
        prev_ctx: int | None,
        prev_end: int | None,
    ) -> tuple[RequestRecord, dict[str, Any]]:
        run = self.run
        s = plan.session_id
        body = chat_body(self.base, pieces)
        window = CounterWindow(run.adapter, self._scrape, self.sends) if self.gt is None else None
        if window is not None:
            await window.open()
        in_flight = self.sends.started()
        sent_perf = time.perf_counter_ns()
        try:
            prompt = Prompt(s, ctx or 0, "", ctx, "server" if ctx is not None else "estimate")
            rec = await run.issue(
                phase=self.name, label=self.label, rep=self.rep, prompt=prompt, text="", body=body
            )
        finally:
            self.sends.ended()
        by_tier, source = await self._tiers(rec.request_id, window)
        exact = source in ("mock_ground_truth", "counters")
        row = TurnRow(
            phase=self.name,
            label=str(self.label),
            session_id=s,
            turn=k,
            request_id=rec.request_id,
            ok=rec.ok,
            context_tokens=ctx,
            prompt_tokens_server=rec.prompt_tokens_server,
            new_tokens=None if ctx is None else ctx - (prev_ctx or 0),
            user_tokens=self.texts.user_tokens[s][k],
            cached_tokens=rec.cached_tokens,
            output_tokens=rec.output_tokens,
            ttft_ms=_ms(rec.first_token_ns, rec.sent_ns),
            e2e_ms=_ms(rec.end_ns, rec.sent_ns),
            tier=serving_tier(by_tier, rec.cached_tokens)
            if exact
            else ("none" if rec.cached_tokens == 0 else None),
            tokens_by_tier=by_tier,
            tier_source=source,
            think_s=plan.think_s[k],
            since_prev_turn_s=None if prev_end is None else (sent_perf - prev_end) / 1e9,
            in_flight=in_flight,
            sent_ns=rec.sent_ns,
            answer_truncated=rec.output_chars > len(rec.output_text),
        ).model_dump()
        self.writer.write(row)
        self.rows.append(row)
        return rec, row

    async def _tiers(self, request_id: str, window: CounterWindow | None) -> tuple[dict[str, float], str]:
        if self.gt is not None:
            truth = await self.gt.lookup(request_id)
            if truth is None:
                return {}, "unavailable"
            return {
                t: float(n) for t, n in (truth.get("tokens_from_tier") or {}).items() if n
            }, "mock_ground_truth"
        if window is not None:
            return await window.close()
        return {}, "unavailable"

    async def _scrape(self) -> dict[Any, float] | None:
        from kvbench.engines.telemetry import parse_metrics

        try:
            status, text = await self.run.http.get_text("/metrics")
        except (aiohttp.ClientError, OSError, TimeoutError):  # no metrics: the tier stays unknown
            return None
        return parse_metrics(text) if status == 200 else None


def _ms(a: int | None, b: int | None) -> float | None:
    return None if a is None or b is None else (a - b) / 1e6


async def run_phase(run: Run, phase: Phase, knobs: SessionsSection) -> None:
    """Run every user of a phase under the closed or open loop; record the phase entry."""
    plans = phase.plans
    total = sum(p.turns for p in plans) if phase.replay is None else sum(phase.replay_turns.values())
    run.progress.start_phase(phase.name, total)
    before = await run.phase_boundary(phase.name)
    items = [WorkItem(p.session_id, p.session_id, p.arrival_s) for p in plans]
    started = run.client.now()
    async with run.scraper.during(phase.name, run.scn.telemetry.interval_s):
        try:
            if knobs.arrival_rate_per_s:
                await run_open_loop(items, knobs.max_active, phase.user)
            else:
                await run_closed_loop(items, knobs.max_active, phase.user)
        finally:
            run.progress.end_phase()
        ended = run.client.now()  # before the sampler's closing read, which is not phase time
    after = await run.scraper.scrape(phase.name)
    run.end_metrics(phase.name, before, after)
    entry = phase_entry(
        run,
        phase.name,
        phase.label,
        phase.rep,
        started,
        ended=ended,
        sessions=SessionsPhase(
            users=len(plans),
            turns=len(phase.rows),
            active_users=knobs.max_active,
            max_in_flight=phase.sends.max_in_flight,
            stopped_at_context_cap=phase.stopped_at_cap,
        ),
    )
    run.add_phase(entry)


async def run_sessions(run: Run, prompts: list[Prompt]) -> None:
    """The test's plan: texts, then per repetition a cached phase and (--baseline) its replay."""
    scn = run.scn
    knobs = scn.test
    assert isinstance(knobs, SessionsSection)
    plans = plan_sessions(knobs)
    cap = knobs.max_context_tokens
    if run.target.max_model_len:
        cap = min(cap, run.target.max_model_len)
    record = sessions_record(knobs, plans, run.client.cfg.max_tokens, cap)
    run.rd.update(load=_load_shape(knobs, plans, run.client.cfg.max_tokens), sessions=record)
    one = await server_token_counter(run.http, run.target.model, run.target.engine, "chat")
    t0 = time.perf_counter()
    texts = await build_texts(knobs, plans, content_counter(one) if one else None)
    count_messages = await messages_counter(run)
    run.progress.log(
        f"{len(plans)} users, {sum(p.turns for p in plans)} turns planned; messages built in "
        f"{time.perf_counter() - t0:.1f}s, counted by {'the server' if one else 'estimate (no /tokenize)'}"
    )
    gt = GroundTruthTail(run.rd.path / GROUND_TRUTH) if run.target.mock is not None else None
    writer = run.rd.writer(TURNS)
    rows: list[dict[str, Any]] = []
    notes: list[str] = []

    def phase(name: str, label: Label, rep: int, **kw: Any) -> Phase:
        return Phase(run, plans, texts, name, label, rep, writer, count_messages, gt, cap, **kw)

    def ran(p: Phase) -> None:  # the record gains what the phase's users took of their plan
        nonlocal record
        planned = p.replay_turns if p.replay is not None else {q.session_id: q.turns for q in plans}
        record = record.model_copy(update={"done": [*record.done, phase_done(p.name, planned, p.turns_done)]})
        run.rd.update(sessions=record)

    try:
        for rep in range(scn.repetitions):
            sfx = f"-r{rep + 1}" if scn.repetitions > 1 else ""
            await run.reset()
            cached = phase(f"cached{sfx}", Label.CACHED, rep, salt=run.new_salt())
            await run_phase(run, cached, knobs)
            ran(cached)
            rows += cached.rows
            notes.append(_phase_note(cached, knobs))
            if knobs.baseline:
                await run.reset()
                base = phase(
                    f"baseline{sfx}",
                    Label.BASELINE,
                    rep,
                    replay=cached.convs,
                    replay_turns=dict(cached.turns_done),
                )
                await run_phase(run, base, knobs)
                ran(base)
                rows += base.rows
                notes.append(_phase_note(base, knobs))
    finally:
        writer.close()
    run.summary_lines = [*turn_table_lines(per_turn(rows)), *notes]


def _phase_note(phase: Phase, knobs: SessionsSection) -> str:
    sources = sorted({r["tier_source"] for r in phase.rows})
    cap = f", {phase.stopped_at_cap} stopped at the context cap" if phase.stopped_at_cap else ""
    return (
        f"{phase.name}: {len(phase.rows)} turns, at most {phase.sends.max_in_flight} in flight "
        f"(active users {knobs.max_active}){cap}; tier from {', '.join(sources) or '-'}"
    )


def _load_shape(knobs: SessionsSection, plans: list[SessionPlan], max_tokens: int) -> LoadShape:
    """The manifest's load: users at once (closed loop) or arriving (open loop), turns per phase."""
    return LoadShape(
        kind="sessions-open" if knobs.arrival_rate_per_s else "sessions-closed",
        concurrency=knobs.max_active,
        rate=knobs.arrival_rate_per_s,
        requests=sum(p.turns for p in plans),
        prompt_count=len(plans),
        lengths=[knobs.system_prompt_tokens + knobs.first_message_tokens, knobs.turn_tokens],
        max_tokens=max_tokens,
    )
