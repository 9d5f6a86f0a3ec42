"""The hit-rate dial's check of a measured phase (kvbench.run.hit_rate.check_phase, dial_for): the
expected whole-block hit against what usage and /metrics said, per request and for the phase."""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import pytest

from kvbench.client import RequestRecord
from kvbench.load.prompts import Prompt, make_salt, word_stream
from kvbench.mock.profiles import load_profile
from kvbench.run.hit_rate import Dial, check_phase, dial_for, fresh_suffix_salt, ratio
from kvbench.scenario import Scenario

SALT = "one two three four five six"


def prompts(lengths: list[int]) -> list[Prompt]:
    return [Prompt(i, n, " ".join(word_stream(9, i + 1, n))) for i, n in enumerate(lengths)]


def whole_blocks(dial: Dial, p: Prompt) -> tuple[int, int]:
    """(expected cached, prompt words) by the rule the module states: the primed prefix in whole
    blocks, never the block holding the last token."""
    n = len(p.with_salt(SALT).split())
    prefix = round(dial.hit_rate * n)
    return min(prefix // dial.block_tokens, (n - 1) // dial.block_tokens) * dial.block_tokens, n


class Adapter:
    def hits(self, deltas: dict[str, float]) -> float | None:
        return deltas.get("hits")

    def queries(self, deltas: dict[str, float]) -> float | None:
        return deltas.get("queries")


def fake_run(records: list[RequestRecord], deltas: dict[str, float] | None = None) -> Any:
    logged: list[str] = []
    return types.SimpleNamespace(
        records=records,
        metric_deltas={"cached": deltas} if deltas else {},
        adapter=Adapter(),
        progress=types.SimpleNamespace(log=logged.append),
        logged=logged,
    )


def rec(p: Prompt, cached: int | None, words: int, ok: bool = True, rep: int = 0) -> RequestRecord:
    r = RequestRecord(request_id=f"r{p.prompt_id}", phase="cached", repetition=rep, prompt_id=p.prompt_id)
    r.prompt_tokens, r.prompt_tokens_server, r.cached_tokens = words, words, cached
    if not ok:
        r.fail("http_500", "boom")
    return r


def test_a_phase_that_hit_what_was_expected_is_not_flagged() -> None:
    dial = Dial(0.6, 0.02, 16, "mock profile ci")
    ps = prompts([300, 517, 90])
    expected = [whole_blocks(dial, p) for p in ps]
    run = fake_run([rec(p, c, n) for p, (c, n) in zip(ps, expected, strict=True)])
    out = check_phase(run, dial, "cached", 0, ps, SALT)
    want = sum(c for c, _ in expected) / sum(n for _, n in expected)
    assert out["expected"] == round(want, 4) and out["measured_usage"] == round(want, 4)
    assert out["hit_rate_off"] is False and out["requests_off"] == 0 and out["requests"] == 3
    assert out["measured_metrics"] is None and out["block_tokens"] == 16
    assert run.logged == [
        f"cached: hit rate requested 0.6, expected {round(want, 4)} (16-token blocks), "
        f"measured {round(want, 4)} (usage) / None (/metrics)"
    ]


def test_a_phase_that_hit_nothing_is_flagged_by_usage_and_metrics() -> None:
    dial = Dial(0.5, 0.05, 16, "mock profile ci")
    ps = prompts([256, 400])
    words = [whole_blocks(dial, p)[1] for p in ps]
    total = float(sum(words))
    run = fake_run([rec(p, 0, n) for p, n in zip(ps, words, strict=True)], {"hits": 0.0, "queries": total})
    out = check_phase(run, dial, "cached", 0, ps, SALT)
    assert out["hit_rate_off"] is True and out["requests_off"] == 2
    assert out["measured_usage"] == 0.0 and out["measured_metrics"] == 0.0
    assert run.logged[0].startswith("warning: cached: hit rate requested 0.5")
    assert run.logged[0].endswith(": off by more than 0.05")


def test_only_the_phases_own_answered_rows_count() -> None:
    dial = Dial(0.5, 0.01, 1, "unknown")
    ps = prompts([100, 100])
    c0, n0 = whole_blocks(dial, ps[0])
    records = [
        rec(ps[0], c0, n0),
        rec(ps[1], 0, n0, ok=False),  # failed: not measured
        rec(ps[1], 0, n0, rep=1),  # another repetition
    ]
    out = check_phase(fake_run(records), dial, "cached", 0, ps, SALT)
    assert out["requests"] == 1 and out["hit_rate_off"] is False
    assert out["expected"] == round(c0 / n0, 4)


def test_nothing_to_measure_it_by_is_unknown_not_off() -> None:
    dial = Dial(0.5, 0.01, 16, "unknown")
    ps = prompts([200])
    run = fake_run([rec(ps[0], None, 206)])  # no usage.cached_tokens, no hit counters
    out = check_phase(run, dial, "cached", 0, ps, SALT)
    assert out["hit_rate_off"] is None and out["measured_usage"] is None and out["requests_off"] == 0
    assert run.logged[0].endswith("nothing measured it (no cached_tokens in usage, no hit counters)")
    empty = check_phase(fake_run([]), dial, "cached", 0, ps, SALT)
    assert empty["expected"] is None and empty["hit_rate_off"] is None


def test_ratio_rounds_and_refuses_an_empty_total() -> None:
    assert ratio(1, 3) == 0.3333 and ratio(None, 3) is None and ratio(5, 0) is None and ratio(5, None) is None


def scenario(hit_rate: float | None, **target: Any) -> Scenario:
    return Scenario.model_validate(
        {
            "name": "hr",
            "test": "throughput",
            "target": target,
            "prompts": {
                "count": 2,
                "lengths": [500],
                "reuse": {} if hit_rate is None else {"hit_rate": hit_rate},
            },
            "load": {"kind": "concurrent", "concurrency": 2, "requests": 4},
        }
    )


def test_the_dial_takes_the_mock_profiles_block_and_a_real_server_has_none() -> None:
    assert dial_for(types.SimpleNamespace(scn=scenario(None), target=None)) is None
    real = dial_for(types.SimpleNamespace(scn=scenario(0.4), target=types.SimpleNamespace(mock=None)))
    assert real is not None and (real.block_tokens, real.hit_rate) == (1, 0.4)
    assert real.block_source.startswith("unknown")
    scn = scenario(0.4, mock_profile="ci", mock_overrides={"block_tokens": 32})
    mocked = dial_for(types.SimpleNamespace(scn=scn, target=types.SimpleNamespace(mock=object())))
    want = load_profile("ci", {**scn.test.mock_defaults, "block_tokens": 32}).block_tokens
    assert mocked is not None and mocked.block_tokens == want == 32
    assert mocked.block_source == "mock profile ci"


def test_the_fresh_suffix_comes_from_the_runs_salt_stream() -> None:
    run = types.SimpleNamespace(salt_rng=np.random.default_rng(5))
    again = np.random.default_rng(5)
    assert [fresh_suffix_salt(run) for _ in range(3)] == [make_salt(again) for _ in range(3)]


@pytest.mark.parametrize("hit_rate", [0.0, 1.0])
def test_the_ends_of_the_dial_prime_one_word_or_the_whole_prompt(hit_rate: float) -> None:
    dial = Dial(hit_rate, 0.01, 16, "x")
    p = prompts([58])[0]  # 64 words with the salt: four whole blocks
    words = p.with_salt(SALT).split()
    prime = dial.prime_text(p, SALT).split()
    assert prime == words[: max(round(hit_rate * len(words)), 1)]
    measured = dial.measured_text(p, SALT, "fresh " * 6).split()
    assert len(measured) == len(words)  # the fresh suffix replaces words, it adds none
    if hit_rate == 1.0:
        # the whole prompt primed, yet its last block is recomputed: it holds the last token
        assert measured == words and len(words) == 64 and dial.expected_cached(64, 64) == 48
