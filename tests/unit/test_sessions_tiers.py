"""Tier attribution per turn: the mock's ground truth read incrementally, counter windows exact or nothing."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from kvbench.engines.adapters import get_adapter
from kvbench.run.sessions.tiers import CounterWindow, GroundTruthTail, SendCounter


def test_ground_truth_tail_reads_new_lines_and_waits_for_a_late_one(tmp_path):
    path = tmp_path / "gt.jsonl"
    tail = GroundTruthTail(path)

    async def scenario() -> tuple[Any, Any, Any]:
        missing = await tail.lookup("a", wait_s=0.01)  # no file yet
        with path.open("w") as f:
            f.write(json.dumps({"request_id": "a", "tokens_from_tier": {"G1": 16}}) + "\n")
            f.write('{"request_id": "b", "tokens_fr')  # the mock is still writing this line
        got_a = await tail.lookup("a")

        async def finish_later() -> None:
            await asyncio.sleep(0.05)
            with path.open("a") as f:
                f.write('om_tier": {"G3": 32}}\n')

        late = asyncio.create_task(finish_later())
        got_b = await tail.lookup("b", wait_s=1.0)
        await late
        return missing, got_a, got_b

    missing, got_a, got_b = asyncio.run(scenario())
    assert missing is None
    assert got_a["tokens_from_tier"] == {"G1": 16}
    assert got_b["tokens_from_tier"] == {"G3": 32}


def _metrics(g1: float, g3: float) -> dict[Any, float]:
    name = "kvbench_mock_tier_hit_tokens_total"
    return {
        (name, (("model_name", "m"), ("tier", "G1"))): g1,
        (name, (("model_name", "m"), ("tier", "G3"))): g3,
    }


def test_counter_window_is_exact_for_a_turn_alone_and_refuses_an_overlap():
    adapter = get_adapter("mock")
    samples = iter([_metrics(100, 0), _metrics(132, 64), _metrics(132, 64), _metrics(200, 64)])

    async def scrape() -> dict[Any, float]:
        return next(samples)

    async def scenario() -> tuple[Any, Any]:
        sends = SendCounter()
        alone = CounterWindow(adapter, scrape, sends)
        await alone.open()
        sends.started()
        sends.ended()
        exact = await alone.close()
        crowded = CounterWindow(adapter, scrape, sends)
        await crowded.open()
        sends.started()
        sends.started()  # another user's turn went out meanwhile
        sends.ended()
        sends.ended()
        return exact, await crowded.close()

    exact, crowded = asyncio.run(scenario())
    assert exact == ({"G1": 32.0, "G3": 64.0}, "counters")
    assert crowded == ({}, "overlapped")


def test_counter_window_without_a_tier_counter_or_while_busy():
    async def scrape() -> dict[Any, float]:
        raise AssertionError("must not scrape")

    async def scenario() -> tuple[Any, Any]:
        none = CounterWindow(get_adapter("llamacpp"), scrape, SendCounter())
        await none.open()
        busy_sends = SendCounter()
        busy_sends.started()  # a request is already in flight when this turn starts
        busy = CounterWindow(get_adapter("mock"), scrape, busy_sends)
        await busy.open()
        busy_sends.started()
        return await none.close(), await busy.close()

    assert asyncio.run(scenario()) == (({}, "unavailable"), ({}, "overlapped"))
    s = SendCounter()
    s.started(), s.started(), s.ended(), s.started()
    assert s.max_in_flight == 2 and s.in_flight == 2 and s.sends == 3
