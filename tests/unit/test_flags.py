"""Every general flag of `kvbench run` on every test type: it lands on the field that test reads,
or the command exits 2 with one clean line (no pydantic wording, no machine path)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from kvbench.scenario import PACKAGE_SCENARIOS

TESTS: dict[str, list[str]] = {
    "ttft": ["ttft"],
    "throughput": ["throughput"],
    "noisy": ["throughput", "--noisy"],
    "sessions": ["sessions"],
    "replay": ["replay"],
}

# every general flag, with a valid value (aliases included: they must behave as their option)
FLAGS: dict[str, list[str]] = {
    "concurrency": ["--concurrency", "3"],
    "max-concurrency": ["--max-concurrency", "3"],
    "requests": ["--requests", "7"],
    "num-prompts": ["--num-prompts", "7"],
    "rate": ["--rate", "5"],
    "request-rate": ["--request-rate", "5"],
    "rate+concurrency": ["--rate", "5", "--max-concurrency", "3"],
    "random-input-len": ["--random-input-len", "1234"],
    "max-tokens": ["--max-tokens", "9"],
    "random-output-len": ["--random-output-len", "9"],
    "lengths": ["--lengths", "1234"],
    "prompts": ["--prompts", "3"],
    "repetitions": ["--repetitions", "2"],
    "retries": ["--retries", "1"],
    "max-error-rate": ["--max-error-rate", "0.1"],
    "baseline": ["--baseline"],
    "noisy": ["--noisy"],
    "pairs": ["--pairs", "2"],
    "empty-cache": ["--noisy", "--empty-cache"],
    "trace": ["--trace", "traces/ci.jsonl"],
}


def _concurrency(s: Any) -> int | None:
    if s.test.kind == "sessions":
        return s.test.active_users
    if s.test.kind == "replay":
        return s.test.concurrency if s.test.schedule == "concurrent" else s.test.max_concurrency
    return getattr(s.load, "concurrency", None) or getattr(s.load, "max_concurrency", None)


def _rate(s: Any) -> float | None:
    return s.test.rate if s.test.kind == "replay" else getattr(s.load, "rate", None)


def _requests(s: Any) -> int | None:
    return s.test.trace.limit if s.test.kind == "replay" else getattr(s.load, "requests", None)


def _output(s: Any) -> tuple[int, bool]:
    return s.output.max_tokens, s.test.kind != "replay" or s.test.output_tokens == "scenario"


# what the resolved scenario must show when a flag is accepted (flags without an entry: validity only)
EXPECT: dict[str, Any] = {
    "concurrency": (_concurrency, 3),
    "max-concurrency": (_concurrency, 3),
    "requests": (_requests, 7),
    "num-prompts": (_requests, 7),
    "rate": (_rate, 5.0),
    "request-rate": (_rate, 5.0),
    "rate+concurrency": (lambda s: (_rate(s), _concurrency(s)), (5.0, 3)),
    "random-input-len": (lambda s: s.prompts.lengths, [1234]),
    "lengths": (lambda s: s.prompts.lengths, [1234]),
    "max-tokens": (_output, (9, True)),
    "random-output-len": (_output, (9, True)),
    "repetitions": (lambda s: s.repetitions, 2),
}

FORBIDDEN = ("Unable to extract tag", "Input should be", "validation error", "type=", "Field required")


@pytest.fixture
def resolved(monkeypatch):
    """The scenario `kvbench run` would execute, without running it."""
    seen: list[Any] = []

    def fake_execute(scn: Any, **_: Any) -> int:
        seen.append(scn)
        return 0

    monkeypatch.setattr("kvbench.run.commands.execute", fake_execute)
    return seen


@pytest.mark.parametrize("flag", list(FLAGS))
@pytest.mark.parametrize("test", list(TESTS))
def test_general_flag_runs_or_is_one_clean_line(kvbench, resolved, test: str, flag: str) -> None:
    code, _, err = kvbench("run", *TESTS[test], *FLAGS[flag])
    assert code in (0, 2), (code, err)
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("kvbench: "), err
        assert not any(word in err for word in FORBIDDEN), err
        for path in (str(PACKAGE_SCENARIOS.resolve()), os.getcwd(), "/site-packages/"):
            assert path not in err, err
        assert not resolved
        return
    (scn,) = resolved
    if flag in EXPECT:
        read, want = EXPECT[flag]
        assert read(scn) == want, (test, flag, read(scn))


@pytest.mark.parametrize(
    ("test", "flag"),
    [
        ("replay", "concurrency"),
        ("replay", "rate"),
        ("replay", "requests"),
        ("throughput", "rate"),
        ("noisy", "rate"),
        ("noisy", "concurrency"),
        ("sessions", "concurrency"),
        ("ttft", "random-input-len"),
    ],
)
def test_the_flags_the_issues_name_work(kvbench, resolved, test: str, flag: str) -> None:
    code, _, err = kvbench("run", *TESTS[test], *FLAGS[flag])
    assert code == 0, err
    assert resolved


@pytest.mark.parametrize(
    ("test", "flag", "names"),
    [
        ("ttft", "concurrency", "kvbench run throughput --concurrency N"),
        ("ttft", "rate", "kvbench run throughput --rate R"),
        ("sessions", "rate", "test.arrival_rate_per_s"),
        ("sessions", "requests", "test.users"),
        ("replay", "random-input-len", "trace"),
    ],
)
def test_a_refusal_names_the_form_that_works(kvbench, resolved, test: str, flag: str, names: str) -> None:
    code, _, err = kvbench("run", *TESTS[test], *FLAGS[flag])
    assert code == 2
    assert names in err and FLAGS[flag][0] in err, err


def test_replay_concurrency_is_a_closed_loop_and_drops_a_rate(kvbench, resolved) -> None:
    code, _, err = kvbench("run", "replay", "--rate", "5")
    assert code == 0, err
    code, _, err = kvbench("run", "replay", "--concurrency", "1")
    assert code == 0, err
    scn = resolved[-1]
    assert (scn.test.schedule, scn.test.concurrency, scn.test.rate) == ("concurrent", 1, None)


def test_an_option_and_its_alias_disagreeing_is_one_line(kvbench, resolved) -> None:
    code, _, err = kvbench("run", "throughput", "--rate", "5", "--request-rate", "6")
    assert code == 2 and "--request-rate 6.0 and --rate 5.0" in err, err
    code, _, err = kvbench("run", "throughput", "--rate", "5", "--request-rate", "5")
    assert code == 0, err


def test_rate_must_be_positive(kvbench, resolved) -> None:
    code, _, err = kvbench("run", "throughput", "--rate", "0")
    assert code == 2 and "--rate 0" in err and len(err.strip().splitlines()) == 1


def test_help_explains_every_alias(kvbench, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = kvbench("run", "--help")
    assert code == 0
    for alias, of in (
        ("--max-concurrency", "--concurrency"),
        ("--num-prompts", "--requests"),
        ("--request-rate", "--rate"),
        ("--random-output-len", "--max-tokens"),
    ):
        line = next(line for line in out.splitlines() if f"{alias} " in line and "The same as" in line)
        assert f"The same as {of} " in line
    assert "replay:     test.schedule=concurrent" in out
