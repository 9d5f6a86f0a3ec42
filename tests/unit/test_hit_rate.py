"""The hit-rate dial's pure parts: validation, the prime / measured texts (checked with the mock's
own block keys), the whole-block expected hit, the throughput plan it adds."""

import sys

import pytest

from kvbench.load.prompts import SALT_WORDS, Prompt, make_salt, word_stream
from kvbench.mock.tokenizer import block_keys
from kvbench.run.hit_rate import Dial
from kvbench.run.throughput import throughput_plan
from kvbench.scenario import Scenario

BASE = {
    "name": "hr",
    "test": "throughput",
    "prompts": {"count": 2, "lengths": [2000]},
    "load": {"kind": "concurrent", "concurrency": 2, "requests": 4},
}


def scenario(reuse: dict | None = None, **test: object) -> Scenario:
    data = {**BASE, "prompts": {**BASE["prompts"], "reuse": reuse or {}}}
    if test:
        data["test"] = {"kind": "throughput", **test}
    return Scenario.model_validate(data)


def prompt(n_words: int, seed: int = 3) -> Prompt:
    return Prompt(0, n_words + SALT_WORDS, " ".join(word_stream(seed, 1, n_words)))


def rng(seed: int):
    import numpy as np

    return np.random.default_rng(seed)


@pytest.mark.parametrize("bad", [-0.1, 1.5, "half", [0.5]])
def test_a_hit_rate_outside_0_1_or_not_a_number_is_refused(bad):
    with pytest.raises(ValueError, match="hit_rate"):
        scenario({"hit_rate": bad})


def test_the_dial_only_shapes_the_plain_cached_phase():
    with pytest.raises(ValueError, match=r"prompts\.reuse\.hit_rate: dials the plain cached phase"):
        scenario({"hit_rate": 0.5}, noisy={"enabled": True})
    ttft = {k: v for k, v in BASE.items() if k != "load"}
    with pytest.raises(ValueError, match="only the throughput test"):
        Scenario.model_validate(
            {**ttft, "test": "ttft", "prompts": {"lengths": [2000], "reuse": {"hit_rate": 0.5}}}
        )


def test_bad_input_on_the_command_line_is_one_line_and_exit_2(monkeypatch, capsys, tmp_path):
    from kvbench.cli import main

    argv = [
        "kvbench",
        "run",
        "throughput",
        "--set",
        "prompts.reuse.hit_rate=1.5",
        "--output-dir",
        str(tmp_path),
    ]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2
    assert "prompts.reuse.hit_rate" in err and "Traceback" not in err and len(err.splitlines()) == 1
    assert not any(tmp_path.iterdir())  # nothing ran


@pytest.mark.parametrize("hit_rate", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_measured_text_shares_exactly_the_expected_blocks_with_the_prime(hit_rate):
    dial = Dial(hit_rate, 0.05, 16, "test")
    p, salt = prompt(1994), make_salt(rng(1))
    prime = dial.prime_text(p, salt).split()
    one = dial.measured_text(p, salt, make_salt(rng(2))).split()
    two = dial.measured_text(p, salt, make_salt(rng(3))).split()
    n = len(p.with_salt(salt).split())
    assert len(one) == len(two) == n  # the dial keeps the prompt's length

    def shared_blocks(a: list[str], b: list[str]) -> int:
        ka, kb = block_keys([w.encode() for w in a], 16), block_keys([w.encode() for w in b], 16)
        return next(
            (i for i, (x, y) in enumerate(zip(ka, kb, strict=False)) if x != y), min(len(ka), len(kb))
        )

    prefix = round(hit_rate * n)
    expected_blocks = dial.expected_cached(n, prefix) // 16
    # the mock caches whole blocks of the prime; the engine recomputes the last token, hence the cap
    assert min(shared_blocks(prime, one), (n - 1) // 16) == expected_blocks
    if hit_rate < 1:  # two measured requests of one prompt share the prefix and nothing after it
        assert shared_blocks(one, two) == prefix // 16


def test_expected_hit_is_whole_blocks_before_the_last_token():
    dial = Dial(0.5, 0.05, 16, "test")
    assert dial.expected_cached(2000, 1000) == 992  # 62 whole blocks of the 1000-token prefix
    assert dial.expected_cached(2000, 2000) == 1984  # all of it primed: the last token is recomputed
    assert dial.expected_cached(2000, 15) == 0
    assert Dial(0.5, 0.05, 1, "test").expected_cached(2000, 1000) == 1000


def test_plan_primes_then_measures_with_the_same_salt():
    plans = throughput_plan(scenario({"hit_rate": 0.5}), restart=False)
    assert [(p.name, p.dial, p.salt_mode) for p in plans] == [
        ("prime", "prime", "run"),
        ("cached", "measure", "same"),
    ]
    plans = throughput_plan(scenario({"hit_rate": 0.0}), restart=False)  # nothing to prime
    assert [(p.name, p.dial, p.salt_mode) for p in plans] == [("cached", "measure", "run")]
    plans = throughput_plan(scenario(), restart=False)
    assert [(p.name, p.dial) for p in plans] == [("cached", None)]
